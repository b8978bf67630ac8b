package client

import (
	"context"
	"errors"
	"testing"
)

// A listing whose server answers the cursor it was given as the next one
// would be read for ever: allPages stops at the repeat and says so, as the
// trail's reader does.
func TestAllPagesStopsAtARepeatedCursor(t *testing.T) {
	t.Parallel()
	reads := 0
	_, err := allPages(context.Background(), "queues", func(ctx context.Context, cursor string) ([]Queue, string, error) {
		reads++
		if reads > 10 {
			return nil, "", errors.New("still reading after 10 pages")
		}
		return []Queue{{Queue: "q"}}, "same", nil
	})
	if !errors.Is(err, errCursorRepeated) {
		t.Fatalf("err %v after %d reads, want errCursorRepeated", err, reads)
	}
	if reads != 2 {
		t.Fatalf("%d reads, want 2 (the first page, then the one that repeats its cursor)", reads)
	}
}
