package lease_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// takenTwiceMoreByA sets up x held by a for a minute, and returns the
// race of this file's tests: the first sending of a's ending (an
// UpdateItem of the tasks table naming verb) applies and its answer is
// lost; then a's other worker takes x (after again, which may reopen
// it), releases it naming no lease (its own end_write) and takes it
// again, each gap later, and the change stream archives it all. third
// gives a's third lease once the race has run.
func takenTwiceMoreByA(t *testing.T, e *env, verb string, gap time.Duration, again func(t *testing.T, e *env)) (doer *lossyDoer, third func() lease.Checkout) {
	t.Helper()
	e.task(t, "x")
	e.checkout(t, "x", "a", time.Hour)
	e.clock.Advance(time.Minute)
	var co lease.Checkout
	doer = &lossyDoer{applied: true, match: endingOf(e, verb), race: func() {
		e.clock.Advance(gap)
		again(t, e)
		e.checkout(t, "x", "a", time.Hour)
		e.clock.Advance(gap)
		must[lease.Released](t)(e.store.Release(ctx(t), lease.ReleaseParams{TaskID: "x", AgentID: "a"}))
		e.clock.Advance(gap)
		co = e.checkout(t, "x", "a", time.Hour)
		e.drain(t)
	}}
	return doer, func() lease.Checkout { return co }
}

// leftAlone fails t unless x still holds lease third, after the second
// sending of a's ending that made the first lease's (answered err).
func leftAlone(t *testing.T, e *env, third lease.Checkout, err error) {
	t.Helper()
	if got := e.get(t, "x"); got.Checkout == nil || got.Checkout.Fence != third.Fence {
		t.Fatalf("a's third lease (fence %d), granted after the ending's first sending applied, was ended by its second sending "+
			"(answered %v): x is %s, lease %v", third.Fence, err, got.Status, got.Checkout)
	}
}

// steppedOver is e.over with a clock off e's by first at its first
// reading and by then at every later one: a clock stepped between them.
func (e *env) steppedOver(doer *lossyDoer, first, then time.Duration) *lease.Store {
	var reads atomic.Int32
	return lease.New(lease.Config{
		DB:     lease.NewLocalClient(testenv.Endpoint(), func(o *dynamodb.Options) { o.HTTPClient = doer }),
		Tables: e.names,
		Now: func() time.Time {
			if reads.Add(1) == 1 {
				return e.clock.Now().Add(first)
			}
			return e.clock.Now().Add(then)
		},
	})
}

// endingOf matches an UpdateItem of e's tasks table naming verb (a
// lossyDoer's match).
func endingOf(e *env, verb string) func(target, body string) bool {
	tasks := e.names.Table(schema.TasksTable)
	return func(target, body string) bool {
		return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) && strings.Contains(body, verb)
	}
}

// noAgain is a race's again that does nothing.
func noAgain(*testing.T, *env) {}

// A release or completion naming no lease, its ending applied and its
// answer lost. In the gap a's other worker takes the task (reopened first,
// after a completion), releases it (naming no lease: its own end_write)
// and takes it again, each a moment later, and the change stream archives
// it all. The SDK's second sending is refused; its own ending's id is no
// longer on the item, but its ending in the trail keeps it: the call is
// answered as that ending was, and a's third lease is left alone (it
// answered 404 not_checked_out, which told the agent its work was lost).
func TestAnEndingNamingNoLeaseSentTwicePastTwoTransitionsIsAnsweredFromTheTrail(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		verb  string
		end   func(t *testing.T, s *lease.Store) error
		again func(t *testing.T, e *env)
	}{
		{"release", `"release"`, func(t *testing.T, s *lease.Store) error {
			r, err := s.Release(ctx(t), lease.ReleaseParams{TaskID: "x", AgentID: "a"})
			if err == nil && (r.ReleasedBy != "a" || r.Held != time.Minute) {
				t.Errorf("answered released by %q after %v held, want by a after a minute", r.ReleasedBy, r.Held)
			}
			return err
		}, noAgain},
		{"completion", `"complete"`, func(t *testing.T, s *lease.Store) error {
			done, err := s.Complete(ctx(t), lease.CompleteParams{TaskID: "x", AgentID: "a"})
			if err == nil && (done.Status != lease.StatusDone || done.Version != 3) {
				t.Errorf("answered the task %s at version %d, want done at 3, as the completion left it", done.Status, done.Version)
			}
			return err
		}, func(t *testing.T, e *env) {
			must[lease.Task](t)(e.store.UpdateTask(ctx(t), lease.UpdateTaskParams{TaskID: "x", AgentID: "admin", Status: new(lease.StatusTodo)}))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			doer, third := takenTwiceMoreByA(t, e, tc.verb, time.Second, tc.again)
			err := tc.end(t, e.over(doer))
			if !doer.lost.Load() {
				t.Fatal("no ending was sent twice")
			}
			if err != nil {
				t.Errorf("a's %s naming no lease, applied, its answer lost and its ending archived: %v, want it answered as it was made", tc.name, err)
			}
			leftAlone(t, e, third(), err)
		})
	}
}

