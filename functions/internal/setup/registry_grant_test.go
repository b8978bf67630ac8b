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
	env = Env{TablePrefix: testenv.Tables(t).Prefix}
	used := &usage{prefix: env.TablePrefix}
	store = NewStore(used.client(fn), nil, env, slog.New(slog.DiscardHandler))
	return store, env, func() {
		t.Helper()
		used.mu.Lock()
		defer used.mu.Unlock()
		for c := range used.calls[fn] {
			if !allowed(fn, c) {
				t.Errorf("%s function calls %q, which deploy.Grants does not grant it: AWS would deny it", fn, c)
			}
		}
	}
}
