package stream

import (
	"context"
	"testing"
)

// A poll that reads on (ReadOn: `checkout-server migrate -aws` polls the
// earlier table's stream once, and must apply all it holds) goes past
// every short run of empty pages of an open shard, however many such runs
// the shard has: it takes the shard as caught up only after emptyPages
// empty pages in a row. It counted the empty pages of the whole poll, so
// a shard with a few gaps of two empty pages each ended the poll at its
// third gap, and the records after it were never applied.
func TestAReadOnPollGoesPastManyShortRunsOfEmptyPages(t *testing.T) {
	t.Parallel()
	// Three gaps of two empty pages each: six in all, more than
	// emptyPages, none a run of emptyPages.
	f := &gapStream{n: 300, gaps: map[int]int{50: 2, 150: 2, 250: 2}}
	var got []int
	p := &Poller{Streams: f, StreamARN: "arn:stream", Saved: &memSaved{}, Handle: collect(&got), ReadOn: true}
	n, err := p.Poll(context.Background())
	if err != nil || n != f.n || len(got) != f.n {
		t.Fatalf("one poll: %d records (%v ... %v), %v; want all %d", n, head(got), tail(got), err, f.n)
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("record %d handed over in place %d", v, i)
		}
	}
}
