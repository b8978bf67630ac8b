package webhook_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/internal/webhook"
	"github.com/checkout-dev/checkout/internal/webhook/webhooktest"
)

// A dead letter that cannot be written is logged as such, as an error, and
// the notice fails (so that it is handed again); it used to be logged
// "dead-lettered" before the write that then failed.
func TestUnwritableDeadLetterIsLoggedAsSuch(t *testing.T) {
	t.Parallel()
	r := webhooktest.New("the-real-secret")
	defer r.Close()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var logs testenv.Buffer
	dl := &webhook.FileDeadLetters{Path: filepath.Join(file, "dead.jsonl")} // under a file: never written
	n := newNotifier(t, []string{r.URL}, "a-forger's-guess", dl, func(c *webhook.Config) {
		c.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	err := n.Notify(context.Background(), notice("a", 1))
	if err == nil || !strings.Contains(err.Error(), "dead letter not written") {
		t.Fatalf("Notify: %v; want the failed write", err)
	}
	out := logs.String()
	if strings.Contains(out, "dead-lettered") || !strings.Contains(out, `"level":"ERROR","msg":"webhook delivery failed; the dead letter could not be written"`) ||
		!strings.Contains(out, `"dead_letter_error":"dead letters: mkdir `) {
		t.Fatalf("log:\n%s", out)
	}

	// Once it can be written, it is, and said so.
	logs.Take()
	dl.Path = filepath.Join(t.TempDir(), "dead.jsonl")
	if err := n.Notify(context.Background(), notice("a", 1)); err != nil {
		t.Fatal(err)
	}
	if dead, _ := webhook.ReadDeadLetters(dl.Path); len(dead) != 1 || !strings.Contains(logs.String(), `"msg":"webhook delivery failed; dead-lettered"`) {
		t.Fatalf("dead letters %+v; log:\n%s", dead, logs.String())
	}
}
