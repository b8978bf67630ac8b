package lease_test

import (
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// A batch's write to a queue's counter is conditioned on the shard's
// position it read. When the SDK sent it again (its first sending applied,
// its answer lost), the second sending failed on the position the first
// had moved, and the batch failed, to be delivered again, though every
// change in it was counted. A failed write that finds the counter past
// all of its records has nothing left to count.
func TestAQueueCountSentTwiceDoesNotFailItsBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "t1", "t2")
	batches := e.capture(t)

	heartbeats := e.names.Table(schema.HeartbeatsTable)
	doer := &lossyDoer{
		match: func(target, body string) bool {
			return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, heartbeats) && strings.Contains(body, `"#queue#default"`)
		},
		race:    func() {},
		applied: true,
	}
	e.deliver(t, lease.NewLocalClient(testenv.Endpoint(), func(o *dynamodb.Options) { o.HTTPClient = doer }), batches)
	if !doer.lost.Load() {
		t.Fatal("no counter write was sent twice")
	}
	wantCounts(t, e.queueCounts(t)["default"], 2, 0, 0, 0)
}
