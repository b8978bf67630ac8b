package testenv_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The counter sees each of the store's requests by operation, and Take
// starts it again from zero.
func TestCounterCountsTheStoresRequests(t *testing.T) {
	t.Parallel()
	count := testenv.NewCounter()
	s := testenv.NewStore(t, testenv.WithCounter(count))
	if n := count.Take().Total(); n != 0 {
		t.Fatalf("%d requests counted before the store made any (creating the tables is not counted)", n)
	}
	if _, err := s.CreateTask(testenv.Context(t), lease.CreateTaskParams{TaskID: "t"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetTask(testenv.Context(t), "t"); err != nil {
		t.Fatal(err)
	}
	if ops := count.Take(); ops.Total() < 2 || ops["GetItem"] < 1 {
		t.Fatalf("counted %v, want the create and a GetItem", ops)
	}
	if ops := count.Take(); ops.Total() != 0 {
		t.Fatalf("counted %v after a Take", ops)
	}
}

// The recorder refuses as many notices as Refuse says, then keeps the rest
// in order.
func TestRecorderRefusesThenKeeps(t *testing.T) {
	t.Parallel()
	r := &testenv.Recorder{Refuse: 1}
	first := lease.Notice{ID: "1", Kind: lease.NoticeTaskAvailable, Event: lease.Event{TaskID: "t"}}
	second := lease.Notice{ID: "2", Kind: lease.NoticeTaskAvailable, Event: lease.Event{TaskID: "t"}}
	if err := r.Notify(context.Background(), first); !errors.Is(err, testenv.ErrBusDown) {
		t.Fatalf("first notice: %v, want the bus down", err)
	}
	for _, n := range []lease.Notice{first, second} {
		if err := r.Notify(context.Background(), n); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.Notices(); len(got) != 2 || got[0].ID != "1" || got[1].ID != "2" || r.Refused() != 1 {
		t.Fatalf("kept %+v, refused %d", got, r.Refused())
	}
	if n := r.Count(lease.NoticeTaskAvailable, "t"); n != 2 {
		t.Fatalf("count %d, want 2", n)
	}
}

// A binary is built once: a second Build returns the same file untouched.
func TestBuildBuildsOnce(t *testing.T) {
	t.Parallel()
	first := testenv.Binary(t, "github.com/checkout-dev/checkout/cmd/dynalite")
	before, err := os.Stat(first)
	if err != nil {
		t.Fatal(err)
	}
	second := testenv.Binary(t, "github.com/checkout-dev/checkout/cmd/dynalite")
	after, err := os.Stat(second)
	if err != nil {
		t.Fatal(err)
	}
	if first != second || !after.ModTime().Equal(before.ModTime()) {
		t.Fatalf("built twice: %s (%v), then %s (%v)", first, before.ModTime(), second, after.ModTime())
	}
}

// loseFirstAnswer is an HTTP client that forwards every request and loses
// the answer to the first: the server did the request, and the SDK sends it
// again.
type loseFirstAnswer struct{ lost atomic.Bool }

func (l *loseFirstAnswer) Do(r *http.Request) (*http.Response, error) {
	res, err := http.DefaultClient.Do(r)
	if err != nil || l.lost.Swap(true) {
		return res, err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	return nil, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
}

// The counter counts a call once however often the SDK sends it, and
// counts the SDK's sendings after the first apart: a unit budget that sees
// a read billed twice can tell the SDK's resending from the code's own.
func TestCounterCountsTheSDKsResendingsApart(t *testing.T) {
	t.Parallel()
	count := testenv.NewCounter()
	names := testenv.Tables(t)
	db := lease.NewLocalClient(testenv.Endpoint(), func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, count.Middleware)
		o.HTTPClient = &loseFirstAnswer{}
	})
	_, err := db.GetItem(testenv.Context(t), &dynamodb.GetItemInput{
		TableName: aws.String(names.Table(schema.TasksTable)),
		Key:       map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: "t"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if ops, resent := count.Take(), count.Resent(); ops["GetItem"] != 1 || resent["GetItem"] != 1 || resent.Total() != 1 {
		t.Fatalf("counted %v, resent %v; want one GetItem, sent once again", ops, resent)
	}
	if resent := count.Resent(); resent["GetItem"] != 1 {
		t.Fatalf("resent %v after a Take; Take leaves it", resent)
	}
	if why := count.ResentAfter()["GetItem"]; !strings.Contains(why, "connection reset") {
		t.Fatalf("resent after %q, want the lost answer's error", why)
	}
}
