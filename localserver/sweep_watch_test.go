package localserver

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testenv"
)

// Between the interval's sweeps (here an hour apart), the sweep loop runs
// a sweep as soon as something falls due: a lease's timeout and a holder's
// death are recorded, and the task listed under todo, within about half a
// second of the (injected) clock passing them, not at the next tick.
func TestASweepRunsAsSoonAsALeaseOrAHeartbeatExpires(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	srv, err := Start(ctx, Config{
		Addr: "127.0.0.1:0", DynamoEndpoint: testenv.Endpoint(), TablePrefix: testenv.Prefix(),
		SweepInterval: time.Hour, Now: clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	key, url := srv.AdminKey(), srv.URL()
	st, reg := call(t, "POST", url+"/api/agents", key, `{"name":"mortal","agent_id":"mortal"}`)
	if st != 201 {
		t.Fatalf("register %d %v", st, reg)
	}
	mortal := reg["api_key"].(string)
	for _, id := range []string{"t1", "t2"} {
		if st, b := call(t, "POST", url+"/api/tasks", key, `{"task_id":"`+id+`","queue":"watched"}`); st != 201 {
			t.Fatalf("create %s: %d %v", id, st, b)
		}
	}
	if st, b := call(t, "POST", url+"/api/tasks/t1/checkout", key, `{"timeout":"1s"}`); st != 200 {
		t.Fatalf("checkout t1: %d %v", st, b)
	}
	if st, b := call(t, "POST", url+"/api/heartbeat", mortal, `{"ttl":"3s"}`); st != 200 {
		t.Fatalf("heartbeat: %d %v", st, b)
	}
	if st, b := call(t, "POST", url+"/api/tasks/t2/checkout", mortal, `{"timeout":"1h"}`); st != 200 {
		t.Fatalf("checkout t2: %d %v", st, b)
	}
	// ended waits (real time, bounded) for the task's last event to be
	// typ, and for a listing of todo tasks to show it.
	ended := func(id, typ string) {
		t.Helper()
		deadline := time.Now().Add(watchWithin)
		for {
			_, b := call(t, "GET", url+"/api/tasks/"+id+"/events", key, "")
			evs, _ := b["events"].([]any)
			last := ""
			if len(evs) > 0 {
				last, _ = evs[len(evs)-1].(map[string]any)["type"].(string)
			}
			_, l := call(t, "GET", url+"/api/tasks?status=todo&queue=watched", key, "")
			listed := false
			for _, task := range l["tasks"].([]any) {
				listed = listed || task.(map[string]any)["task_id"] == id
			}
			if last == typ && listed {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: last event %q, listed under todo %v; want %s and listed, before the hourly sweep", id, last, listed, typ)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	advance(2 * time.Second) // past t1's lease, within the mortal's heartbeat
	ended("t1", "timeout")
	if _, b := call(t, "GET", url+"/api/tasks/t2", key, ""); b["status"] != "in_progress" {
		t.Fatalf("t2 before its holder's heartbeat ran out: %v", b)
	}
	advance(2 * time.Second) // past the mortal's heartbeat
	ended("t2", "agent_death")
}
