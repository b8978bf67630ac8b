package mcpserver

import (
	"fmt"
	"testing"
)

// A session remembers the lease of each ending for a repeat, but not
// without bound: one that works through many tasks keeps at most
// maxEnded, the latest among them.
func TestEndingsRememberedAreBounded(t *testing.T) {
	tl := &tools{leases: map[string]held{}, ended: map[string]held{}}
	for i := range 3 * maxEnded {
		tl.end(fmt.Sprintf("t%d", i), "run", int64(i+1))
	}
	if len(tl.ended) != maxEnded {
		t.Fatalf("%d endings remembered, want %d", len(tl.ended), maxEnded)
	}
	last := fmt.Sprintf("t%d", 3*maxEnded-1)
	if l, ok := tl.ended[last]; !ok || l.fence != 3*maxEnded {
		t.Fatalf("the latest ending is not remembered: %+v", l)
	}
}