// stripEventWrites removes the write attribute from every archived event
// of taskID: the archive as the stream function of a version that kept
// no ending's write id leaves it, while a deploy has updated the API
// functions and not yet the stream function.
func stripEventWrites(t *testing.T, e *env, taskID string) {
	t.Helper()
	events := e.names.Table(schema.EventsTable)
	out, err := e.db.Query(ctx(t), &dynamodb.QueryInput{
		TableName:                 &events,
		KeyConditionExpression:    aws.String("task_id = :t"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":t": &types.AttributeValueMemberS{Value: taskID}},
		ConsistentRead:            aws.Bool(true),
	})
	if err != nil {
		t.Fatalf("query events: %v", err)
	}
	for _, it := range out.Items {
		if _, ok := it["write"]; !ok {
			continue
		}
		if _, err := e.db.UpdateItem(ctx(t), &dynamodb.UpdateItemInput{
			TableName:                &events,
			Key:                      map[string]types.AttributeValue{"task_id": it["task_id"], "seq": it["seq"]},
			UpdateExpression:         aws.String("REMOVE #w"),
			ExpressionAttributeNames: map[string]string{"#w": "write"},
		}); err != nil {
			t.Fatalf("strip write: %v", err)
		}
	}
}

// The release naming no lease of
// TestAnEndingNamingNoLeaseSentTwicePastTwoTransitionsIsAnsweredFromTheTrail,
// its first sending applied and its answer lost, a's other worker taking
// the task, releasing it and taking it again in the gap; but the trail's
// events were archived by a stream function that keeps no ending's write
// id (an earlier version, during a deploy). Finding no event with its
// write's id in a trail archived whole, the call took its write for one
// that ended nothing, wrote again unpinned and ended a's third lease (a
// review's test); an ending like its own with no id now leaves the
// judgement to the times: 404, the lease left alone.
func TestAnUnnamedReleaseWhoseEndingWasArchivedWithoutItsIdLeavesTheThirdLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	doer, third := takenTwiceMoreByA(t, e, `"release"`, time.Second, noAgain)
	race := doer.race
	doer.race = func() {
		race()
		stripEventWrites(t, e, "x")
	}
	_, err := e.over(doer).Release(ctx(t), lease.ReleaseParams{TaskID: "x", AgentID: "a"})
	if !doer.lost.Load() {
		t.Fatal("no ending was sent twice")
	}
	leftAlone(t, e, third(), err)
}

// The same release, its ending stamped by a clock that stepped back a
// few milliseconds between the call's start (read first) and its write's
// time: its own ending's event is stamped before the start. The trail's
// read stopped there before matching its id, took the write for one that
// ended nothing, and ended a's third lease (a review's test); its own
// ending is now matched first, and answered.
func TestAnUnnamedReleaseStampedBeforeItsStartFindsItsEnding(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	doer, third := takenTwiceMoreByA(t, e, `"release"`, time.Second, noAgain)
	// The wall clock steps back 5 ms right after its first reading.
	s := e.steppedOver(doer, 0, -5*time.Millisecond)
	_, err := s.Release(ctx(t), lease.ReleaseParams{TaskID: "x", AgentID: "a"})
	if !doer.lost.Load() {
		t.Fatal("no ending was sent twice")
	}
	leftAlone(t, e, third(), err)
	if err != nil {
		t.Errorf("answered %v, want the release answered from the trail", err)
	}
}

