package lease_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// Lost sendings (CHECKOUT_LIN_LOSE=p, 0 < p < 1). A request whose attempt
// gets no answer (a timeout, a reset connection) is sent again by the SDK,
// though the attempt may have been applied. Under CHECKOUT_LIN_LOSE the
// stores of the linearizability tests lose the first sending of a fraction
// p of their requests, writes and reads: half of those are dropped before
// the server sees them, half are sent and their answers thrown away; both
// are answered 500, which the SDK retries. Only first sendings are lost, so
// every request ends in a real answer.

// loseDoer is the HTTP client of a store that loses first sendings (the
// SDK's HTTPClient, inside its retry loop).
type loseDoer struct {
	p float64
	// ops are the operations (X-Amz-Target's last part) it may lose.
	ops map[string]bool

	mu sync.Mutex
	r  *rand.Rand // under mu: the draws of one run follow its seed

	dropped, discarded, passed atomic.Int64
}

// losableOps are the requests a loseDoer may lose: every write the store
// makes, and its reads.
var losableOps = map[string]bool{
	"PutItem": true, "UpdateItem": true, "DeleteItem": true, "TransactWriteItems": true, "BatchWriteItem": true,
	"GetItem": true, "Query": true, "BatchGetItem": true, "TransactGetItems": true,
}

// newLoseDoer loses the first sending of a fraction p of the requests in
// ops, the draws seeded with seed.
func newLoseDoer(p float64, seed uint64, ops map[string]bool) *loseDoer {
	return &loseDoer{p: p, ops: ops, r: rand.New(rand.NewPCG(seed, 1<<34))}
}

// firstSending says whether r is the first attempt of its request: the SDK
// numbers its attempts in Amz-Sdk-Request ("attempt=1; max=3").
func firstSending(r *http.Request) bool {
	for part := range strings.SplitSeq(r.Header.Get("Amz-Sdk-Request"), ";") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(part), "attempt="); ok {
			n, err := strconv.Atoi(v)
			return err == nil && n == 1
		}
	}
	return false
}

func (d *loseDoer) Do(r *http.Request) (*http.Response, error) {
	target := r.Header.Get("X-Amz-Target")
	op := target[strings.LastIndexByte(target, '.')+1:]
	lose, drop := false, false
	if d.ops[op] && firstSending(r) {
		d.mu.Lock()
		lose, drop = d.r.Float64() < d.p, d.r.IntN(2) == 0
		d.mu.Unlock()
	}
	switch {
	case !lose:
		d.passed.Add(1)
		return http.DefaultClient.Do(r)
	case drop:
		d.dropped.Add(1)
		if r.Body != nil {
			r.Body.Close()
		}
	default:
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		d.discarded.Add(1)
		if m, ok := r.Context().Value(lostWriteKey{}).(*atomic.Bool); ok && op == "UpdateItem" {
			m.Store(true) // the write was sent: it may have applied
		}
	}
	return internalError(r, "sending lost"), nil
}

// lostWriteKey marks a context whose operation wants to know whether one
// of its UpdateItems was sent and its answer thrown away (withLostWrite).
type lostWriteKey struct{}

// withLostWrite is c marked so that a loseDoer records, in the flag it
// returns, that it threw away the answer of an UpdateItem sent under it.
func withLostWrite(c context.Context) (context.Context, *atomic.Bool) {
	m := new(atomic.Bool)
	return context.WithValue(c, lostWriteKey{}, m), m
}

// String says what d lost.
func (d *loseDoer) String() string {
	return fmt.Sprintf("lost %d of %d first sendings: %d dropped, %d answers thrown away",
		d.dropped.Load()+d.discarded.Load(), d.dropped.Load()+d.discarded.Load()+d.passed.Load(), d.dropped.Load(), d.discarded.Load())
}

// linLose is CHECKOUT_LIN_LOSE: the fraction of first sendings the
// linearizability tests' stores lose, 0 when unset.
func linLose(t testing.TB) float64 {
	v := os.Getenv("CHECKOUT_LIN_LOSE")
	if v == "" {
		return 0
	}
	p, err := strconv.ParseFloat(v, 64)
	if err != nil || p <= 0 || p >= 1 {
		t.Fatalf("CHECKOUT_LIN_LOSE=%q: want a fraction between 0 and 1", v)
	}
	return p
}

// lossyClient is a client of the local DynamoDB whose requests go through
// d and are counted by e's counter. Its retries are not rate limited: the
// SDK's retry quota is a client's, and the tests' one store stands for
// many processes; a lost sending is always sent again.
func lossyClient(e *env, d *loseDoer) *dynamodb.Client {
	return lease.NewLocalClient(testenv.Endpoint(), func(o *dynamodb.Options) {
		o.HTTPClient = d
		o.APIOptions = append(o.APIOptions, e.count.Middleware)
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) { so.RateLimiter = ratelimit.None })
	})
}

