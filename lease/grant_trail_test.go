package lease_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// A grant whose first sending was lost before DynamoDB saw it (a
// throttled or reset request, sent again by the SDK), refused on a
// concurrent grant of the same millisecond, can never have been two or
// more grants back: the task has had one grant (fence 1). It read the
// trail, and waited for the stream to archive the other's checkout (up to
// trailWait, 3 s), before it answered 409, or, for a claim, moved on to
// the next candidate (a review of the trail lookup). It reads none now.
func TestARefusedResendRacingAConcurrentGrantReadsNoTrail(t *testing.T) {
	t.Parallel()
	for _, claim := range []bool{false, true} {
		name := "checkout"
		if claim {
			name = "named claim"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "t")
			e.caughtUp(t)
			tasks, events := e.names.Table(schema.TasksTable), e.names.Table(schema.EventsTable)
			var trailReads atomic.Int32
			doer := &lossyDoer{
				match: func(target, body string) bool {
					if strings.HasSuffix(target, ".Query") && strings.Contains(body, `"`+events+`"`) {
						trailReads.Add(1)
					}
					return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) && strings.Contains(body, `"r-a"`)
				},
				// b takes the task in the same millisecond (the test clock
				// stands still); a's first sending never reached DynamoDB.
				race: func() { e.checkout(t, "t", "b", time.Hour) },
			}
			s := e.over(doer)
			var err error
			if claim {
				_, err = s.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "r-a", Timeout: time.Hour})
			} else {
				_, err = s.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r-a", Timeout: time.Hour})
			}
			if !doer.lost.Load() {
				t.Fatal("no grant was sent twice")
			}
			if claim && !errors.Is(err, lease.ErrNoTaskAvailable) || !claim && !errors.Is(err, lease.ErrCheckedOut) {
				t.Errorf("a's %s, refused on b's lease: %v", name, err)
			}
			if n := trailReads.Load(); n > 0 {
				t.Errorf("a's %s, sent twice and refused on the task's only grant (b's, fence 1): %d trail Queries; want none", name, n)
			}
		})
	}
}

// As above, with b's grant followed by its renewal before the stream
// archives either (a hole in the archive: the item shows only the
// renewal), a's refused resend waited the whole trailWait (3 s) for the
// archive before it answered 409. It reads no trail now.
func TestARefusedResendOnAnotherAgentsOnlyGrantReadsNoTrail(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	e.caughtUp(t)
	tasks, events := e.names.Table(schema.TasksTable), e.names.Table(schema.EventsTable)
	var trailReads atomic.Int32
	doer := &lossyDoer{
		match: func(target, body string) bool {
			if strings.HasSuffix(target, ".Query") && strings.Contains(body, `"`+events+`"`) {
				trailReads.Add(1)
			}
			return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) && strings.Contains(body, `"r-a"`)
		},
		race: func() {
			b := e.checkout(t, "t", "b", time.Hour)
			e.clock.Advance(time.Second)
			must[lease.Checkout](t)(e.store.Renew(c, lease.RenewParams{TaskID: "t", AgentID: "b", Fence: b.Fence}))
		},
	}
	s := e.over(doer)
	_, err := s.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r-a", Timeout: time.Hour})
	if !doer.lost.Load() {
		t.Fatal("no grant was sent twice")
	}
	if !errors.Is(err, lease.ErrCheckedOut) {
		t.Errorf("a's checkout, refused on b's lease: %v, want checked_out", err)
	}
	if n := trailReads.Load(); n > 0 {
		t.Errorf("a's checkout, sent twice and refused on the task's only grant (b's, fence 1, renewed since): %d trail Queries; want none", n)
	}
}

