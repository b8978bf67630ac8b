package lease_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// nthTaskUpdateTwiceDB sends the nth UpdateItem of the tasks table twice
// and answers with the second answer: that write applied, its answer was
// lost, and the SDK sent it again.
type nthTaskUpdateTwiceDB struct {
	lease.DB
	table string
	n     int
	seen  int
	sent  bool
}

func (d *nthTaskUpdateTwiceDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if in.TableName != nil && *in.TableName == d.table {
		d.seen++
		if d.seen == d.n {
			d.sent = true
			if _, err := d.DB.UpdateItem(ctx, in, opts...); err != nil {
				return nil, err
			}
		}
	}
	return d.DB.UpdateItem(ctx, in, opts...)
}

// Two renewals of one lease in one millisecond are both made (API.md:
// each renewal is one), each with its event: the second, refused on the
// first's (sent once, it is not that one sent again), is made again
// without that guard. When that second write applied, its answer was lost
// and the SDK sent it again, nothing stopped the second sending: the
// renewal was made twice, three renew events for two renewals.
func TestASecondRenewalInOneMillisecondSentTwiceIsMadeOnce(t *testing.T) {
	for _, resend := range []bool{false, true} {
		t.Run(map[bool]string{false: "answered", true: "answer-lost"}[resend], func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "x")
			co := e.checkout(t, "x", "ag", time.Minute)
			e.clock.Advance(time.Second)
			must[lease.Checkout](t)(e.store.Renew(c, lease.RenewParams{TaskID: "x", AgentID: "ag", RunID: co.RunID}))

			// The same millisecond: the renewal's first write is refused
			// on the first renewal; its second is sent twice.
			db := &nthTaskUpdateTwiceDB{DB: e.db, table: e.names.Table(schema.TasksTable), n: 2}
			if !resend {
				db.n = 0
			}
			s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
			got, err := s.Renew(c, lease.RenewParams{TaskID: "x", AgentID: "ag", RunID: co.RunID})
			if err != nil {
				t.Fatalf("the second renewal: %v", err)
			}
			if db.sent != resend {
				t.Fatalf("renewal sent twice: %v, want %v", db.sent, resend)
			}
			if want := e.clock.Now().Add(time.Minute); !got.ExpiresAt.Equal(want) {
				t.Fatalf("the second renewal answered expiry %v, want %v", got.ExpiresAt, want)
			}
			if evs := kinds(e.events(t, "x")); !slices.Equal(evs, []lease.EventType{lease.EventCheckout, lease.EventRenew, lease.EventRenew}) {
				t.Fatalf("x's trail %v, want the checkout and two renewals", evs)
			}
		})
	}
}

// slowGrantDB advances the clock by slow once the first UpdateItem of the
// tasks table (a grant) has landed, and sends the second (the renewal of
// a grant that took too long) twice, answering with the second answer.
type slowGrantDB struct {
	lease.DB
	table   string
	advance func()
	seen    int
	sent    bool
}

func (d *slowGrantDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if in.TableName == nil || *in.TableName != d.table {
		return d.DB.UpdateItem(ctx, in, opts...)
	}
	d.seen++
	switch d.seen {
	case 1:
		out, err := d.DB.UpdateItem(ctx, in, opts...)
		d.advance() // the grant's write waited
		return out, err
	case 2:
		d.sent = true
		if _, err := d.DB.UpdateItem(ctx, in, opts...); err != nil {
			return nil, err
		}
	}
	return d.DB.UpdateItem(ctx, in, opts...)
}

// A grant whose write took more than half its lease is renewed before it
// is answered. When that renewal's write applied, its answer was lost and
// the SDK sent it again, the second sending applied too (the lease still
// the caller's, no transition after its instant): two renew events for
// one checkout.
func TestASlowGrantsRenewalSentTwiceIsMadeOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	const timeout = time.Second
	db := &slowGrantDB{DB: e.db, table: e.names.Table(schema.TasksTable), advance: func() { e.clock.Advance(timeout * 9 / 10) }}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	co, err := s.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	if !db.sent {
		t.Fatal("no renewal was sent twice")
	}
	if want := e.clock.Now().Add(timeout); !co.ExpiresAt.Equal(want) {
		t.Fatalf("answered expiry %v, want %v (renewed before the answer)", co.ExpiresAt, want)
	}
	if evs := kinds(e.events(t, "t")); !slices.Equal(evs, []lease.EventType{lease.EventCheckout, lease.EventRenew}) {
		t.Fatalf("t's trail %v, want the checkout and one renewal", evs)
	}
}