// TestAnUnnamedReleaseStampedBeforeItsStartFindsItsEnding with a larger
// step: this process's clock runs 200 ms ahead and is stepped back between
// the call's first reading and its write, and a's other worker's
// checkout, release and checkout, a millisecond apart on a clock that is
// right, are all stamped before that first reading. The trail's read
// stopped at the newest of them, took the write for one that ended
// nothing and ended a's third lease (a review's test); it now reads back
// to the earliest time of the call's writes.
func TestAnUnnamedReleaseOnAClockSteppedBackPastLaterTransitionsFindsItsEnding(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	doer, third := takenTwiceMoreByA(t, e, `"release"`, time.Millisecond, noAgain)
	s := e.steppedOver(doer, 200*time.Millisecond, 0) // ahead, then stepped back
	_, err := s.Release(ctx(t), lease.ReleaseParams{TaskID: "x", AgentID: "a"})
	if !doer.lost.Load() {
		t.Fatal("no ending was sent twice")
	}
	leftAlone(t, e, third(), err)
	if err != nil {
		t.Errorf("answered %v, want the release answered from the trail", err)
	}
}

// A release or completion naming no lease, its first sending applied and
// its answer lost; in the gap a's other worker is granted x in that same
// millisecond (after a reopen, for the completion; a grant on a clock
// behind, refused by the time rule, is made again at the release's own
// time). The SDK's second sending met holder a, a live lease and a latest
// transition not after its time: it applied again and ended a's new
// lease, which no request ended (a review's test). It is now refused on
// its own ending, still on the item, and answered as that ending.
func TestAnEndingNamingNoLeaseSentTwiceLeavesALeaseGrantedInItsMillisecond(t *testing.T) {
	t.Parallel()
	for _, verb := range []string{"release", "complete"} {
		t.Run(verb, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.task(t, "x")
			e.checkout(t, "x", "a", time.Hour)
			e.clock.Advance(time.Minute)
			var co lease.Checkout
			doer := &lossyDoer{applied: true, match: endingOf(e, `"`+verb+`"`), race: func() {
				if verb == "complete" {
					must[lease.Task](t)(e.store.UpdateTask(ctx(t), lease.UpdateTaskParams{TaskID: "x", AgentID: "admin", Status: new(lease.StatusTodo)}))
				}
				co = e.checkout(t, "x", "a", time.Hour) // same millisecond
			}}
			var err error
			if verb == "release" {
				_, err = e.over(doer).Release(ctx(t), lease.ReleaseParams{TaskID: "x", AgentID: "a"})
			} else {
				_, err = e.over(doer).Complete(ctx(t), lease.CompleteParams{TaskID: "x", AgentID: "a"})
			}
			if !doer.lost.Load() {
				t.Fatal("no ending was sent twice")
			}
			got := e.get(t, "x")
			if got.Checkout == nil || got.Checkout.Fence != co.Fence {
				t.Fatalf("a's lease granted after the %s's first sending applied (fence %d) was ended by its second sending (answered %v): x is %s, lease %v",
					verb, co.Fence, err, got.Status, got.Checkout)
			}
			if err != nil {
				t.Errorf("the %s, applied and sent again: %v, want it answered as it was made", verb, err)
			}
		})
	}
}

// The same with a release naming only its run id: the run checks the
// task out again by name (as `checkout mcp` and CHECKOUT_RUN_ID do) in
// that same millisecond, and the second sending ended the run's new lease
// (a review's test). Such a release now keeps a write id too.
func TestARunIDOnlyReleaseSentTwiceLeavesTheRunsLeaseGrantedInItsMillisecond(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "x")
	must[lease.Checkout](t)(e.store.Checkout(ctx(t), lease.CheckoutParams{TaskID: "x", AgentID: "a", RunID: "r-a", Timeout: time.Hour}))
	e.clock.Advance(time.Minute)
	var co lease.Checkout
	doer := &lossyDoer{applied: true, match: endingOf(e, `"release"`), race: func() {
		co = must[lease.Checkout](t)(e.store.Checkout(ctx(t), lease.CheckoutParams{TaskID: "x", AgentID: "a", RunID: "r-a", Timeout: time.Hour}))
	}}
	_, err := e.over(doer).Release(ctx(t), lease.ReleaseParams{TaskID: "x", AgentID: "a", RunID: "r-a"})
	if !doer.lost.Load() {
		t.Fatal("no ending was sent twice")
	}
	got := e.get(t, "x")
	if got.Checkout == nil || got.Checkout.Fence != co.Fence {
		t.Fatalf("the run's lease granted after the release's first sending applied (fence %d) was ended by its second sending (answered %v): x is %s, lease %v",
			co.Fence, err, got.Status, got.Checkout)
	}
	if err != nil {
		t.Errorf("the release, applied and sent again: %v, want it answered as it was made", err)
	}
}

