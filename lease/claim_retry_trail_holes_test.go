package lease_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// holeEvent is an archived event of x, raw, with what the tests pick by.
type holeEvent struct {
	raw        map[string]types.AttributeValue
	seq, prev  int64
	typ, agent string
	fence      int64
}

func holeStr(item map[string]types.AttributeValue, k string) string {
	if v, ok := item[k].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func holeNum(item map[string]types.AttributeValue, k string) int64 {
	if v, ok := item[k].(*types.AttributeValueMemberN); ok {
		n, _ := strconv.ParseInt(v.Value, 10, 64)
		return n
	}
	return 0
}

// archivedX lists x's archived events, oldest first.
func archivedX(t *testing.T, e *env) []holeEvent { return archivedOf(t, e, "x") }

func archivedOf(t *testing.T, e *env, id string) []holeEvent {
	t.Helper()
	name := e.names.Table(schema.EventsTable)
	expr, _ := expression.NewBuilder().WithKeyCondition(expression.Key("task_id").Equal(expression.Value(id))).Build()
	in := &dynamodb.QueryInput{
		TableName: &name, KeyConditionExpression: expr.KeyCondition(), ConsistentRead: aws.Bool(true),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
	}
	var out []holeEvent
	for p := dynamodb.NewQueryPaginator(e.db, in); p.HasMorePages(); {
		page, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range page.Items {
			out = append(out, holeEvent{raw: it, seq: holeNum(it, "seq"), prev: holeNum(it, "prev_seq"),
				typ: holeStr(it, "type"), agent: holeStr(it, "agent_id"), fence: holeNum(it, "fence")})
		}
	}
	return out
}

// unarchiveX deletes x's archived events that pick selects, as if the
// change stream had not archived them yet, and returns them.
func unarchiveX(t *testing.T, e *env, pick func(i int, ev holeEvent, all []holeEvent) bool) []holeEvent {
	return unarchiveOf(t, e, "x", pick)
}

// unarchiveOneX unarchives the one event of x that pick selects (what
// names it), and fails the test if pick selected not exactly one.
func unarchiveOneX(t *testing.T, e *env, what string, pick func(ev holeEvent) bool) []holeEvent {
	t.Helper()
	gone := unarchiveX(t, e, func(_ int, ev holeEvent, _ []holeEvent) bool { return pick(ev) })
	if len(gone) != 1 {
		t.Fatalf("%s: found %d", what, len(gone))
	}
	return gone
}

func unarchiveOf(t *testing.T, e *env, id string, pick func(i int, ev holeEvent, all []holeEvent) bool) []holeEvent {
	t.Helper()
	name := e.names.Table(schema.EventsTable)
	all := archivedOf(t, e, id)
	var gone []holeEvent
	for i, ev := range all {
		if !pick(i, ev, all) {
			continue
		}
		key := map[string]types.AttributeValue{"task_id": ev.raw["task_id"], "seq": ev.raw["seq"]}
		if _, err := e.db.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{TableName: &name, Key: key}); err != nil {
			t.Fatal(err)
		}
		gone = append(gone, ev)
	}
	return gone
}

// rearchive puts them back: the stream archives them (late).
func rearchive(t *testing.T, e *env, evs []holeEvent) {
	name := e.names.Table(schema.EventsTable)
	for _, ev := range evs {
		if _, err := e.db.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: &name, Item: ev.raw}); err != nil {
			t.Error(err)
		}
	}
}

func describeEvents(evs []holeEvent) string {
	var b strings.Builder
	for _, ev := range evs {
		fmt.Fprintf(&b, " %d<-%d %s/%s/f%d", ev.seq, ev.prev, ev.typ, ev.agent, ev.fence)
	}
	return b.String()
}

// The history of the F1 test, "reopened, granted, taken over", with
// renewals of b's lease after the reopen, so that a's grant lies more
// than 10 events back: b's grant and release, a's unkept claim (attempt
// 2), a's completion, a reopen, b's grant renewed `renewals` times, and
// d's takeover of b's expired lease (a's ending stays the task's record,
// so the item cannot tell a's attempt: the trail must).
func retryPastHistory(t *testing.T, renewals int) (*attemptHist, string, lease.Checkout) {
	t.Helper()
	h, run, want := newAttempt2Hist(t)
	h.reopenedGrantedTakenOver(renewals)
	h.e.drain(t)
	h.tick()
	return h, run, want
}

// a's grant is not archived yet while the events after it are (the
// stream archived them out of order: a BatchWriteItem that returned the
// grant among its UnprocessedItems, written again after its neighbours).
// The retry's look reads the trail from the newest back past a's grant
// time and sees the hole where the grant is (the completion's prev_seq
// names it, the event read next is older), though the newest 10 events,
// which lookInTrail checks, have none: it answers ErrGrantNotKept (or,
// the grant archived meanwhile, its attempt), never a guess that its
// receipt would keep; a retry once the grant is archived answers it.
func TestClaimRetryWithItsGrantArchivedOutOfOrderKeepsNoGuess(t *testing.T) {
	t.Parallel()
	h, run, want := retryPastHistory(t, 12)
	gone := unarchiveOneX(t, h.e, "a's grant event", func(ev holeEvent) bool {
		return ev.typ == "checkout" && ev.agent == "a" && ev.fence == want.Fence
	})
	t.Logf("unarchived:%s", describeEvents(gone))
	s, logs := h.loggedStore()
	h.retryNotKeptYet(s, run, "the retry while a's grant is not archived", logs)
	rearchive(t, h.e, gone)
	h.retryAnswersGrant(run, "a retry once a's grant is archived", "the receipt kept the guess")
}

