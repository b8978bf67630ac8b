package lease_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// deleteTwiceRaceDB sends the first conditional DeleteItem of table
// twice, running race between the two sendings, and answers with the
// second answer: it applied, its answer was lost, and before the SDK sent
// it again another request landed.
type deleteTwiceRaceDB struct {
	lease.DB
	table string
	race  func()
	sent  atomic.Bool
}

func (d *deleteTwiceRaceDB) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	if in.TableName != nil && *in.TableName == d.table && in.ConditionExpression != nil && d.sent.CompareAndSwap(false, true) {
		if _, err := d.DB.DeleteItem(ctx, in, opts...); err != nil {
			return nil, err
		}
		d.race()
	}
	return d.DB.DeleteItem(ctx, in, opts...)
}

// A removal whose delete of the agent applied, whose answer was lost,
// and which the SDK sent again only after the id was registered again (an
// id may be registered again at once where ReRegisterAfter is 0, and an
// operator's EnsureAgent is never held back) found the new agent's item,
// took the refusal for a key replaced since its read, and went round
// again: it removed the new agent too, which had registered after the
// removal took effect, and whose key then failed. The tombstone's
// removal id, which the new registration's restart keeps, says the first
// sending deleted the agent: the removal is answered as made and the new
// agent stays.
func TestARemovalSentTwiceAfterTheIDIsRegisteredAgainKeepsTheNewAgent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "gone", Name: "old"}))
	var again lease.Registration
	var raceErr error
	db := &deleteTwiceRaceDB{DB: e.db, table: e.names.Table(schema.AgentsTable), race: func() {
		again, raceErr = e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "gone", Name: "new"})
	}}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	err := s.RemoveAgent(c, "gone")
	if !db.sent.Load() {
		t.Fatal("no delete was sent twice")
	}
	if raceErr != nil {
		t.Fatalf("registering the id again after its removal: %v", raceErr)
	}
	if err != nil {
		t.Fatalf("a removal whose delete applied: %v; want it removed", err)
	}
	got, err := e.store.GetAgent(c, "gone")
	if err != nil {
		t.Fatalf("the agent registered after the removal took effect: %v; want it kept", err)
	}
	if got.Name != "new" {
		t.Fatalf("agent %+v, want the new registration", got)
	}
	if p, err := e.store.Authenticate(c, again.APIKey); err != nil || p.AgentID != "gone" {
		t.Fatalf("the new agent's key: %+v, %v; want it to pass", p, err)
	}
	if err := e.store.RemoveAgent(c, "gone"); err != nil {
		t.Fatalf("removing the new agent: %v", err)
	}
	if _, err := e.store.GetAgent(c, "gone"); !errors.Is(err, lease.ErrAgentNotFound) {
		t.Fatalf("the new agent after its removal: %v", err)
	}
}

// A message deletion whose mark was sent twice, racing the same agent's
// other deletion of the message: exactly one of them deletes it (200) and
// the other finds none (404), whichever sending landed, and the message
// leaves one tombstone. The mark's first sending either applied (its
// answer lost: the other deletion finds the message marked) or was lost
// before it landed (the other deletion marks and deletes it first).
func TestAMessageDeletionSentTwiceRacingAnotherDeletesOnce(t *testing.T) {
	t.Parallel()
	for _, applied := range []bool{true, false} {
		t.Run(map[bool]string{true: "first sending applied", false: "first sending lost"}[applied], func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "x")
			e.checkout(t, "x", "ag", time.Hour)
			must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "admin", Force: true}))
			msgs := e.inbox(t, "ag")
			if len(msgs) != 1 {
				t.Fatalf("ag's inbox after a force release of its lease: %+v, want one lease_lost", msgs)
			}
			id := msgs[0].MessageID
			var otherErr error
			other := func() { otherErr = e.store.DeleteMessage(c, "ag", id) }
			var s *lease.Store
			var sent func() bool
			if applied {
				db := &updateTwiceDB{DB: e.db, name: "acked", race: other}
				s, sent = lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now}), db.sent.Load
			} else {
				inbox := e.names.Table(schema.InboxTable)
				var doer *lossyDoer
				s, doer = lossyTaskStore(e, func(target, body string) bool {
					return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, inbox) && strings.Contains(body, `"acked"`)
				}, other)
				sent = doer.lost.Load
			}
			err := s.DeleteMessage(c, "ag", id)
			if !sent() {
				t.Fatal("no mark was sent twice")
			}
			want, wantOther := error(nil), lease.ErrMessageNotFound
			if !applied {
				want, wantOther = lease.ErrMessageNotFound, nil
			}
			if !errors.Is(err, want) || !errors.Is(otherErr, wantOther) {
				t.Fatalf("the deletion sent twice: %v, the other: %v; want %v and %v", err, otherErr, want, wantOther)
			}
			if got := e.inbox(t, "ag"); len(got) != 0 {
				t.Fatalf("ag's inbox after the deletions: %+v", got)
			}
			if items := e.inboxItems(t, "ag"); len(items) != 1 {
				t.Fatalf("ag's inbox partition holds %d items, want the tombstone alone: %v", len(items), items)
			}
		})
	}
}

