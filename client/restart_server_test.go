package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The probe's case against the real server: the server goes away as the
// work ends and comes back a little later. WorkOn completes the task once
// it is back, instead of leaving it in progress under its lease to be done
// again; a completion whose answer was lost is repeated as the same
// completion (its run id and fence), which the server answers as done.
func TestAgainstServerWorkOnCompletesAfterTheServerComesBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, admin := startServer(t, nil)
	a := agent(t, admin, "agent-a", "researcher")
	if _, err := a.CreateTask(ctx, CreateTaskRequest{TaskID: "task-1"}); err != nil {
		t.Fatal(err)
	}
	// A proxy in front of the server that can play it stopped: every
	// connection closed unanswered, until 8 requests have been refused.
	// The first of them reaches the server, and only its answer is lost:
	// the completion took effect, and its repeats must be answered as it
	// was.
	target, err := url.Parse(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	forward := httputil.NewSingleHostReverseProxy(target)
	var down atomic.Bool
	var refused atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			switch n := refused.Add(1); {
			case n == 1:
				forward.ServeHTTP(httptest.NewRecorder(), r)
			case n >= 8:
				down.Store(false) // back for the next request
			}
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	c := New(proxy.URL, a.apiKey, WithSleeper(blockLong))
	err = c.WorkOn(ctx, "task-1", func(context.Context, *Lease) error {
		down.Store(true)
		return nil
	}, LeaseTimeout(10*time.Minute), NoHeartbeats(), RenewEvery(time.Hour))
	if err != nil {
		t.Fatalf("WorkOn = %v, want the task completed once the server is back", err)
	}
	if n := refused.Load(); n < 8 {
		t.Fatalf("only %d requests refused: the outage did not happen", n)
	}
	task, err := a.GetTask(ctx, "task-1")
	if err != nil {
		t.Fatal(err)
	}
	if task.Status != "done" {
		t.Fatalf("task %s after WorkOn, want done", task.Status)
	}
	evs, err := a.Events(ctx, "task-1")
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range evs {
		types = append(types, e.Type)
	}
	if got := strings.Join(types, " "); got != "checkout complete" {
		t.Fatalf("events %s, want one checkout and one completion", got)
	}
}
