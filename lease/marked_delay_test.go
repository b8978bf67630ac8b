package lease_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// A dependent in progress, marked as waiting on its reopened blocker,
// with a not_before an hour ahead PATCHed while it was held. Its lease's
// ending makes it blocked (endLease), but wrote none of its delay: it kept
// its ready claim_key and lost its expiry entry. When its blocker was
// completed again it was todo, listed, and ranked for claims, among the
// ready tasks at its priority. Each case ends the lease another way: the
// sweep (by a timeout, by its holder's death), a release, a failed release
// and a force release.
func TestAMarkedLeaseEndedBlockedKeepsItsNotBefore(t *testing.T) {
	t.Parallel()
	for _, end := range []string{"timeout", "death", "release", "failed", "force"} {
		t.Run(end, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			nine, zero := 9, 0
			e.task(t, "b")
			e.create(t, lease.CreateTaskParams{TaskID: "d", Priority: &nine, BlockedBy: []string{"b"}})
			e.complete(t, "b", "x")
			e.drain(t) // b's completion unblocks d
			if end == "death" {
				must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", time.Minute))
			}
			co := e.checkout(t, "d", "a", 10*time.Minute)
			nb := e.clock.Now().Add(time.Hour)
			must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "d", AgentID: "a", SetNotBefore: true, NotBefore: &nb}))
			must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "b", AgentID: "x", Status: new(lease.StatusTodo)}))
			e.drain(t) // b's reopening marks d
			switch end {
			case "timeout", "death":
				if end == "death" {
					e.clock.Advance(2 * time.Minute) // the heartbeat has run out; the lease has not
				} else {
					e.clock.Advance(11 * time.Minute)
				}
				e.caughtUp(t) // the sweep finds the lease or the death through an index
				if res := must[lease.SweepResult](t)(e.store.Sweep(c)); res.Timeouts+res.AgentDeaths != 1 {
					t.Fatalf("sweep %+v: want d's lease ended by its %s", res, end)
				}
			case "release":
				must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "d", AgentID: "a", RunID: co.RunID}))
			case "failed":
				must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "d", AgentID: "a", RunID: co.RunID, Outcome: lease.OutcomeFailed}))
			case "force":
				must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "d", AgentID: "admin", Force: true}))
			}
			if st := e.get(t, "d").Status; st != lease.StatusBlocked {
				t.Fatalf("d after its lease ended: %s; want blocked (b was reopened)", st)
			}
			// Its delay, as a task delayed while blocked has (claim.go,
			// "Delays"): the delayed claim key, and the expiry entry at
			// its not_before.
			raw := rawTask(t, e, "d")
			key, rank, expires := raw["claim_key"], raw["claim_rank"], raw["lease_expires"]
			rankS, _ := rank.(*types.AttributeValueMemberS)
			if want := fmt.Sprintf("~%013d#", nb.UnixMilli()); rankS == nil || !equalS(key, want+rankS.Value) {
				t.Errorf("d's claim_key %v (claim_rank %v); want %s<claim_rank>, ranked after the ready tasks", key, rank, want)
			}
			if n, ok := expires.(*types.AttributeValueMemberN); !ok || n.Value != strconv.FormatInt(nb.UnixMilli(), 10) {
				t.Errorf("d's lease_expires %v; want %d, its not_before: the sweep ranks it ready then", expires, nb.UnixMilli())
			}

			e.clock.Advance(time.Millisecond)
			e.complete(t, "b", "x")
			e.drain(t) // b's completion unblocks d again
			e.create(t, lease.CreateTaskParams{TaskID: "ready", Priority: &zero})
			e.caughtUp(t) // the listing and the claim find the tasks through indexes
			if got := e.get(t, "d"); got.Status != lease.StatusTodo || got.NotBefore == nil || !got.NotBefore.Equal(nb) {
				t.Fatalf("d after b's completion: status %s, not_before %v; want todo, %v", got.Status, got.NotBefore, nb)
			}
			if ids := todoIDs(t, e.store); !slices.Equal(ids, []string{"ready", "d"}) {
				t.Fatalf("todo listed %v; want [ready d]: d waits for its not_before an hour ahead", ids)
			}
			if got := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "c"})); got.TaskID != "ready" {
				t.Fatalf("claim got %s; want ready (d waits for its not_before)", got.TaskID)
			}
			// Once its not_before has passed, a sweep ranks it ready.
			e.clock.Advance(time.Hour)
			e.caughtUp(t) // the sweep finds d's expiry entry through an index
			if res := must[lease.SweepResult](t)(e.store.Sweep(c)); res.Ready != 1 {
				t.Fatalf("sweep after not_before %+v; want d ranked ready", res)
			}
			if raw := rawTask(t, e, "d"); !equalS(raw["claim_key"], rankS.Value) {
				t.Errorf("d's claim_key %v after the sweep; want its ready key %s", raw["claim_key"], rankS.Value)
			}
		})
	}
}

