package localserver

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
)

// idleServer starts a server that is the only writer of its tables (as
// over its own dynalite) through a proxy that counts its requests, on the
// clock now when given.
func idleServer(t *testing.T, now func() time.Time, notifier lease.Notifier) (*Server, *countingProxy) {
	t.Helper()
	proxy := newCountingProxy(t, testenv.Endpoint())
	srv, err := Start(context.Background(), Config{Addr: "127.0.0.1:0", DynamoEndpoint: proxy.url, TablePrefix: testenv.Prefix(),
		SweepInterval: time.Hour, Now: now, Notifier: notifier, soleWriter: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv, proxy
}

// total is how many requests the proxy has forwarded.
func (p *countingProxy) total() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.ops {
		n += c
	}
	return n
}

// settle waits (real time, bounded) until the server has sent no Query
// for quiet: its watch of the expiry indexes sleeps.
func settle(t *testing.T, p *countingProxy, quiet time.Duration) {
	t.Helper()
	deadline := time.Now().Add(watchWithin)
	last, since := p.count("Query"), time.Now()
	for time.Since(since) < quiet {
		if time.Now().After(deadline) {
			t.Fatalf("the server still Queries its database after %v idle", watchWithin)
		}
		time.Sleep(50 * time.Millisecond)
		if n := p.count("Query"); n != last {
			last, since = n, time.Now()
		}
	}
}

// An idle server, the only writer of its tables (as over its own
// dynalite), leaves its database almost alone: no Query of the expiry
// indexes once it knows the next expiry, no DescribeTable for the stream,
// and its two stream consumers poll once a second. It used to make about
// 60 requests a second (32 Queries, 10 DescribeTable, 20 Streams calls),
// about 7% of a core in dynalite.
func TestAnIdleServerLeavesItsDatabaseAlmostAlone(t *testing.T) {
	t.Parallel()
	_, proxy := idleServer(t, nil, nil)
	settle(t, proxy, 1500*time.Millisecond)
	queries, describes, before := proxy.count("Query"), proxy.count("DescribeTable"), proxy.total()
	const idle = 3 * time.Second
	time.Sleep(idle) // idle: what does the server send meanwhile?
	if n := proxy.count("Query") - queries; n != 0 {
		t.Errorf("an idle server sent %d Queries in %v; want none", n, idle)
	}
	if n := proxy.count("DescribeTable") - describes; n != 0 {
		t.Errorf("an idle server sent %d DescribeTable in %v; want none (the stream's ARN is kept)", n, idle)
	}
	// Two consumers, two Streams calls a poll, a poll a second each.
	if n := proxy.total() - before; n > 4*int(idle/time.Second)+4 {
		t.Errorf("an idle server sent %d requests in %v; want about 4 a second at most", n, idle)
	}
}

// After idling, the sole writer still ends a lease when it times out and
// a holder when its heartbeat runs out, within about a second of the clock
// passing them: it knows when the next expiry comes, and a lease granted
// while it idled wakes it.
func TestAnIdleServerEndsALeaseOnTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	srv, proxy := idleServer(t, clock, nil)
	key, url := srv.AdminKey(), srv.URL()
	st, reg := call(t, "POST", url+"/api/agents", key, `{"name":"mortal","agent_id":"mortal"}`)
	if st != 201 {
		t.Fatalf("register %d %v", st, reg)
	}
	mortal := reg["api_key"].(string)
	for _, id := range []string{"t1", "t2"} {
		if st, b := call(t, "POST", url+"/api/tasks", key, `{"task_id":"`+id+`"}`); st != 201 {
			t.Fatalf("create %s: %d %v", id, st, b)
		}
	}
	settle(t, proxy, 1500*time.Millisecond)
	// Granted while the watch sleeps.
	if st, b := call(t, "POST", url+"/api/tasks/t1/checkout", key, `{"timeout":"1s"}`); st != 200 {
		t.Fatalf("checkout t1: %d %v", st, b)
	}
	if st, b := call(t, "POST", url+"/api/heartbeat", mortal, `{"ttl":"3s"}`); st != 200 {
		t.Fatalf("heartbeat: %d %v", st, b)
	}
	if st, b := call(t, "POST", url+"/api/tasks/t2/checkout", mortal, `{"timeout":"1h"}`); st != 200 {
		t.Fatalf("checkout t2: %d %v", st, b)
	}
	settle(t, proxy, 1500*time.Millisecond)

	// ended waits for the task's last event to be typ (the sweep's
	// ending: a task's status is told live, without it), and says how
	// long it took.
	ended := func(id, typ string) time.Duration {
		t.Helper()
		began := time.Now()
		for {
			_, b := call(t, "GET", url+"/api/tasks/"+id+"/events", key, "")
			evs, _ := b["events"].([]any)
			last := ""
			if len(evs) > 0 {
				last, _ = evs[len(evs)-1].(map[string]any)["type"].(string)
			}
			if last == typ {
				return time.Since(began)
			}
			if time.Since(began) > 3*time.Second {
				t.Fatalf("%s: last event %q %v after the clock passed its expiry; want %s within about a second", id, last, time.Since(began), typ)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	advance(2 * time.Second) // past t1's lease, within the mortal's heartbeat
	t.Logf("t1 timed out %v after its expiry", ended("t1", "timeout"))
	if task, err := srv.Store().GetTask(ctx, "t2"); err != nil || task.Status != lease.StatusInProgress {
		t.Fatalf("t2 before its holder's heartbeat ran out: %v %v", task.Status, err)
	}
	settle(t, proxy, 1500*time.Millisecond)
	advance(2 * time.Second) // past the mortal's heartbeat
	t.Logf("t2's holder's death recorded %v after it", ended("t2", "agent_death"))
	if task, err := srv.Store().GetTask(ctx, "t2"); err != nil || task.Status != lease.StatusTodo {
		t.Fatalf("t2 after its holder's death: %v %v", task.Status, err)
	}
}

// After idling (its stream consumers back off to a poll a second), the
// sole writer tells a watcher of a release at once: the release's write
// wakes the consumers.
func TestAnIdleServerTellsAWatcherPromptly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var notices testenv.Recorder
	srv, proxy := idleServer(t, nil, &notices)
	key, url := srv.AdminKey(), srv.URL()
	st, reg := call(t, "POST", url+"/api/agents", key, `{"name":"bob","agent_id":"bob"}`)
	if st != 201 {
		t.Fatalf("register %d %v", st, reg)
	}
	bob := reg["api_key"].(string)
	if st, b := call(t, "POST", url+"/api/tasks", key, `{"task_id":"w1"}`); st != 201 {
		t.Fatalf("create: %d %v", st, b)
	}
	if st, b := call(t, "POST", url+"/api/tasks/w1/checkout", key, `{"timeout":"1h"}`); st != 200 {
		t.Fatalf("checkout: %d %v", st, b)
	}
	if st, b := call(t, "POST", url+"/api/tasks/w1/checkout", bob, `{"watch":true}`); st != 409 || b["watching"] != true {
		t.Fatalf("watch: %d %v", st, b)
	}
	settle(t, proxy, 2500*time.Millisecond) // the consumers' polls a second apart by now
	if st, b := call(t, "POST", url+"/api/tasks/w1/release", key, `{}`); st != 200 {
		t.Fatalf("release: %d %v", st, b)
	}
	released := time.Now()
	const within = time.Second
	for {
		// The store's own Inbox: the server's would apply the stream first.
		msgs, err := srv.Store().Inbox(ctx, "bob")
		if err != nil {
			t.Fatal(err)
		}
		heard := false
		for _, n := range notices.Notices() {
			heard = heard || (n.Event.TaskID == "w1" && n.Kind == lease.NoticeTaskAvailable)
		}
		if len(msgs) == 1 && msgs[0].TaskID == "w1" && msgs[0].Type == lease.MessageTaskAvailable && heard {
			t.Logf("told %v after the release", time.Since(released))
			return
		}
		if time.Since(released) > within {
			t.Fatalf("%v after the release: inbox %v, notices %v; want the watcher's message and the notice within %v", time.Since(released), msgs, notices.Notices(), within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
