package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testenv"
)

// A request whose answer was lost may have taken effect, and the caller
// must be able to tell that from one that never reached the server. A
// release naming no lease (sent once), a task created or changed, whose
// answer was lost, or answered 502 by a gateway, failed with an error
// that said only that the server could not be reached: the release had
// been made, the task created, and sending them again answered 404
// not_checked_out, or 409 task_exists. Their errors now match
// ErrUndecided; a refused connection does not. A checkout, which is
// retried with its run id, matches it only once its retries are spent.
func TestALostAnswerIsUndecided(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, admin := startServer(t, nil)
	f := testenv.NewFront(t, srv.URL())
	noWait := WithSleeper(func(context.Context, time.Duration) error { return nil })
	direct := agent(t, admin, "agent-a1b2", "researcher")
	a := New(f.URL, direct.apiKey, noWait)
	title := "new"
	for _, fault := range []testenv.Fault{testenv.Lose, testenv.Gateway, testenv.Drop} {
		for _, id := range []string{"released", "completed"} {
			id := id + fault.String()
			if _, err := a.CreateTask(ctx, CreateTaskRequest{TaskID: id}); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Checkout(ctx, id, CheckoutRequest{}); err != nil {
				t.Fatal(err)
			}
		}
		f.Fail("POST /api/tasks/released"+fault.String()+"/release", fault)
		_, err := a.Release(ctx, "released"+fault.String(), ReleaseRequest{})
		if !errors.Is(err, ErrUndecided) {
			t.Errorf("release naming no lease, %v: %v, want ErrUndecided", fault, err)
		}
		f.Fail("POST /api/tasks/completed"+fault.String()+"/complete", fault)
		if _, err := a.Complete(ctx, "completed"+fault.String(), CompleteRequest{}); !errors.Is(err, ErrUndecided) {
			t.Errorf("completion naming no lease, %v: %v, want ErrUndecided", fault, err)
		}
		f.Fail("POST /api/tasks", fault)
		if _, err := a.CreateTask(ctx, CreateTaskRequest{TaskID: "created" + fault.String()}); !errors.Is(err, ErrUndecided) {
			t.Errorf("create, %v: %v, want ErrUndecided", fault, err)
		}
		f.Fail("PATCH /api/tasks/released"+fault.String(), fault)
		if _, err := a.UpdateTask(ctx, "released"+fault.String(), UpdateTaskRequest{Title: &title}); !errors.Is(err, ErrUndecided) {
			t.Errorf("update, %v: %v, want ErrUndecided", fault, err)
		}
	}
	// The lost answers of a lost release and creation: they took effect.
	if s, err := direct.Status(ctx, "released"+testenv.Lose.String()); err != nil || s.Locked {
		t.Errorf("the release whose answer was lost: %+v, %v; want it released", s, err)
	}
	if _, err := direct.GetTask(ctx, "created"+testenv.Lose.String()); err != nil {
		t.Errorf("the creation whose answer was lost: %v; want the task created", err)
	}

	// A checkout is retried, and gets its lease back, unless every try
	// is lost.
	for _, id := range []string{"once", "always"} {
		if _, err := a.CreateTask(ctx, CreateTaskRequest{TaskID: id}); err != nil {
			t.Fatal(err)
		}
	}
	f.Fail("POST /api/tasks/once/checkout", testenv.Lose)
	if co, err := a.Checkout(ctx, "once", CheckoutRequest{}); err != nil || co.Fence != 1 {
		t.Errorf("checkout with one answer lost: %+v, %v", co, err)
	}
	f.Fail("POST /api/tasks/always/checkout", testenv.Lose, testenv.Lose, testenv.Lose, testenv.Lose)
	if _, err := a.Checkout(ctx, "always", CheckoutRequest{}); !errors.Is(err, ErrUndecided) {
		t.Errorf("checkout with every answer lost: %v, want ErrUndecided", err)
	}

	// A server that refuses the connection has not acted.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	if _, err := New(closed, "ck_x", noWait).Release(ctx, "t", ReleaseRequest{}); err == nil || errors.Is(err, ErrUndecided) {
		t.Errorf("release to a closed port: %v, want an error that is not ErrUndecided", err)
	}
}