// A release or completion naming only its run id, its first sending
// applied and its answer lost. In the gap another agent b takes the task
// (reopened first, after a completion) and releases it, and then the run
// checks the task out again by name. The SDK's second sending is refused
// on the time rule; the item holds a lease of the run and its last ending
// is b's, so the request took the run's lease for the one it named, never
// looked in the trail, and its next write ended the run's new lease,
// granted after the call had ended the one it meant (a review's test). A
// request naming only its run is now judged by its write's id, as one
// naming no lease.
func TestARunIDOnlyEndingSentTwicePastAnotherAgentsLeaseLeavesTheRunsNextLease(t *testing.T) {
	t.Parallel()
	for _, verb := range []string{"release", "complete"} {
		t.Run(verb, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "x")
			must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "x", AgentID: "a", RunID: "r-a", Timeout: time.Hour}))
			e.clock.Advance(time.Minute)
			var co lease.Checkout
			doer := &lossyDoer{applied: true, match: endingOf(e, `"`+verb+`"`), race: func() {
				e.clock.Advance(time.Second)
				if verb == "complete" {
					must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "admin", Status: new(lease.StatusTodo)}))
				}
				b := e.checkout(t, "x", "b", time.Hour)
				e.clock.Advance(time.Second)
				must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "b", Fence: b.Fence}))
				e.clock.Advance(time.Second)
				co = must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "x", AgentID: "a", RunID: "r-a", Timeout: time.Hour}))
				e.drain(t)
			}}
			var err error
			if verb == "release" {
				_, err = e.over(doer).Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "a", RunID: "r-a"})
			} else {
				_, err = e.over(doer).Complete(c, lease.CompleteParams{TaskID: "x", AgentID: "a", RunID: "r-a"})
			}
			if !doer.lost.Load() {
				t.Fatal("no ending was sent twice")
			}
			got := e.get(t, "x")
			if got.Checkout == nil || got.Checkout.Fence != co.Fence {
				t.Fatalf("the run's lease granted after the %s's first sending applied (fence %d) was ended by the same call (answered %v): x is %s, lease %v",
					verb, co.Fence, err, got.Status, got.Checkout)
			}
			if err != nil {
				t.Errorf("the %s, applied and sent again: %v, want it answered as it was made", verb, err)
			}
		})
	}
}

// A release or completion naming no lease, its first sending applied and
// its answer lost. Within that very millisecond (the other workers'
// clocks behind the caller's) another agent b takes the task and releases
// it by its fence, which takes the call's write id off the item, and a's
// other worker takes it again. The SDK's second sending passed the time
// rule (every transition at its time), found a's lease and no ending of
// its own on the item, and ended a's new lease (a review's test). An
// ending naming no lease is now refused on an item ended at or after its
// time, and finds its own ending in the trail.
func TestAnEndingNamingNoLeaseSentTwicePastThreeTransitionsInItsMillisecondLeavesTheNewLease(t *testing.T) {
	t.Parallel()
	for _, verb := range []string{"release", "complete"} {
		t.Run(verb, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "x")
			e.checkout(t, "x", "a", time.Hour)
			e.clock.Advance(time.Minute)
			var co lease.Checkout
			doer := &lossyDoer{applied: true, match: endingOf(e, `"`+verb+`"`), race: func() {
				if verb == "complete" {
					must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "admin", Status: new(lease.StatusTodo)}))
				}
				b := e.checkout(t, "x", "b", time.Hour)
				must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "b", Fence: b.Fence}))
				co = e.checkout(t, "x", "a", time.Hour)
				e.drain(t)
			}}
			var err error
			if verb == "release" {
				_, err = e.over(doer).Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "a"})
			} else {
				_, err = e.over(doer).Complete(c, lease.CompleteParams{TaskID: "x", AgentID: "a"})
			}
			if !doer.lost.Load() {
				t.Fatal("no ending was sent twice")
			}
			leftAlone(t, e, co, err)
			if err != nil {
				t.Errorf("the %s, applied and sent again: %v, want it answered as it was made", verb, err)
			}
		})
	}
}