// equalS says v is the string s.
func equalS(v types.AttributeValue, s string) bool {
	got, ok := v.(*types.AttributeValueMemberS)
	return ok && got.Value == s
}

// A PATCH of the marked task's not_before between its ending's two writes
// (the one refused on the mark, and the blocked one pinned to the delay
// the first found): the lease still ends, and the task waits for the
// not_before it has then, or, cleared, ranks as ready once unblocked.
func TestAMarkedLeaseEndedBlockedTakesTheNotBeforePatchedInBetween(t *testing.T) {
	t.Parallel()
	for _, patched := range []string{"later", "cleared"} {
		t.Run(patched, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			nine, zero := 9, 0
			e.task(t, "b")
			e.create(t, lease.CreateTaskParams{TaskID: "d", Priority: &nine, BlockedBy: []string{"b"}})
			e.complete(t, "b", "x")
			e.drain(t) // b's completion unblocks d
			co := e.checkout(t, "d", "a", 10*time.Minute)
			nb := e.clock.Now().Add(time.Hour)
			must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "d", AgentID: "a", SetNotBefore: true, NotBefore: &nb}))
			must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "b", AgentID: "x", Status: new(lease.StatusTodo)}))
			e.drain(t) // b's reopening marks d
			var then *time.Time
			if patched == "later" {
				then = new(nb.Add(time.Hour))
			}
			slow, db := delayed(e)
			db.armAfter(func() { // the write refused on the mark
				if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "d", AgentID: "a", SetNotBefore: true, NotBefore: then}); err != nil {
					t.Errorf("PATCH not_before %v: %v", then, err)
				}
			})
			must[lease.Released](t)(slow.Release(c, lease.ReleaseParams{TaskID: "d", AgentID: "a", RunID: co.RunID}))
			if st := e.get(t, "d").Status; st != lease.StatusBlocked {
				t.Fatalf("d after its release: %s; want blocked (b was reopened)", st)
			}
			raw := rawTask(t, e, "d")
			created, _ := raw["created_at"].(*types.AttributeValueMemberN)
			if created == nil {
				t.Fatalf("d has no created_at: %v", raw)
			}
			// Its ready key: priority 9 first, then age.
			ready := fmt.Sprintf("0#%s#d", created.Value)
			wantKey, wantExpires := types.AttributeValue(&types.AttributeValueMemberS{Value: ready}), types.AttributeValue(nil)
			if then != nil {
				rank, _ := raw["claim_rank"].(*types.AttributeValueMemberS)
				if rank == nil {
					t.Fatalf("d has no claim_rank: %v", raw)
				}
				wantKey = &types.AttributeValueMemberS{Value: fmt.Sprintf("~%013d#%s", then.UnixMilli(), rank.Value)}
				wantExpires = &types.AttributeValueMemberN{Value: strconv.FormatInt(then.UnixMilli(), 10)}
			}
			if !sameAttr(raw["claim_key"], wantKey) || !sameAttr(raw["lease_expires"], wantExpires) {
				t.Errorf("d's claim_key %v, lease_expires %v; want %v, %v", raw["claim_key"], raw["lease_expires"], wantKey, wantExpires)
			}

			e.clock.Advance(time.Millisecond)
			e.complete(t, "b", "x")
			e.drain(t) // b's completion unblocks d again
			e.create(t, lease.CreateTaskParams{TaskID: "ready", Priority: &zero})
			e.caughtUp(t) // the listing finds the tasks through an index
			want := []string{"ready", "d"}
			if then == nil {
				want = []string{"d", "ready"}
			}
			if ids := todoIDs(t, e.store); !slices.Equal(ids, want) {
				t.Fatalf("todo listed %v; want %v", ids, want)
			}
		})
	}
}

// sameAttr says a and b are the same string or number, or both missing.
func sameAttr(a, b types.AttributeValue) bool {
	switch b := b.(type) {
	case nil:
		return a == nil
	case *types.AttributeValueMemberS:
		return equalS(a, b.Value)
	case *types.AttributeValueMemberN:
		n, ok := a.(*types.AttributeValueMemberN)
		return ok && n.Value == b.Value
	}
	return false
}