// TestAGrantSentTwiceOneGrantOnAcrossAReopenAnswersItsAttempt with the
// stream having archived a's checkout, but not yet the cancel and b's
// grant that followed it (the stream runs about a second behind). The
// trail lookup stopped at a's own checkout, saw no finish after it, and
// answered the task's attempts less the grants since: 1 - 1, raised to 1,
// where a's grant was the task's second attempt (a review's). A reopen
// since is now read from the item's counts: attempts less the grants
// since below 1. (A reopen now keeps the grant's attempt on its record,
// grant_write: here the reopen is an earlier version's, which kept none.)
func TestAGrantSentTwiceOneGrantOnAcrossAReopenArchivedInPartAnswersItsAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	e.attemptedOnce(t, "t")

	tasks := e.names.Table(schema.TasksTable)
	doer := &lossyDoer{
		match: func(target, body string) bool {
			return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) && strings.Contains(body, `"r-a"`)
		},
		race: func() {
			e.drain(t) // a's checkout archived; what follows not yet
			e.clock.Advance(time.Second)
			cancelled, todo := lease.StatusCancelled, lease.StatusTodo
			must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "admin", Admin: true, Status: &cancelled}))
			must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "admin", Admin: true, Status: &todo}))
			e.reopenedByAnEarlierVersion(t, "t", false) // the trail has the attempt
			e.clock.Advance(time.Second)
			must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "b", RunID: "r-b", Timeout: time.Hour}))
		},
		applied: true,
	}
	s := e.over(doer)
	co, err := s.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r-a", Timeout: time.Hour})
	if !doer.lost.Load() {
		t.Fatal("no grant was sent twice")
	}
	if got := e.get(t, "t"); got.Checkout == nil || got.Checkout.AgentID != "b" || got.Checkout.Fence != 3 || got.Attempts != 1 {
		t.Fatalf("the task after a's grant, a reopen and b's: %+v after %d attempts, want b's lease (fence 3), its first attempt", got.Checkout, got.Attempts)
	}
	if err != nil || co.AgentID != "a" || co.Fence != 2 || co.Attempt != 2 {
		t.Errorf("a's grant (fence 2, the task's second attempt), sent twice, a reopen and a grant in between not yet archived: %+v, %v; want fence 2, attempt 2", co, err)
	}
}

// The same for a grant two grants back (resentGrantInTrail): a's
// checkout archived, the cancel, reopen and two grants after it not yet.
func TestAGrantSentTwiceTwoGrantsOnAcrossAReopenArchivedInPartAnswersItsAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	e.attemptedOnce(t, "t")

	tasks := e.names.Table(schema.TasksTable)
	doer := &lossyDoer{
		match: func(target, body string) bool {
			return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) && strings.Contains(body, `"r-a"`)
		},
		race: func() {
			e.drain(t) // a's checkout archived; what follows not yet
			e.clock.Advance(time.Second)
			cancelled, todo := lease.StatusCancelled, lease.StatusTodo
			must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "admin", Admin: true, Status: &cancelled}))
			must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "admin", Admin: true, Status: &todo}))
			e.clock.Advance(time.Second)
			b := must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "b", RunID: "r-b", Timeout: time.Hour}))
			must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "b", RunID: "r-b", Fence: b.Fence}))
			e.clock.Advance(time.Second)
			must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "c", RunID: "r-c", Timeout: time.Hour}))
		},
		applied: true,
	}
	s := e.over(doer)
	co, err := s.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r-a", Timeout: time.Hour})
	if !doer.lost.Load() {
		t.Fatal("no grant was sent twice")
	}
	if got := e.get(t, "t"); got.Checkout == nil || got.Checkout.AgentID != "c" || got.Checkout.Fence != 4 || got.Attempts != 2 {
		t.Fatalf("the task: %+v after %d attempts, want c's lease (fence 4), its second attempt since the reopen", got.Checkout, got.Attempts)
	}
	if err != nil || co.AgentID != "a" || co.Fence != 2 || co.Attempt != 2 {
		t.Errorf("a's grant (fence 2, the task's second attempt), sent twice, a reopen and two grants in between not yet archived: %+v, %v; want fence 2, attempt 2", co, err)
	}
}

