package lease_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
)

// appliedTaskStore is a store on e's tables whose first request that match
// accepts reaches DynamoDB and has its answer lost (lossyDoer, applied),
// race running before the SDK sends it again.
func appliedTaskStore(e *env, match func(target, body string) bool, race func()) (*lease.Store, *lossyDoer) {
	doer := &lossyDoer{match: match, race: race, applied: true}
	client := lease.NewLocalClient(testenv.Endpoint(), func(o *dynamodb.Options) { o.HTTPClient = doer })
	return lease.New(lease.Config{DB: client, Tables: e.names, Now: e.clock.Now}), doer
}

// A renewal whose first sending applied and whose answer was lost is sent
// again by the SDK (sends.go). When the lease it renewed ended before that
// second sending (the holder's own release from another of its workers,
// an admin's force release, the sweep once the renewed lease ran out), the
// second sending found no lease and the renewal, which had been made,
// answered 404 not_checked_out: an answer no order explains where the
// ending shows the renewal (the sweep ended the lease at the expiry the
// renewal set). The ending keeps the lease's renewal write ids until the
// next grant (or a reopen, which counts the task's attempts anew), and the
// renewal answers the lease as it renewed it.
func TestARenewalSentTwiceAfterItsLeaseEndedIsAnsweredAsMade(t *testing.T) {
	for _, end := range []string{"release", "force", "sweep", "complete", "reopen"} {
		t.Run(end, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "x")
			co := e.checkout(t, "x", "ag", time.Minute)
			e.clock.Advance(time.Second)
			renewedAt := e.clock.Now()

			updates := taskUpdate(e)
			var raceErr error
			s, doer := appliedTaskStore(e, func(target, body string) bool {
				return updates(target, body) && strings.Contains(body, `{"S":"renew"}`)
			}, func() {
				switch end {
				case "release":
					_, raceErr = e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "ag", RunID: co.RunID})
				case "force":
					_, raceErr = e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "admin", Force: true})
				case "complete", "reopen":
					_, raceErr = e.store.Complete(c, lease.CompleteParams{TaskID: "x", AgentID: "ag", RunID: co.RunID})
					if raceErr == nil && end == "reopen" {
						todo := lease.StatusTodo
						_, raceErr = e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "admin", Status: &todo})
					}
				case "sweep":
					e.clock.Advance(2 * time.Minute) // past the renewed expiry
					var res lease.SweepResult
					res, raceErr = e.store.Sweep(c)
					if raceErr == nil && res.Timeouts != 1 {
						t.Errorf("the sweep ended %d leases, want the renewed one", res.Timeouts)
					}
				}
			})
			got, err := s.Renew(c, lease.RenewParams{TaskID: "x", AgentID: "ag", RunID: co.RunID})
			if !doer.lost.Load() {
				t.Fatal("the renewal's answer was not lost")
			}
			if raceErr != nil {
				t.Fatalf("the %s between the sendings: %v", end, raceErr)
			}
			if end == "reopen" {
				// Its attempt counted anew, the lease is no longer known:
				// answered as a renewal of an ended lease is.
				if !errors.Is(err, lease.ErrNotCheckedOut) {
					t.Fatalf("a renewal sent again after its lease was completed and the task reopened: answered %v (%+v), want not_checked_out", err, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("a renewal made, its answer lost and its lease then ended (%s): answered %v, want the renewed lease", end, err)
			}
			if got.Fence != co.Fence || got.RunID != co.RunID || got.AgentID != "ag" {
				t.Fatalf("the renewal answered lease %s/%s fence %d, want ag/%s fence %d", got.AgentID, got.RunID, got.Fence, co.RunID, co.Fence)
			}
			if want := renewedAt.Add(time.Minute); !got.ExpiresAt.Equal(want) || got.Timeout != time.Minute {
				t.Fatalf("the renewal answered expiry %v, timeout %v; want %v, %v", got.ExpiresAt, got.Timeout, want, time.Minute)
			}
			want := []lease.EventType{lease.EventCheckout, lease.EventRenew, lease.EventRelease}
			switch end {
			case "force":
				want[2] = lease.EventForceRelease
			case "sweep":
				want[2] = lease.EventTimeout
			case "complete":
				want[2] = lease.EventComplete
			}
			e.drain(t)
			if evs := kinds(e.events(t, "x")); !slices.Equal(evs, want) {
				t.Fatalf("x's trail %v, want %v", evs, want)
			}
		})
	}
}

// A renewal of a named agent's lease (its name is not its id), sent twice
// by the SDK after its lease ended, answered agent_name set to the agent's
// id: the live lease, and a renewal of it answered while it was live, say
// the agent's name. The ending now leaves holder_name until the next grant.
func TestARenewalSentTwiceAfterItsLeaseEndedAnswersItsHoldersName(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "x")
	co := e.checkout(t, "x", "ag", time.Minute) // AgentName "name-ag"
	if co.AgentName != "name-ag" {
		t.Fatalf("checkout answered agent name %q, want name-ag", co.AgentName)
	}
	e.clock.Advance(time.Second)
	got := renewAcross(t, e, co, func() error {
		_, err := e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "ag", RunID: co.RunID})
		return err
	})
	if got.AgentName != co.AgentName {
		t.Errorf("a renewal sent twice after its lease's release answered agent name %q, want %q (the lease's)", got.AgentName, co.AgentName)
	}
}

// A renewal R1 sent twice, a second renewal R2 of the lease landing
// before the second sending, then the lease's release: R1 answered the
// timeout from its own time to R2's expiry, one nobody asked for (here
// past MaxTimeout, 24 h). A renewal of the live lease sent twice across R2
// answers the lease's own timeout (timeout_ms), as R2 set it; the ending
// now leaves timeout_ms until the next grant, and so does this one.
func TestARenewalSentTwiceAcrossARenewalAndAnEndingAnswersTheLeasesTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "x")
	co := e.checkout(t, "x", "ag", lease.MaxTimeout)
	e.clock.Advance(time.Second)
	got := renewAcross(t, e, co, func() error {
		e.clock.Advance(time.Hour)
		if _, err := e.store.Renew(c, lease.RenewParams{TaskID: "x", AgentID: "ag", RunID: co.RunID}); err != nil {
			return err
		}
		_, err := e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "ag", RunID: co.RunID})
		return err
	})
	if got.Timeout != lease.MaxTimeout {
		t.Errorf("a renewal sent twice across another renewal and the lease's release answered timeout %v (expires %v); the lease's timeout is %v, at most %v",
			got.Timeout, got.ExpiresAt, lease.MaxTimeout, lease.MaxTimeout)
	}
}

// renewAcross renews co's lease on a store whose renewal write applies
// with its answer lost, race running before the SDK sends it again, and
// returns the renewal's answer, which must be a lease.
func renewAcross(t *testing.T, e *env, co lease.Checkout, race func() error) lease.Checkout {
	t.Helper()
	updates := taskUpdate(e)
	var raceErr error
	s, doer := appliedTaskStore(e, func(target, body string) bool {
		return updates(target, body) && strings.Contains(body, `{"S":"renew"}`)
	}, func() { raceErr = race() })
	got, err := s.Renew(ctx(t), lease.RenewParams{TaskID: co.TaskID, AgentID: co.AgentID, RunID: co.RunID})
	if !doer.lost.Load() || raceErr != nil {
		t.Fatalf("renewal's answer lost %v, the writes between its sendings %v", doer.lost.Load(), raceErr)
	}
	if err != nil {
		t.Fatalf("renewal: %v", err)
	}
	return got
}
