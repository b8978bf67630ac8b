package stream

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
)

// A batch the handler fails is handed over again on the next poll halved,
// as an event source mapping with BisectBatchOnFunctionError does, and
// each batch applied moves the checkpoint and lets the next one grow
// back: a failure that strikes large batches (one request of many
// failing, under a fault rate that fails most of them) no longer fails
// every retry of the same batch, and the stream moves on. The poller used
// to hand over the same 100 records at every poll, and under such faults
// made no progress.
func TestAFailedBatchIsHandedOverAgainInHalves(t *testing.T) {
	t.Parallel()
	const n = 2*BatchSize + 37
	var applied, sizes []int
	p := &Poller{Streams: pagedStream{n: n}, StreamARN: "arn", Saved: MemoryCheckpoints{},
		Handle: func(_ context.Context, ev events.DynamoDBEvent) error {
			sizes = append(sizes, len(ev.Records))
			if len(ev.Records) > 30 {
				return errors.New("a request of a large batch failed")
			}
			for _, r := range ev.Records {
				i, err := r.Change.NewImage["i"].Integer()
				if err != nil {
					return err
				}
				applied = append(applied, int(i))
			}
			return nil
		}}
	total, failed := 0, 0
	for polls := 0; total < n; polls++ {
		if polls == 30 {
			t.Fatalf("%d of %d records applied after %d polls (%d failed); batch sizes handed over: %v", total, n, polls, failed, sizes)
		}
		got, err := p.Poll(context.Background())
		total += got
		if err != nil {
			failed++
		}
	}
	if failed == 0 {
		t.Fatal("no poll failed: the test did not fail a batch")
	}
	for i, v := range applied {
		if v != i {
			t.Fatalf("record %d applied in place %d: records must be applied once each, in order", v, i)
		}
	}
	if len(applied) != n {
		t.Fatalf("%d records applied, want %d", len(applied), n)
	}
	if again, err := p.Poll(context.Background()); err != nil || again != 0 {
		t.Fatalf("a poll after: %d records, %v; want none", again, err)
	}
}

// A record that fails on its own stops the polls there, every time: the
// records before it come to be applied and checkpointed, in batches ever
// smaller around it; it and those after it are not skipped.
func TestARecordThatAlwaysFailsStopsThePollAtIt(t *testing.T) {
	t.Parallel()
	const n, bad = 50, 23
	var applied []int
	p := &Poller{Streams: pagedStream{n: n}, StreamARN: "arn", Saved: MemoryCheckpoints{},
		Handle: func(_ context.Context, ev events.DynamoDBEvent) error {
			var is []int
			for _, r := range ev.Records {
				i, _ := r.Change.NewImage["i"].Integer()
				if i == bad {
					return errors.New("this record always fails")
				}
				is = append(is, int(i))
			}
			applied = append(applied, is...)
			return nil
		}}
	for range 40 {
		if got, err := p.Poll(context.Background()); err == nil {
			t.Fatalf("Poll applied %d records past one that always fails", got)
		}
	}
	for i, v := range applied {
		if v != i || v >= bad {
			t.Fatalf("applied %v: want 0..%d once each, in order", applied, bad-1)
		}
	}
	if len(applied) != bad {
		t.Fatalf("applied %d records, want the %d before the failing one", len(applied), bad)
	}
}

// The error of a poll held up by a record that always fails names that
// record's sequence number, once the batches around it are down to the
// record alone, so that the log (which says it at every poll) tells the
// operator which change to look at. It named only the shard.
func TestARecordThatAlwaysFailsIsNamedInThePollsError(t *testing.T) {
	t.Parallel()
	const n, bad = 50, 23
	p := &Poller{Streams: pagedStream{n: n}, StreamARN: "arn", Saved: MemoryCheckpoints{},
		Handle: func(_ context.Context, ev events.DynamoDBEvent) error {
			for _, r := range ev.Records {
				if i, _ := r.Change.NewImage["i"].Integer(); i == bad {
					return errors.New("this record always fails")
				}
			}
			return nil
		}}
	var err error
	for range 40 {
		_, err = p.Poll(context.Background())
	}
	if err == nil || !strings.Contains(err.Error(), seqOf(bad)) {
		t.Fatalf("the poll's error %q does not name the failing record's sequence number %s", err, seqOf(bad))
	}
}
