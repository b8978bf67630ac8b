package setup

import (
	"context"
	"log/slog"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/deploy"
	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// With a queue registry of more than one page (over 1,000 queues), a
// checkout that creates its task (CHECKOUT_AUTO_CREATE_TASKS) reads the
// registry's further pages with BatchGetItem on heartbeats: the checkouts
// function is granted it (it was not, and AWS would have denied the
// read).
func TestCheckoutsFunctionReadsEveryRegistryPage(t *testing.T) {
	ctx := context.Background()
	store, env, checkGrants := storeOf(t, deploy.Checkouts)
	db := lease.NewLocalClient(testenv.Endpoint())
	table := schema.Names{Prefix: env.TablePrefix}.Table(schema.HeartbeatsTable)
	put := func(id string, item map[string]types.AttributeValue) {
		item["agent_id"] = &types.AttributeValueMemberS{Value: id}
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: item}); err != nil {
			t.Fatal(err)
		}
	}
	put("#queues", map[string]types.AttributeValue{"queues": &types.AttributeValueMemberSS{Value: []string{"a"}}, "pages": &types.AttributeValueMemberN{Value: "2"}})
	put("#queues#1", map[string]types.AttributeValue{"queues": &types.AttributeValueMemberSS{Value: []string{"b"}}})

	if _, err := store.Checkout(ctx, lease.CheckoutParams{TaskID: "auto-created", AgentID: "alice", CreateIfMissing: true}); err != nil {
		t.Fatal(err)
	}
	checkGrants()
}

// storeOf is a store as function fn builds it, on tables of the test's
// own, whose DynamoDB calls are recorded; checkGrants fails the test for
// each call deploy.Grants does not grant fn (AWS would deny it).
func storeOf(t *testing.T, fn string) (store *lease.Store, env Env, checkGrants func()) {
	t.Helper()
	g := newGrantCheck(t)
	return g.store(fn, nil), g.env, g.check
}

// grantCheck records the DynamoDB calls of the stores functions build on
// tables of the test's own, for several functions sharing those tables.
type grantCheck struct {
	t    *testing.T
	env  Env
	used *usage
}

func newGrantCheck(t *testing.T) *grantCheck {
	t.Helper()
	env := Env{TablePrefix: testenv.Tables(t).Prefix}
	return &grantCheck{t: t, env: env, used: &usage{prefix: env.TablePrefix}}
}

// store is a store as function fn builds it, whose calls are recorded;
// wrap, when set, wraps its client (to run a hook at a chosen call).
func (g *grantCheck) store(fn string, wrap func(lease.DB) lease.DB) *lease.Store {
	var db lease.DB = g.used.client(fn)
	if wrap != nil {
		db = wrap(db)
	}
	return NewStore(db, nil, g.env, slog.New(slog.DiscardHandler))
}

// made reports whether function fn made the call (as usage records it:
// "action table [index]").
func (g *grantCheck) made(fn, call string) bool {
	g.used.mu.Lock()
	defer g.used.mu.Unlock()
	return g.used.calls[fn][call]
}

// check fails the test for each recorded call that deploy.Grants does not
// grant the function that made it (AWS would deny it).
func (g *grantCheck) check() {
	g.t.Helper()
	g.used.mu.Lock()
	defer g.used.mu.Unlock()
	for fn, calls := range g.used.calls {
		for c := range calls {
			if !allowed(fn, c) {
				g.t.Errorf("%s function calls %q, which deploy.Grants does not grant it: AWS would deny it", fn, c)
			}
		}
	}
}