// The task's earliest events (b's grant and release, a's grant) are not
// archived yet while a's completion is, and the latest transitions are
// not archived either, so the retry waits (lookInTrail sees that hole).
// Its first look reads a's completion alone, down to the oldest event
// stored, which names one before it not archived: the look knows its
// read is not whole. The stream archives everything while the retry
// waits, and a later look, which reads the whole trail again, finds a's
// grant and counts its attempt (2), which the receipt then keeps.
func TestClaimRetryFindsItsGrantArchivedLateBelowWhatItFirstRead(t *testing.T) {
	t.Parallel()
	h, run, want := retryPastHistory(t, 0)
	all := archivedX(t, h.e)
	t.Logf("archived:%s", describeEvents(all))
	var grantSeq int64
	for _, ev := range all {
		if ev.typ == "checkout" && ev.agent == "a" && ev.fence == want.Fence {
			grantSeq = ev.seq
		}
	}
	if grantSeq == 0 {
		t.Fatal("a's grant is not archived")
	}
	// Not archived: a's grant and everything before it, and the latest
	// three events (b's grant, b's timeout and d's checkout: the last two
	// are the item's latest, merged in by trailSince).
	gone := unarchiveX(t, h.e, func(i int, ev holeEvent, all []holeEvent) bool {
		return ev.seq <= grantSeq || i >= len(all)-3
	})
	t.Logf("unarchived:%s; left:%s", describeEvents(gone), describeEvents(archivedX(t, h.e)))
	// 400 ms on, the retry has looked once and waits.
	h.retryWhile(run, 400*time.Millisecond, func() { rearchive(t, h.e, gone) }, "the retry, every event archived while it waits")
	h.retryAnswersGrant(run, "a further retry", "the receipt kept it")
}

// The count's bound: b's grant is the task's first event, exactly 1,000
// events before a's grant (b's release, 998 renewals, b's grant). The
// count reads all of them and reaches the trail's start: a's attempt is
// 2, and no finish lies past the bound, so it is counted, not answered
// as 1 with a warning (README: attempt 1 only when the finish before it,
// if any, lies more than 1,000 events before it). (997 renewals: 999
// events.)
func TestClaimRetryCountsExactlyTheBoundToTheTrailsStart(t *testing.T) {
	t.Parallel()
	h, run := countBoundHistory(t, 998)
	all := archivedX(t, h.e)
	before := 0
	for _, ev := range all {
		if ev.typ == "checkout" && ev.agent == "a" {
			break
		}
		before++
	}
	t.Logf("events before a's grant: %d, the first: %s", before, describeEvents(all[:1]))
	s, logs := h.loggedStore()
	got := must[lease.Checkout](t)(s.Claim(ctx(t), h.params(run)))
	if got.Fence != h.want[run].Fence || got.Attempt != 2 {
		t.Errorf("retry: fence %d attempt %d, want fence %d attempt 2; log: %s", got.Fence, got.Attempt, h.want[run].Fence, strings.TrimSpace(logs.String()))
	}
}

// A grant sent twice (resentGrantInTrail): a's checkout of t (its first
// event, fence 1) is sent twice, its answer lost, and b and c take the
// lease over in between (both dead in turn), so the second sending is
// refused and looks for a's grant in the trail. The stream has archived
// a's death ending (seq 3) but not a's grant before it (out of order) nor
// b's checkout after it; c's takeover is the item's latest (merged in by
// trailSince, which so sees a hole and waits). While the refused grant
// waits, every event is archived: its next look reads the whole trail
// and answers a's grant (fence 1, attempt 1), not a conflict for a lease
// granted, an attempt counted, and no request answered with it.
func TestAGrantSentTwiceFindsItsGrantArchivedLateBelowWhatItFirstRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "t")
	must[lease.Heartbeat](t)(e.store.Heartbeat(ctx(t), "a", time.Second)) // a dies
	e.clock.Advance(2 * time.Second)
	e.caughtUp(t)
	events := e.names.Table(schema.EventsTable)
	looked, archived := make(chan struct{}), make(chan struct{})
	var once sync.Once
	co, err := grantSentTwice(t, e, func() {
		bDiesCTakesOver(t, e)
		all := archivedOf(t, e, "t")
		// Left archived: a's death ending alone (the second event).
		gone := unarchiveOf(t, e, "t", func(i int, ev holeEvent, _ []holeEvent) bool { return i != 1 })
		t.Logf("archived:%s; unarchived:%s", describeEvents(all), describeEvents(gone))
		go func() {
			defer close(archived)
			<-looked
			time.Sleep(300 * time.Millisecond) // the first look is made; the retry waits
			rearchive(t, e, gone)
		}()
	}, func(target, body string) {
		if strings.HasSuffix(target, ".Query") && strings.Contains(body, `"`+events+`"`) {
			once.Do(func() { close(looked) })
		}
	})
	<-archived
	if err != nil || co.AgentID != "a" || co.Fence != 1 || co.Attempt != 1 {
		t.Errorf("a's grant (fence 1, attempt 1), sent twice, archived while its second sending waits: %+v, %v; want that grant", co, err)
	}
}
