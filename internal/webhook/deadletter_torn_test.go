package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/webhook"
)

// A crash in the middle of an append leaves the file's last line cut short,
// without its newline. The next dead letter must start a line of its own:
// glued to the torn line it decodes as nothing, so the notice, kept only
// there, is lost (jq and ReadDeadLetters cannot read it, and a server
// started again does not know it was dead-lettered).
func TestDeadLetterAfterTornLineIsKept(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), webhook.DeadLetterFile)
	torn := `{"url":"http://a","event_id":"t:1:TaskAvailable","ty`
	if err := os.WriteFile(path, []byte(torn), 0o600); err != nil {
		t.Fatal(err)
	}
	d := webhook.DeadLetter{URL: "http://a", EventID: "t:2:TaskAvailable", Type: "TaskAvailable",
		Body: json.RawMessage(`{"id":"t:2:TaskAvailable"}`), Attempts: 3, Error: "answered 503", FailedAt: time.Unix(1, 0).UTC()}
	if err := (&webhook.FileDeadLetters{Path: path}).Put(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(path)
	lines := bytes.Split(bytes.TrimSuffix(raw, []byte("\n")), []byte("\n"))
	var got webhook.DeadLetter
	if len(lines) != 2 || string(lines[0]) != torn || json.Unmarshal(lines[1], &got) != nil || got.EventID != d.EventID {
		t.Fatalf("the dead letter of %s is not a line of its own after the torn one; file:\n%s", d.EventID, raw)
	}
	// A server started again knows it: putting it again appends nothing.
	if err := (&webhook.FileDeadLetters{Path: path}).Put(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(path); !bytes.Equal(again, raw) {
		t.Fatalf("put again after a restart: file\n%s\nwas\n%s", again, raw)
	}
}