// A request whose context ends after it was sent may have taken effect
// too: its error matched only the context's (context.DeadlineExceeded),
// like one that never left. It now matches ErrUndecided as well.
func TestARequestItsContextEndedAfterSendingIsUndecided(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, admin := startServer(t, nil)
	f := testenv.NewFront(t, srv.URL())
	direct := agent(t, admin, "agent-a1b2", "researcher")
	if _, err := direct.CreateTask(ctx, CreateTaskRequest{TaskID: "slow"}); err != nil {
		t.Fatal(err)
	}
	if _, err := direct.Checkout(ctx, "slow", CheckoutRequest{}); err != nil {
		t.Fatal(err)
	}
	f.Fail("POST /api/tasks/slow/release", testenv.Slow)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err := New(f.URL, direct.apiKey).Release(short, "slow", ReleaseRequest{})
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrUndecided) {
		t.Errorf("release whose deadline passed after it was sent: %v; want it to match context.DeadlineExceeded and ErrUndecided", err)
	}
	// Before sending, the context's error alone.
	done, cancelDone := context.WithCancel(ctx)
	cancelDone()
	if _, err := New(f.URL, direct.apiKey).Release(done, "slow", ReleaseRequest{}); !errors.Is(err, context.Canceled) || errors.Is(err, ErrUndecided) {
		t.Errorf("release cancelled before it was sent: %v; want context.Canceled alone", err)
	}
}

// A checkout or claim whose every try lost its answer may have taken a
// lease under the run id the client generated, which the caller never
// saw: a checkout again, under a new run, was denied by the caller's own
// lease (a *ConflictError of the same agent), and a claim again took a
// second task. Their undecided error now comes with that run id, and a
// call again under it answers with the lease.
func TestALostGrantGivesItsRunID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, admin := startServer(t, nil)
	f := testenv.NewFront(t, srv.URL())
	direct := agent(t, admin, "agent-a1b2", "researcher")
	for id, queue := range map[string]string{"named": "default", "claimed": "lost", "other": "lost"} {
		if _, err := direct.CreateTask(ctx, CreateTaskRequest{TaskID: id, Queue: queue}); err != nil {
			t.Fatal(err)
		}
	}
	a := New(f.URL, direct.apiKey, WithSleeper(func(context.Context, time.Duration) error { return nil }))
	lost := []testenv.Fault{testenv.Lose, testenv.Lose, testenv.Lose, testenv.Lose}

	f.Fail("POST /api/tasks/named/checkout", lost...)
	co, err := a.Checkout(ctx, "named", CheckoutRequest{})
	if !errors.Is(err, ErrUndecided) || co.RunID == "" {
		t.Fatalf("checkout with every answer lost: %+v, %v; want ErrUndecided and the run id", co, err)
	}
	if again, err := a.Checkout(ctx, "named", CheckoutRequest{RunID: co.RunID}); err != nil || again.Fence != 1 {
		t.Errorf("checkout again under the lost one's run: %+v, %v; want its lease, fence 1", again, err)
	}

	f.Fail("POST /api/claim", lost...)
	co, err = a.Claim(ctx, ClaimRequest{Queues: []string{"lost"}})
	if !errors.Is(err, ErrUndecided) || co.RunID == "" {
		t.Fatalf("claim with every answer lost: %+v, %v; want ErrUndecided and the run id", co, err)
	}
	first := co.RunID
	if co, err = a.Claim(ctx, ClaimRequest{Queues: []string{"lost"}, RunID: first}); err != nil || co.RunID != first {
		t.Errorf("claim again under the lost one's run: %+v, %v; want its lease", co, err)
	}
	if cos, err := direct.ListCheckouts(ctx, "agent-a1b2"); err != nil || len(cos) != 2 {
		t.Errorf("leases after the lost checkout and claim, and their runs' again: %+v, %v; want two", cos, err)
	}
}

