package lease_test

import (
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// Deleting a message marks it acked, by the write whose condition decides
// whether there was one to delete, then puts its tombstone and deletes
// it. When that first write applied, its answer was lost and the SDK sent
// it again, the second sending's refusal (the message acked: by the first)
// was taken for a message already deleted: 404 message_not_found for the
// message the agent had just read, which was left behind, marked, with no
// tombstone. A deletion knows its own mark by its write's id.
func TestAMessageDeletionSentTwiceDeletesIt(t *testing.T) {
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

	db := &sentTwiceDB{DB: e.db, name: "acked"} // the mark
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	err := s.DeleteMessage(c, "ag", msgs[0].MessageID)
	if !db.sent.Load() {
		t.Fatal("no mark was sent twice")
	}
	if err != nil {
		t.Fatalf("deleting the message ag had just read, the mark sent twice: %v; want it deleted", err)
	}
	if got := e.inbox(t, "ag"); len(got) != 0 {
		t.Fatalf("ag's inbox after the deletion: %+v", got)
	}
	// Deleted: its tombstone is there (a replay does not bring it back),
	// and a second deletion finds nothing.
	if err := e.store.DeleteMessage(c, "ag", msgs[0].MessageID); !errors.Is(err, lease.ErrMessageNotFound) {
		t.Fatalf("a second deletion: %v, want message_not_found", err)
	}
	out, err := e.db.Query(c, &dynamodb.QueryInput{
		TableName:                 aws.String(e.names.Table(schema.InboxTable)),
		KeyConditionExpression:    aws.String("agent_id = :a"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":a": &types.AttributeValueMemberS{Value: "ag"}},
		ConsistentRead:            aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Items) != 1 {
		t.Fatalf("ag's inbox partition holds %d items, want the tombstone alone: %v", len(out.Items), out.Items)
	}
}
