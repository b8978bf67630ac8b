package localserver

import (
	"context"
	"fmt"
	"testing"

	"github.com/checkout-dev/checkout/internal/testenv"
)

// A client reads what its answered requests did, at once: a task's events
// right after its checkout and completion, the queue counts right after a
// create and a checkout, a watcher's message right after the release. The
// change stream writes all three, and the pollers here run only once an
// hour, so each answer comes from the read's own catching up with the
// stream. Before, a task's events read at once were empty (the archive had
// a hole where the checkout's event was yet to go, so nothing after it was
// shown), and the counts were those of a second before.
func TestReadsSeeTheAnsweredWritesAtOnce(t *testing.T) {
	t.Parallel()
	srv, err := Start(context.Background(), Config{
		Addr: "127.0.0.1:0", DynamoEndpoint: testenv.Endpoint(), TablePrefix: testenv.Prefix(),
		SweepInterval: -1, StreamPollInterval: 1 << 62, FeedSettle: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	base, admin := srv.URL(), srv.AdminKey()
	must := func(want int, method, path, key, body string) map[string]any {
		t.Helper()
		code, m := call(t, method, base+path, key, body)
		if code != want {
			t.Fatalf("%s %s: %d %v, want %d", method, path, code, m, want)
		}
		return m
	}
	register := func(name string) string {
		return must(201, "POST", "/api/agents", admin, fmt.Sprintf(`{"name":%q}`, name))["api_key"].(string)
	}
	alice, bob := register("alice"), register("bob")

	for round := range 5 {
		id := fmt.Sprintf("t%d", round)
		must(201, "POST", "/api/tasks", alice, fmt.Sprintf(`{"task_id":%q,"queue":"q%d"}`, id, round))
		must(200, "POST", "/api/tasks/"+id+"/checkout", alice, `{"run_id":"r"}`)
		counts := queueCounts(t, must(200, "GET", "/api/queues", alice, ""), fmt.Sprintf("q%d", round))
		if counts["todo"] != 0 || counts["in_progress"] != 1 {
			t.Fatalf("%s: counts right after its checkout %v, want in_progress 1", id, counts)
		}
		must(200, "POST", "/api/tasks/"+id+"/watch", bob, "")
		must(200, "POST", "/api/tasks/"+id+"/release", alice, `{"run_id":"r"}`)
		msgs, _ := must(200, "GET", "/api/inbox", bob, "")["messages"].([]any)
		if len(msgs) != round+1 {
			t.Fatalf("%s: bob's inbox right after the release: %d messages, want %d", id, len(msgs), round+1)
		}
		must(200, "POST", "/api/tasks/"+id+"/checkout", alice, `{"run_id":"r2"}`)
		must(200, "POST", "/api/tasks/"+id+"/complete", alice, `{"run_id":"r2"}`)
		evs, _ := must(200, "GET", "/api/tasks/"+id+"/events", alice, "")["events"].([]any)
		var types []string
		for _, e := range evs {
			types = append(types, e.(map[string]any)["type"].(string))
		}
		if fmt.Sprint(types) != "[checkout release checkout complete]" {
			t.Fatalf("%s: events right after its completion %v, want checkout, release, checkout, complete", id, types)
		}
		counts = queueCounts(t, must(200, "GET", "/api/queues", alice, ""), fmt.Sprintf("q%d", round))
		if counts["done"] != 1 || counts["in_progress"] != 0 {
			t.Fatalf("%s: counts right after its completion %v, want done 1", id, counts)
		}
	}

	// A release repeated right after a later lease of the task ended is
	// answered as the first was: its ending is in the trail at once.
	must(201, "POST", "/api/tasks", alice, `{"task_id":"again"}`)
	co := must(200, "POST", "/api/tasks/again/checkout", alice, "")
	first := must(200, "POST", "/api/tasks/again/release", alice, fmt.Sprintf(`{"fence":%v}`, co["fence"]))
	must(200, "POST", "/api/tasks/again/checkout", bob, "")
	must(200, "POST", "/api/tasks/again/release", bob, "")
	again := must(200, "POST", "/api/tasks/again/release", alice, fmt.Sprintf(`{"fence":%v}`, co["fence"]))
	if fmt.Sprint(again) != fmt.Sprint(first) {
		t.Fatalf("release repeated right after a later one: %v, want %v", again, first)
	}
}

// queueCounts is the counts of queue q in a GET /api/queues answer.
func queueCounts(t *testing.T, answer map[string]any, q string) map[string]float64 {
	t.Helper()
	qs, _ := answer["queues"].([]any)
	for _, x := range qs {
		m := x.(map[string]any)
		if m["queue"] == q {
			out := map[string]float64{}
			for k, v := range m["counts"].(map[string]any) {
				out[k] = v.(float64)
			}
			return out
		}
	}
	return map[string]float64{}
}