// The same race for a release with outcome failed naming no lease (a
// review's test): its second sending, pinned to the lease it read, was
// refused and answered 404 not_checked_out, though its ending was made
// and its error recorded. It now finds its ending in the trail by its
// write's id, as a plain release does.
func TestAFailedReleaseNamingNoLeaseSentTwicePastThreeTransitionsInItsMillisecondIsAnsweredAsMade(t *testing.T) {
	t.Parallel()
	for _, withErr := range []string{"", "boom"} {
		t.Run("error="+withErr, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			zero := time.Duration(0) // so that b may take it again at once
			must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "x", Title: "x", RetryDelay: &zero}))
			e.checkout(t, "x", "a", time.Hour)
			e.clock.Advance(time.Minute)
			var co lease.Checkout
			doer := &lossyDoer{applied: true, match: endingOf(e, `"release"`), race: func() {
				b := e.checkout(t, "x", "b", time.Hour)
				must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "b", Fence: b.Fence}))
				co = e.checkout(t, "x", "a", time.Hour)
				e.drain(t)
			}}
			r, err := e.over(doer).Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "a", Outcome: lease.OutcomeFailed, Error: withErr})
			if !doer.lost.Load() {
				t.Fatal("no ending was sent twice")
			}
			leftAlone(t, e, co, err)
			if err != nil {
				t.Fatalf("the failed release, applied and sent again: %v, want it answered as it was made", err)
			}
			if r.ReleasedBy != "a" || r.Held != time.Minute {
				t.Errorf("answered released by %q after %v held, want by a after a minute", r.ReleasedBy, r.Held)
			}
		})
	}
}

// throttledDoer answers the first request match selects as DynamoDB does
// one it throttled, without sending it.
type throttledDoer struct {
	match func(target, body string) bool
	done  atomic.Bool
}

func (d *throttledDoer) Do(r *http.Request) (*http.Response, error) {
	if d.match(r.Header.Get("X-Amz-Target"), requestBody(r)) && d.done.CompareAndSwap(false, true) {
		return &http.Response{
			StatusCode: 400,
			Status:     "400 Bad Request",
			Header:     http.Header{"Content-Type": []string{"application/x-amz-json-1.0"}},
			Body: io.NopCloser(strings.NewReader(`{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",` +
				`"message":"The level of configured provisioned throughput for the table was exceeded."}`)),
			Request: r,
		}, nil
	}
	return http.DefaultClient.Do(r)
}

// b's lease ended by its fence and a's granted in the same millisecond,
// and a's release naming no lease made in it too, with its first sending
// throttled: not applied, so its second sending is made as the first
// would have been, and ends a's lease, whatever the change stream has
// archived (a review found the second sending refused on b's ending and,
// with the stream held up, answered 404 while a kept the lease).
func TestAnEndingNamingNoLeaseThrottledOnceInTheMillisecondOfAnotherEndingEndsTheLease(t *testing.T) {
	t.Parallel()
	for _, verb := range []string{"release", "complete"} {
		t.Run(verb, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "x")
			b := e.checkout(t, "x", "b", time.Hour)
			e.clock.Advance(time.Minute)
			must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "b", Fence: b.Fence}))
			e.checkout(t, "x", "a", time.Hour) // same millisecond; the stream not run
			doer := &throttledDoer{match: endingOf(e, `"`+verb+`"`)}
			store := lease.New(lease.Config{
				DB:     lease.NewLocalClient(testenv.Endpoint(), func(o *dynamodb.Options) { o.HTTPClient = doer }),
				Tables: e.names, Now: e.clock.Now,
			})
			var err error
			if verb == "release" {
				_, err = store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "a"})
			} else {
				_, err = store.Complete(c, lease.CompleteParams{TaskID: "x", AgentID: "a"})
			}
			if !doer.done.Load() {
				t.Fatal("no ending was throttled")
			}
			if got := e.get(t, "x"); err != nil || got.Checkout != nil {
				t.Fatalf("a's %s naming no lease, throttled once: %v; x is %s, lease %v, want it made", verb, err, got.Status, got.Checkout)
			}
		})
	}
}