// A task held since before ready tasks kept no claim_rank (its item has
// claim_rank, equal to its ready claim_key), marked, with a not_before
// PATCHed while it was held: a PATCH of its queue between its release's
// two writes removes that claim_rank, and the blocked write, pinned to it,
// is refused with the rank unchanged. The release still ends the lease,
// as it does when the PATCH moves the rank.
func TestAMarkedLeaseEndedBlockedAfterItsRankLostItsOldForm(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	nine := 9
	e.task(t, "b")
	e.create(t, lease.CreateTaskParams{TaskID: "d", Priority: &nine, BlockedBy: []string{"b"}})
	e.complete(t, "b", "x")
	e.drain(t) // b's completion unblocks d
	co := e.checkout(t, "d", "a", 10*time.Minute)
	nb := e.clock.Now().Add(time.Hour)
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "d", AgentID: "a", SetNotBefore: true, NotBefore: &nb}))
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "b", AgentID: "x", Status: new(lease.StatusTodo)}))
	e.drain(t) // b's reopening marks d
	// As the grant wrote it before: claim_rank, a copy of the ready key.
	raw := rawTask(t, e, "d")
	key, ok := raw["claim_key"].(*types.AttributeValueMemberS)
	if !ok || strings.HasPrefix(key.Value, "~") {
		t.Fatalf("d's claim_key %v; want its ready key while held", raw["claim_key"])
	}
	must[*dynamodb.UpdateItemOutput](t)(e.db.UpdateItem(c, &dynamodb.UpdateItemInput{
		TableName: aws.String(e.names.Table(schema.TasksTable)), Key: map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: "d"}},
		UpdateExpression: aws.String("SET claim_rank = claim_key"),
	}))
	slow, db := delayed(e)
	db.armAfter(func() { // the write refused on the mark
		if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "d", AgentID: "a", Queue: aws.String("other")}); err != nil {
			t.Errorf("PATCH queue: %v", err)
		}
	})
	if _, err := slow.Release(c, lease.ReleaseParams{TaskID: "d", AgentID: "a", RunID: co.RunID}); err != nil {
		t.Fatalf("release of d's live lease: %v; want it released", err)
	}
	got := e.get(t, "d")
	if got.Status != lease.StatusBlocked || got.Checkout != nil {
		t.Fatalf("d after its release: %s, checkout %+v; want blocked, no lease (b was reopened)", got.Status, got.Checkout)
	}
	raw = rawTask(t, e, "d")
	if want := fmt.Sprintf("~%013d#%s", nb.UnixMilli(), key.Value); !equalS(raw["claim_key"], want) || !equalS(raw["claim_rank"], key.Value) {
		t.Errorf("d's claim_key %v, claim_rank %v; want %s, %s", raw["claim_key"], raw["claim_rank"], want, key.Value)
	}
}

// The sweep's ending of such a task's expired lease, not marked: its write
// pinned to the delay it read is refused on the claim_rank a PATCH of the
// queue removed, the rank unchanged. The sweep still ends the lease, with
// the task's delay.
func TestASweptLeaseKeepsItsDelayAfterItsRankLostItsOldForm(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "d")
	e.checkout(t, "d", "a", 10*time.Minute)
	nb := e.clock.Now().Add(time.Hour)
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "d", AgentID: "a", SetNotBefore: true, NotBefore: &nb}))
	raw := rawTask(t, e, "d")
	key, ok := raw["claim_key"].(*types.AttributeValueMemberS)
	if !ok || strings.HasPrefix(key.Value, "~") {
		t.Fatalf("d's claim_key %v; want its ready key while held", raw["claim_key"])
	}
	must[*dynamodb.UpdateItemOutput](t)(e.db.UpdateItem(c, &dynamodb.UpdateItemInput{
		TableName: aws.String(e.names.Table(schema.TasksTable)), Key: map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: "d"}},
		UpdateExpression: aws.String("SET claim_rank = claim_key"),
	}))
	e.clock.Advance(11 * time.Minute)
	e.caughtUp(t) // the sweep finds the lease through an index
	slow, db := delayed(e)
	db.armAfter(func() { // the write refused on the not_before ahead
		if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "d", AgentID: "u", Queue: aws.String("other")}); err != nil {
			t.Errorf("PATCH queue: %v", err)
		}
	})
	if res := must[lease.SweepResult](t)(slow.Sweep(c)); res.Timeouts != 1 {
		t.Fatalf("sweep %+v: want d's lease ended by its timeout", res)
	}
	raw = rawTask(t, e, "d")
	if want := fmt.Sprintf("~%013d#%s", nb.UnixMilli(), key.Value); raw["holder"] != nil || !equalS(raw["claim_key"], want) {
		t.Errorf("d's holder %v, claim_key %v; want none, %s", raw["holder"], raw["claim_key"], want)
	}
}
