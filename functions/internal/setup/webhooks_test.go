package setup

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/lease"
)

// countedPuts stands in for the dead-letter table.
type countedPuts struct {
	mu sync.Mutex
	n  int
}

func (c *countedPuts) PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	return &dynamodb.PutItemOutput{}, nil
}

// The notices function's webhooks leave the end of each invocation
// (WebhookDeadlineMargin) to the rest of the batch: a notice that finds
// only the margin left is dead-lettered at once, untried, rather than let
// a receiver that hangs time the invocation out. (How a receiver that
// hangs costs a batch a bounded time whatever its size, and is probed
// while down, is package webhook's tests.)
func TestNoticesWebhooksLeaveTheInvocationItsMargin(t *testing.T) {
	t.Parallel()
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		<-r.Context().Done() // hangs
	}))
	defer srv.Close()
	puts := &countedPuts{}
	n, err := Webhooks(Env{WebhookURLs: []string{srv.URL}, WebhookSecret: "s", TablePrefix: "x-"}, puts, nil)
	if err != nil {
		t.Fatal(err)
	}
	// An invocation with less than the margin left, as the last notices
	// of a long batch find it.
	ctx, cancel := context.WithTimeout(context.Background(), WebhookDeadlineMargin-time.Second)
	defer cancel()
	start := time.Now()
	for i := range 3 {
		ev := lease.Event{Type: lease.EventRelease, TaskID: "t", Fence: int64(i + 1), At: time.Now()}
		if err := n.Notify(ctx, lease.Notice{ID: "t:" + string(rune('1'+i)) + ":LeaseEnded", Kind: lease.NoticeLeaseEnded, Event: ev}); err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(start); took > time.Second || requests.Load() != 0 || puts.n != 3 {
		t.Fatalf("3 notices in the margin: %v, %d requests, %d dead letters; want them dead-lettered at once, untried",
			took, requests.Load(), puts.n)
	}
}
