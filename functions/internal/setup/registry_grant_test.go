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
	quiet := slog.New(slog.DiscardHandler)
	env := Env{TablePrefix: testenv.Tables(t).Prefix}
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

	used := &usage{prefix: env.TablePrefix}
	store := NewStore(used.client(deploy.Checkouts), nil, env, quiet)
	if _, err := store.Checkout(ctx, lease.CheckoutParams{TaskID: "auto-created", AgentID: "alice", CreateIfMissing: true}); err != nil {
		t.Fatal(err)
	}
	for c := range used.calls[deploy.Checkouts] {
		if !allowed(deploy.Checkouts, c) {
			t.Errorf("checkouts function calls %q, which deploy.Grants does not grant it: AWS would deny it", c)
		}
	}
}