// A request retried after its first answer was lost, whose retries the
// server then refused a connection (it went down right after it acted),
// was reported as the last try alone saw it: a request that was never
// sent, not matching ErrUndecided, though the first try had taken effect.
// A release by its run id had released the task, and a claim had taken
// one, whose run id the caller then had no reason to use again. The
// error now matches ErrUndecided when any try was sent.
func TestARetryRefusedAfterALostAnswerIsUndecided(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, admin := startServer(t, nil)
	direct := agent(t, admin, "agent-a1b2", "researcher")
	noWait := WithSleeper(func(context.Context, time.Duration) error { return nil })
	for _, id := range []string{"released", "claimed"} {
		if _, err := direct.CreateTask(ctx, CreateTaskRequest{TaskID: id, Queue: id}); err != nil {
			t.Fatal(err)
		}
	}
	co, err := direct.Checkout(ctx, "released", CheckoutRequest{})
	if err != nil {
		t.Fatal(err)
	}

	f := testenv.NewFront(t, srv.URL())
	f.Fail("POST /api/tasks/released/release", testenv.Down)
	_, err = New(f.URL, direct.apiKey, noWait).Release(ctx, "released", ReleaseRequest{RunID: co.RunID})
	if !errors.Is(err, ErrUndecided) {
		t.Errorf("release by run id, its answer lost and its retries refused: %v; want ErrUndecided", err)
	}
	if got := f.Requests(); len(got) != 1 {
		t.Errorf("requests that reached the server: %v; want the first try alone", got)
	}
	if s, err := direct.Status(ctx, "released"); err != nil || s.Locked {
		t.Errorf("the release whose answer was lost: %+v, %v; want the task released", s, err)
	}

	f = testenv.NewFront(t, srv.URL())
	f.Fail("POST /api/claim", testenv.Down)
	claimed, err := New(f.URL, direct.apiKey, noWait).Claim(ctx, ClaimRequest{Queues: []string{"claimed"}})
	if !errors.Is(err, ErrUndecided) || claimed.RunID == "" {
		t.Errorf("claim, its answer lost and its retries refused: %+v, %v; want ErrUndecided and its run id", claimed, err)
	}
	if s, err := direct.Status(ctx, "claimed"); err != nil || !s.Locked {
		t.Errorf("the claim whose answer was lost: %+v, %v; want the task taken", s, err)
	}
}

// The error of a request whose answer was lost after it was sent said
// "cannot reach the server", as for a server that refused the connection:
// WorkOn's OnError and returned error, and any caller printing it, told
// of a server never reached that had acted. It now says the request was
// sent and got no answer.
func TestALostAnswersErrorSaysItWasSent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, admin := startServer(t, nil)
	f := testenv.NewFront(t, srv.URL())
	direct := agent(t, admin, "agent-a1b2", "researcher")
	if _, err := direct.CreateTask(ctx, CreateTaskRequest{TaskID: "sent"}); err != nil {
		t.Fatal(err)
	}
	if _, err := direct.Checkout(ctx, "sent", CheckoutRequest{}); err != nil {
		t.Fatal(err)
	}
	f.Fail("POST /api/tasks/sent/release", testenv.Lose)
	_, err := New(f.URL, direct.apiKey).Release(ctx, "sent", ReleaseRequest{})
	if msg := fmt.Sprint(err); !errors.Is(err, ErrUndecided) || strings.Contains(msg, "cannot reach") || !strings.Contains(msg, "was sent") {
		t.Errorf("release whose answer was lost: %q; want it to say the request was sent, not that the server cannot be reached", msg)
	}
}

// The retries of a call safe to repeat, after a try whose answer was
// lost, may be throttled (429) or refused a connection, as a gateway or
// a server going down does: the call's error was then the last try's
// alone, a 429 or a refusal, not matching ErrUndecided, though the lost
// try may have acted (a claim may have taken a task, which ClaimLoop
// then left held, claiming under a new run). Neither answer settles what
// the lost try left open: the error matches ErrUndecided.
func TestAThrottledRetryAfterALostAnswerStaysUndecided(t *testing.T) {
	t.Parallel()
	var srv *httptest.Server
	var n atomic.Int32
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if n.Add(1) == 1 {
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		srv.Listener.Close() // the tries after this one: refused, or throttled on the open connection
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	t.Cleanup(srv.Close)
	_, err := New(srv.URL, "ck_x", WithSleeper(func(context.Context, time.Duration) error { return nil })).
		Release(context.Background(), "t1", ReleaseRequest{RunID: "run-1"})
	if !errors.Is(err, ErrUndecided) {
		t.Errorf("release lost, then throttled, then refused: %v; want ErrUndecided", err)
	}
}