// The doer loses the first sending of the requests it draws, and only
// theirs: a dropped write is applied once (by its second sending), one
// whose answer was thrown away twice (an ADD shows it); every request
// ends in a real answer after two sendings; a read is lost as a write is;
// the same seed draws the same losses; p 0 loses nothing.
func TestLoseDoerLosesFirstSendings(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	table := e.names.Table(schema.AgentsTable)
	key := map[string]types.AttributeValue{"agent_id": &types.AttributeValueMemberS{Value: "counter"}}
	add := func(db *dynamodb.Client) int {
		t.Helper()
		out, err := db.UpdateItem(c, &dynamodb.UpdateItemInput{
			TableName: aws.String(table), Key: key,
			UpdateExpression:          aws.String("ADD n :one"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}},
		})
		if err != nil {
			t.Fatalf("a write with its first sending lost: %v", err)
		}
		res, _ := retry.GetAttemptResults(out.ResultMetadata)
		return len(res.Results)
	}
	count := func() int {
		t.Helper()
		out, err := e.db.GetItem(c, &dynamodb.GetItemInput{TableName: aws.String(table), Key: key, ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		n, _ := out.Item["n"].(*types.AttributeValueMemberN)
		if n == nil {
			return 0
		}
		v, _ := strconv.Atoi(n.Value)
		return v
	}
	// kinds runs writes adds through a doer losing all first sendings,
	// and returns which it dropped (true) and which it sent.
	kinds := func(seed uint64, writes int) []bool {
		d := newLoseDoer(1, seed, losableOps)
		db := lossyClient(e, d)
		var got []bool
		for i := range writes {
			before, dropped := count(), d.dropped.Load()
			if n := add(db); n != 2 {
				t.Fatalf("write %d: %d sendings, want 2 (the first lost, the second answered)", i, n)
			}
			drop := d.dropped.Load() > dropped
			if want := map[bool]int{true: 1, false: 2}[drop]; count()-before != want {
				t.Fatalf("write %d (dropped %v) applied %d times, want %d", i, drop, count()-before, want)
			}
			got = append(got, drop)
		}
		if d.dropped.Load()+d.discarded.Load() != int64(writes) || d.passed.Load() != int64(writes) {
			t.Fatalf("%d writes: %s; want every first sending lost, every second passed", writes, d)
		}
		// A read is lost too, and answered.
		if _, err := db.GetItem(c, &dynamodb.GetItemInput{TableName: aws.String(table), Key: key}); err != nil {
			t.Fatalf("a read with its first sending lost: %v", err)
		}
		if lost := d.dropped.Load() + d.discarded.Load(); lost != int64(writes)+1 {
			t.Fatalf("after a read: %s; want it lost as well", d)
		}
		return got
	}
	const writes = 24
	first := kinds(7, writes)
	var drops int
	for _, drop := range first {
		if drop {
			drops++
		}
	}
	if drops == 0 || drops == writes {
		t.Fatalf("%d of %d lost sendings dropped, want both kinds", drops, writes)
	}
	if again := kinds(7, writes); fmt.Sprint(again) != fmt.Sprint(first) {
		t.Errorf("seed 7 lost %v, then %v", first, again)
	}

	// An UpdateItem sent under withLostWrite marks its context when its
	// answer is thrown away (it may have applied), not when it is dropped.
	marked := newLoseDoer(1, 7, losableOps)
	mdb := lossyClient(e, marked)
	for i := range 8 {
		mc, lost := withLostWrite(c)
		dropped := marked.dropped.Load()
		if _, err := mdb.UpdateItem(mc, &dynamodb.UpdateItemInput{
			TableName: aws.String(table), Key: key,
			UpdateExpression:          aws.String("ADD n :one"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}},
		}); err != nil {
			t.Fatal(err)
		}
		if drop := marked.dropped.Load() > dropped; lost.Load() == drop {
			t.Errorf("marked write %d: dropped %v, marked lost %v; want marked only when its answer was thrown away", i, drop, lost.Load())
		}
	}

	none := newLoseDoer(0, 7, losableOps)
	before := count()
	if n := add(lossyClient(e, none)); n != 1 || count() != before+1 {
		t.Errorf("p 0: %d sendings, applied %d times; want 1, 1", n, count()-before)
	}
	if none.dropped.Load()+none.discarded.Load() != 0 {
		t.Errorf("p 0: %s", none)
	}
}
