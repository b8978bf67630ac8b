package localserver

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/internal/webhook"
	"github.com/checkout-dev/checkout/internal/webhook/webhooktest"
)

// A webhook receiver that answers 500 holds up only the notices: a
// watcher hears of a release, and the release's event is archived, within
// about a second, for a transition after one whose notices are still
// being retried. The notices are not lost: the server restarted while they
// are retried (their consumer's checkpoint was never moved past them)
// delivers them once the receiver answers again.
func TestFailingWebhookHoldsUpOnlyNotices(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const secret = "whsec_local"
	recv := webhooktest.New(secret)
	defer recv.Close()
	recv.FailFor(time.Hour, 500, 0)
	dead := filepath.Join(t.TempDir(), webhook.DeadLetterFile)
	prefix := testenv.Prefix()
	start := func() *Server {
		t.Helper()
		hooks, err := webhook.New(webhook.Config{
			URLs: []string{recv.URL}, Secret: secret, DeadLetters: &webhook.FileDeadLetters{Path: dead},
			InitialBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, MaxElapsed: time.Minute,
		})
		if err != nil {
			t.Fatal(err)
		}
		srv, err := Start(ctx, Config{
			Addr: "127.0.0.1:0", DynamoEndpoint: testenv.Endpoint(), TablePrefix: prefix,
			SweepInterval: -1, StreamPollInterval: 50 * time.Millisecond, FeedSettle: -1, Notifier: hooks,
		})
		if err != nil {
			t.Fatal(err)
		}
		return srv
	}
	srv := start()
	defer func() { srv.Close() }()
	base, admin := srv.URL(), srv.AdminKey()
	register := func(name string) string {
		code, m := call(t, "POST", base+"/api/agents", admin, fmt.Sprintf(`{"name":%q}`, name))
		if code != 201 {
			t.Fatalf("register %s: %d %v", name, code, m)
		}
		return m["api_key"].(string)
	}
	holder, watcher := register("holder"), register("watcher")
	tasks := []string{"n1", "n2"}
	for _, id := range tasks {
		if code, m := call(t, "POST", base+"/api/tasks", admin, fmt.Sprintf(`{"task_id":%q}`, id)); code != 201 {
			t.Fatalf("create %s: %d %v", id, code, m)
		}
		if code, m := call(t, "POST", base+"/api/tasks/"+id+"/checkout", holder, `{"timeout":"1h"}`); code != 200 {
			t.Fatalf("checkout %s: %d %v", id, code, m)
		}
		if code, m := call(t, "POST", base+"/api/tasks/"+id+"/watch", watcher, ""); code != 200 {
			t.Fatalf("watch %s: %d %v", id, code, m)
		}
	}
	// told waits (up to 5 s) for the watcher's task_available for id and
	// the release's archived event, and returns how long they took.
	told := func(id string) time.Duration {
		t.Helper()
		begin := time.Now()
		for time.Since(begin) < 5*time.Second {
			_, inbox := call(t, "GET", base+"/api/inbox", watcher, "")
			_, trail := call(t, "GET", base+"/api/tasks/"+id+"/events", admin, "")
			msgs, _ := inbox["messages"].([]any)
			evs, _ := trail["events"].([]any)
			for _, m := range msgs {
				m := m.(map[string]any)
				if m["task_id"] == id && m["type"] == "task_available" && len(evs) > 0 && evs[len(evs)-1].(map[string]any)["type"] == "release" {
					return time.Since(begin)
				}
			}
			time.Sleep(20 * time.Millisecond) // polls the inbox as a watcher does
		}
		t.Fatalf("the watcher was not told of %s's release within 5 s", id)
		return 0
	}
	for _, id := range tasks {
		if code, m := call(t, "POST", base+"/api/tasks/"+id+"/release", holder, `{}`); code != 200 {
			t.Fatalf("release %s: %d %v", id, code, m)
		}
		// n2's release comes while n1's notices are being retried.
		if d := told(id); d > 1500*time.Millisecond {
			t.Fatalf("the watcher was told of %s's release after %v, while the webhook failed", id, d)
		}
	}
	// The watcher may be told before the notices' consumer has made its
	// first attempt (it polls the stream on its own): wait for it.
	for deadline := time.Now().Add(5 * time.Second); recv.Attempts() == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if recv.Attempts() == 0 || len(recv.Delivered()) != 0 {
		t.Fatalf("%d attempts, delivered %v: want the notices being retried", recv.Attempts(), recv.Delivered())
	}

	// Restarted while the notices are retried, over the same tables, with
	// the receiver answering again: every notice arrives.
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	recv.FailFor(0, 0, 0)
	srv = start()
	for deadline := time.Now().Add(10 * time.Second); ; {
		got := recv.Delivered()
		kinds := map[string]bool{}
		for id := range got {
			if task, rest, ok := strings.Cut(id, ":"); ok {
				_, kind, _ := strings.Cut(rest, ":")
				kinds[task+" "+kind] = true
			}
		}
		missing := 0
		for _, id := range tasks {
			for _, kind := range []string{"LeaseEnded", "TaskAvailable"} {
				if !kinds[id+" "+kind] {
					missing++
				}
			}
		}
		if missing == 0 && len(got) == 2*len(tasks) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the restart, delivered %v, want LeaseEnded and TaskAvailable of %v", got, tasks)
		}
		time.Sleep(50 * time.Millisecond) // polls the receiver
	}
	if d, _ := webhook.ReadDeadLetters(dead); len(d) != 0 {
		t.Fatalf("dead letters %+v", d)
	}
	if recv.Rejected() != 0 {
		t.Fatalf("%d deliveries with a bad signature", recv.Rejected())
	}
}