// Renewals of one lease by its holder in one millisecond are each made,
// with an event each (API.md: each renewal is one), also when the SDK
// sent one of them twice. A renewal whose first sending was lost before
// it landed, while another renewal of the holder's landed in that gap,
// took the refusal of its second sending (the lease renewed at its
// instant, as it would have renewed it) for its own write: two requests
// answered by one write, one renew event for two renewals. And a renewal
// whose first sending applied, its answer lost, while another landed
// before the second sending, is still made once.
func TestRenewalsInOneMillisecondSentTwiceAreEachMade(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		before  int  // renewals made at that instant before
		applied bool // the first sending applied (else it was lost before it landed)
	}{
		{"first sending lost", 0, false},
		{"first sending lost, after a renewal at the instant", 1, false},
		{"first sending applied", 0, true},
		{"first sending applied, after a renewal at the instant", 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "x")
			co := e.checkout(t, "x", "ag", time.Minute)
			e.clock.Advance(time.Second)
			for range tc.before {
				must[lease.Checkout](t)(e.store.Renew(c, lease.RenewParams{TaskID: "x", AgentID: "ag", RunID: co.RunID}))
			}
			var raceErr error
			other := func() {
				_, raceErr = e.store.Renew(c, lease.RenewParams{TaskID: "x", AgentID: "ag", RunID: co.RunID})
			}
			// The renewal's write that is sent twice: its first, or, after
			// a renewal at the instant, its second (the first refused on
			// that renewal).
			n, nth := 0, 1+tc.before
			var s *lease.Store
			var sent func() bool
			if tc.applied {
				db := &renewTwiceDB{DB: e.db, table: e.names.Table(schema.TasksTable), nth: nth, race: other}
				s, sent = lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now}), db.sent.Load
			} else {
				var doer *lossyDoer
				s, doer = lossyTaskStore(e, func(target, body string) bool {
					if taskUpdate(e)(target, body) && strings.Contains(body, `"renew"`) {
						n++
						return n == nth
					}
					return false
				}, other)
				sent = doer.lost.Load
			}
			got, err := s.Renew(c, lease.RenewParams{TaskID: "x", AgentID: "ag", RunID: co.RunID})
			if !sent() {
				t.Fatal("no renewal was sent twice")
			}
			if err != nil || raceErr != nil {
				t.Fatalf("the renewal sent twice: %v; the other: %v", err, raceErr)
			}
			if want := e.clock.Now().Add(time.Minute); !got.ExpiresAt.Equal(want) {
				t.Fatalf("answered expiry %v, want %v", got.ExpiresAt, want)
			}
			renewals := 0
			for _, k := range kinds(e.events(t, "x")) {
				if k == lease.EventRenew {
					renewals++
				}
			}
			if want := tc.before + 2; renewals != want {
				t.Fatalf("x's trail %v: %d renewals, want %d", kinds(e.events(t, "x")), renewals, want)
			}
		})
	}
}

// renewTwiceDB sends the nth renewal write of table twice, running race
// between the two sendings, and answers with the second answer: it
// applied, its answer was lost, and another request landed before the SDK
// sent it again.
type renewTwiceDB struct {
	lease.DB
	table string
	nth   int
	race  func()
	seen  atomic.Int32
	sent  atomic.Bool
}

func (d *renewTwiceDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	renew := false
	for _, v := range in.ExpressionAttributeValues {
		if s, ok := v.(*types.AttributeValueMemberS); ok && s.Value == string(lease.EventRenew) {
			renew = true
		}
	}
	if in.TableName != nil && *in.TableName == d.table && renew && int(d.seen.Add(1)) == d.nth && d.sent.CompareAndSwap(false, true) {
		if _, err := d.DB.UpdateItem(ctx, in, opts...); err != nil {
			return nil, err
		}
		d.race()
	}
	return d.DB.UpdateItem(ctx, in, opts...)
}