// The same with the first sending's answer lost (a 500, which may have
// been applied) and the change stream held up: the trail cannot tell
// whether it ended a's lease, and a's lease may be one granted after it
// (TestAnEndingNamingNoLeaseSentTwicePastThreeTransitionsInItsMillisecondLeavesTheNewLease):
// the call answers 404 and leaves the lease to its holder's next ending
// or its timeout, rather than risk ending a lease it did not mean.
func TestAnEndingNamingNoLeaseLostInTheMillisecondOfAnotherEndingWithTheStreamHeldUpLeavesTheLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "x")
	b := e.checkout(t, "x", "b", time.Hour)
	e.clock.Advance(time.Minute)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "b", Fence: b.Fence}))
	co := e.checkout(t, "x", "a", time.Hour) // same millisecond; the stream not run
	doer := &lossyDoer{applied: false, match: endingOf(e, `"release"`), race: func() {}}
	_, err := e.over(doer).Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "a"})
	if !doer.lost.Load() {
		t.Fatal("no ending was sent twice")
	}
	if !errors.Is(err, lease.ErrNotCheckedOut) {
		t.Errorf("answered %v, want 404 not_checked_out", err)
	}
	leftAlone(t, e, co, err)
}

// The race of TestAnEndingNamingNoLeaseSentTwicePastThreeTransitionsInItsMillisecondLeavesTheNewLease,
// and, before the store's second sending, x's blocker y is reopened, so
// that the change stream marks a's new lease as waiting on y (a review's
// test). The second sending of the ending that frees x was refused on
// the term; the refusal showed the mark, and the ending that leaves x
// blocked, another write, went out without the term and ended a's new
// lease. Every write of the call carries it once a sending may have
// applied.
func TestAnEndingNamingNoLeaseSentTwiceKeepsItsTermInTheEndingOfAMarkedTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "y")
	e.create(t, lease.CreateTaskParams{TaskID: "x", Title: "x", BlockedBy: []string{"y"}})
	e.complete(t, "y", "c")
	e.drain(t) // x unblocked
	e.checkout(t, "x", "a", time.Hour)
	e.clock.Advance(time.Minute)
	var co lease.Checkout
	doer := &lossyDoer{applied: true, match: endingOf(e, `"release"`), race: func() {
		b := e.checkout(t, "x", "b", time.Hour)
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "b", Fence: b.Fence}))
		co = e.checkout(t, "x", "a", time.Hour)
		e.drain(t)
		must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "y", AgentID: "admin", Status: new(lease.StatusTodo)}))
		e.drain(t) // x's lease marked as waiting on y
	}}
	_, err := e.over(doer).Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "a"})
	if !doer.lost.Load() {
		t.Fatal("no ending was sent twice")
	}
	leftAlone(t, e, co, err)
	if err != nil {
		t.Errorf("answered %v, want the release answered from the trail", err)
	}
}

// b's lease ended by its fence, a's granted and x given a not_before an
// hour on, all in one millisecond, the change stream held up; a's release
// naming no lease, throttled once or not (a review's test). Its sending
// after the throttle, refused on the not_before as a first sending is,
// was counted as a second one that may have applied: the trail was waited
// for in vain and the call answered 404 while a kept x. A sending known
// not to have applied is not counted: the release is made, delayed.
func TestAThrottledEndingNamingNoLeaseOfATaskDelayedInTheMillisecondOfAnotherEndingIsMade(t *testing.T) {
	t.Parallel()
	for _, throttle := range []bool{false, true} {
		name := "sent once"
		if throttle {
			name = "throttled once"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "x")
			b := e.checkout(t, "x", "b", time.Hour)
			e.clock.Advance(time.Minute)
			must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "b", Fence: b.Fence}))
			e.checkout(t, "x", "a", time.Hour) // same millisecond; the stream not run
			nb := e.clock.Now().Add(time.Hour)
			must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "admin", SetNotBefore: true, NotBefore: &nb}))
			doer := &throttledDoer{match: endingOf(e, `"release"`)}
			doer.done.Store(!throttle)
			_, err := e.over(doer).Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "a"})
			if got := e.get(t, "x"); err != nil || got.Checkout != nil {
				t.Fatalf("a's release naming no lease (%s): %v; x is %s, lease %v, want it made (delayed)", name, err, got.Status, got.Checkout)
			}
		})
	}
}