// failingQueries wraps a doer: once armed, every Query of table fails
// with an error the SDK does not retry.
type failingQueries struct {
	next interface {
		Do(*http.Request) (*http.Response, error)
	}
	table string
	armed func() bool
}

func (d *failingQueries) Do(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".Query") && d.armed() && r.Body != nil {
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		r.Body = io.NopCloser(bytes.NewReader(body))
		if strings.Contains(string(body), `"`+d.table+`"`) {
			return &http.Response{
				StatusCode: 400, Status: "400 Bad Request",
				Header:  http.Header{"Content-Type": []string{"application/x-amz-json-1.0"}},
				Body:    io.NopCloser(strings.NewReader(`{"__type":"com.amazonaws.dynamodb.v20120810#AccessDeniedException","message":"no"}`)),
				Request: r,
			}, nil
		}
	}
	return d.next.Do(r)
}

// A grant known one grant on (prev_write) across a reopen is made and
// known; the trail read for its attempt failing turned it into an error
// (a 503, undecided), though the lease was granted. It is answered, as
// attempt 1. (The reopen is an earlier version's, which kept no attempt
// on the grant's record: today's is read without the trail.)
func TestAKnownGrantOneOnIsAnsweredWhenItsTrailReadFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	tasks, events := e.names.Table(schema.TasksTable), e.names.Table(schema.EventsTable)
	lossy := &lossyDoer{
		match: func(target, body string) bool {
			return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) && strings.Contains(body, `"r-a"`)
		},
		race: func() {
			e.clock.Advance(time.Second)
			cancelled, todo := lease.StatusCancelled, lease.StatusTodo
			must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "admin", Admin: true, Status: &cancelled}))
			must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "admin", Admin: true, Status: &todo}))
			e.reopenedByAnEarlierVersion(t, "t", false) // the trail has the attempt
			e.clock.Advance(time.Second)
			must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "b", RunID: "r-b", Timeout: time.Hour}))
			e.drain(t)
		},
		applied: true,
	}
	doer := &failingQueries{next: lossy, table: events, armed: lossy.lost.Load}
	s := e.over(doer)
	co, err := s.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r-a", Timeout: time.Hour})
	if !lossy.lost.Load() {
		t.Fatal("no grant was sent twice")
	}
	if err != nil || co.Fence != 1 {
		t.Errorf("a's grant (fence 1), known one grant on, its attempt's trail read failing: %+v, %v; want the grant answered", co, err)
	}
}

// A refused resend on a task with no lease (done an hour before the
// grant's time) read the trail too, though no transition of the task is
// at or after its time.
func TestARefusedResendOnAFinishedTaskReadsNoTrail(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	b := e.checkout(t, "t", "b", time.Hour)
	must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: "t", AgentID: "b", Fence: b.Fence}))
	e.drain(t)
	e.clock.Advance(time.Hour)
	tasks, events := e.names.Table(schema.TasksTable), e.names.Table(schema.EventsTable)
	var trailReads atomic.Int32
	doer := &lossyDoer{
		match: func(target, body string) bool {
			if strings.HasSuffix(target, ".Query") && strings.Contains(body, `"`+events+`"`) {
				trailReads.Add(1)
			}
			return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) && strings.Contains(body, `"r-a"`)
		},
		race: func() {},
	}
	s := e.over(doer)
	_, err := s.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r-a", Timeout: time.Hour})
	if !doer.lost.Load() {
		t.Fatal("no grant was sent twice")
	}
	if !errors.Is(err, lease.ErrStatusMismatch) {
		t.Errorf("a checkout of a done task: %v, want status mismatch", err)
	}
	if n := trailReads.Load(); n != 0 {
		t.Errorf("it read the trail %d times; want none: the task's last transition was an hour before the grant's time", n)
	}
}
