package lease_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// An inbox read answers at most MaxInbox messages, the oldest, however
// many an agent has left unread; deleting them shows the next.
func TestAnInboxReadIsBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	table := e.names.Table(schema.InboxTable)
	const n = lease.MaxInbox + 30
	at := epoch.UnixMilli()
	ttl := fmt.Sprint(epoch.Add(7 * 24 * time.Hour).Unix())
	var reqs []types.WriteRequest
	for i := range n {
		id := fmt.Sprintf("%013d.%d.t%04d", at+int64(i), 1, i)
		reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: map[string]types.AttributeValue{
			"agent_id": &types.AttributeValueMemberS{Value: "busy"}, "message_id": &types.AttributeValueMemberS{Value: id},
			"type": &types.AttributeValueMemberS{Value: "task_available"}, "task_id": &types.AttributeValueMemberS{Value: fmt.Sprintf("t%04d", i)},
			"reason": &types.AttributeValueMemberS{Value: "release"}, "at": &types.AttributeValueMemberN{Value: fmt.Sprint(at + int64(i))},
			"ttl": &types.AttributeValueMemberN{Value: ttl},
		}}})
		if len(reqs) == 25 || i == n-1 {
			if _, err := e.db.BatchWriteItem(c, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{table: reqs}}); err != nil {
				t.Fatal(err)
			}
			reqs = nil
		}
	}
	msgs := must[[]lease.Message](t)(e.store.Inbox(c, "busy"))
	if len(msgs) != lease.MaxInbox || msgs[0].TaskID != "t0000" || msgs[len(msgs)-1].TaskID != fmt.Sprintf("t%04d", lease.MaxInbox-1) {
		t.Fatalf("inbox of %d messages: %d answered, %s to %s; want the oldest %d", n, len(msgs), msgs[0].TaskID, msgs[len(msgs)-1].TaskID, lease.MaxInbox)
	}
	for _, m := range msgs[:30] {
		if err := e.store.DeleteMessage(c, "busy", m.MessageID); err != nil {
			t.Fatal(err)
		}
	}
	msgs = must[[]lease.Message](t)(e.store.Inbox(c, "busy"))
	if len(msgs) != lease.MaxInbox || msgs[len(msgs)-1].TaskID != fmt.Sprintf("t%04d", n-1) {
		t.Fatalf("after 30 deleted: %d answered, last %s", len(msgs), msgs[len(msgs)-1].TaskID)
	}
}
