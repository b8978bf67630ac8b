package webhook_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

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

// A notices batch handed again (a later notice's dead letter could not be
// written) dead-letters its failed notices again: the file holds each
// notice once per URL, as the AWS table, keyed by event id and URL, does,
// across a restart too. It used to append every repeat.
func TestFileDeadLetterPutAgainIsKeptOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "dead.jsonl")
	at := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	letter := func(id, url string, attempts int) webhook.DeadLetter {
		return webhook.DeadLetter{URL: url, EventID: id, Type: "TaskAvailable", Body: json.RawMessage(`{"id":"` + id + `"}`),
			Attempts: attempts, Error: "503", FailedAt: at.Add(time.Duration(attempts) * time.Second)}
	}
	put := func(dl *webhook.FileDeadLetters, d webhook.DeadLetter) {
		t.Helper()
		if err := dl.Put(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	want := func(keys ...string) {
		t.Helper()
		dead, err := webhook.ReadDeadLetters(path)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range dead {
			got = append(got, d.EventID+" "+d.URL)
		}
		if !slices.Equal(got, keys) {
			t.Fatalf("dead letters %q, want %q", got, keys)
		}
		if dead[0].Attempts != 3 {
			t.Fatalf("first dead letter %+v, want the first one put (3 attempts)", dead[0])
		}
	}

	dl := &webhook.FileDeadLetters{Path: path}
	put(dl, letter("t:1:TaskAvailable", "http://a", 3))
	put(dl, letter("t:1:TaskAvailable", "http://a", 4)) // the batch handed again
	put(dl, letter("t:1:TaskAvailable", "http://b", 3)) // the same notice to another URL
	want("t:1:TaskAvailable http://a", "t:1:TaskAvailable http://b")

	// A server restarted over the same file knows what it holds.
	dl = &webhook.FileDeadLetters{Path: path}
	put(dl, letter("t:1:TaskAvailable", "http://b", 5))
	put(dl, letter("t:2:LeaseEnded", "http://a", 3))
	put(dl, letter("t:1:TaskAvailable", "http://a", 6))
	want("t:1:TaskAvailable http://a", "t:1:TaskAvailable http://b", "t:2:LeaseEnded http://a")
}
