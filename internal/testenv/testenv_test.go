package testenv_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
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
