package localserver

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/internal/webhook"
	"github.com/checkout-dev/checkout/internal/webhook/webhooktest"
)

// A notice that can be neither delivered (the receiver fails) nor
// dead-lettered (the file cannot be written) is held, and tried again,
// further apart each time up to 10 s, not every poll (it was handed again
// every 200 ms for as long as it lasted); each failure is logged as one,
// never as "dead-lettered". Once the receiver takes it, the notices are
// polled every interval again. The consumer's timer is the test's: each
// wait the loop asks for is seen here, in order, and ends at once.
func TestUndeliverableNoticeBacksOff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	recv := webhooktest.New("whsec_local")
	defer recv.Close()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var logs testenv.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	hooks, err := webhook.New(webhook.Config{
		URLs: []string{recv.URL}, Secret: "whsec_local", Logger: log,
		DeadLetters: &webhook.FileDeadLetters{Path: filepath.Join(file, "dead.jsonl")}, // under a file
		MaxElapsed:  time.Nanosecond,                                                   // no retries within a delivery
	})
	if err != nil {
		t.Fatal(err)
	}
	waits, stop := make(chan time.Duration), make(chan struct{})
	after := func(d time.Duration) <-chan time.Time {
		select {
		case waits <- d:
		case <-stop:
			return nil // the test is over: wait for Close
		}
		fired := make(chan time.Time, 1)
		fired <- time.Time{}
		return fired
	}
	const every = 50 * time.Millisecond
	srv, err := Start(ctx, Config{
		Addr: "127.0.0.1:0", DynamoEndpoint: testenv.Endpoint(), TablePrefix: testenv.Prefix(),
		SweepInterval: -1, StreamPollInterval: every, FeedSettle: -1,
		Notifier: hooks, Logger: log, after: after,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	defer close(stop)

	const failures = 40
	recv.FailNext(failures, 500)
	base, key := srv.URL(), srv.AdminKey()
	for _, c := range [][2]string{{"/api/tasks", `{"task_id":"n1"}`}, {"/api/tasks/n1/checkout", `{}`}, {"/api/tasks/n1/release", `{}`}} {
		if st, body := call(t, "POST", base+c[0], key, c[1]); st/100 != 2 {
			t.Fatalf("POST %s: %d %v", c[0], st, body)
		}
	}
	// Polls that found nothing wait every; then each failed poll doubles
	// the wait up to 10 s, and the delivery once the receiver takes the
	// notice brings it back to every.
	deadline := time.After(time.Minute)
	var seen []time.Duration
	for len(seen) == 0 || seen[len(seen)-1] != every {
		select {
		case d := <-waits:
			if d != every || len(seen) > 0 {
				seen = append(seen, d)
			} else if len(recv.Delivered()) > 0 {
				t.Fatalf("delivered after %d attempts, every one %v after the last", recv.Attempts(), every)
			}
		case <-deadline:
			t.Fatalf("attempts %d, waits %v", recv.Attempts(), seen)
		}
	}
	failed := seen[:len(seen)-1]
	want := every
	for i, d := range failed {
		want = min(2*want, maxNoticesBackoff)
		if d != want {
			t.Fatalf("wait after %d failed polls: %v; want %v (waits %v)", i+1, d, want, seen)
		}
	}
	if len(failed) < 10 || failed[len(failed)-2] != maxNoticesBackoff {
		t.Fatalf("waits %v: want them to reach %v and stay there", seen, maxNoticesBackoff)
	}
	if n := len(recv.Delivered()); n == 0 {
		t.Fatal("the notice was not delivered once the receiver answered")
	}
	out := logs.String()
	if strings.Contains(out, "dead-lettered") || strings.Count(out, `"msg":"webhook delivery failed; the dead letter could not be written"`) < len(failed) {
		t.Fatalf("log:\n%s", out)
	}
}
