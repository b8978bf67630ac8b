package lease_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// The listing of live leases comes in pages: at a limit asked for, and,
// without one, where the next lease could take the answer past what a
// Lambda may return: 1,000 leases with the longest reasons and agent
// names used to be one answer of 6.4 MB, past the 6 MB a Lambda can
// return (a 5xx for every caller in AWS). A walk of the pages lists every
// lease once, oldest first; a cursor keeps its agent.
func TestCheckoutsComeInPagesThatFit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	const n = 600
	long := strings.Repeat("<", lease.MaxReasonLen) // \u003c in JSON: 6 bytes each
	name := strings.Repeat("n", lease.MaxNameLen)
	for start := 0; start < n; start += lease.MaxBatch {
		var batch []lease.CreateTaskParams
		for i := start; i < min(n, start+lease.MaxBatch); i++ {
			batch = append(batch, lease.CreateTaskParams{TaskID: fmt.Sprintf("t-%03d", i)})
		}
		must[[]lease.BatchResult](t)(e.store.CreateTasks(c, batch))
	}
	var want []string
	for i := range n {
		agent := "a"
		if i%3 == 0 {
			agent = "b"
		}
		id := fmt.Sprintf("t-%03d", i)
		must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: id, AgentID: agent, AgentName: name, Timeout: time.Hour, Reason: long}))
		want = append(want, id)
		e.clock.Advance(time.Millisecond)
	}
	e.caughtUp(t) // the leases are listed through an index

	walk := func(p lease.ListCheckoutsParams) (ids []string, pages int) {
		t.Helper()
		for {
			page := must[lease.CheckoutPage](t)(e.store.ListCheckoutsPage(c, p))
			pages++
			for _, co := range page.Checkouts {
				if p.AgentID != "" && co.AgentID != p.AgentID {
					t.Fatalf("the listing of %s's leases holds one of %s", p.AgentID, co.AgentID)
				}
				ids = append(ids, co.TaskID)
			}
			if page.NextCursor == "" || pages > 100 {
				return ids, pages
			}
			p = lease.ListCheckoutsParams{Cursor: page.NextCursor, Limit: p.Limit}
		}
	}
	first := must[lease.CheckoutPage](t)(e.store.ListCheckoutsPage(c, lease.ListCheckoutsParams{}))
	if len(first.Checkouts) == n || first.NextCursor == "" {
		t.Fatalf("%d leases of the longest fields in one page (cursor %q): past the bound", len(first.Checkouts), first.NextCursor)
	}
	if len(first.Checkouts) < 400 {
		t.Errorf("a page held %d leases of the longest fields, want about 480", len(first.Checkouts))
	}
	if ids, pages := walk(lease.ListCheckoutsParams{}); strings.Join(ids, ",") != strings.Join(want, ",") || pages != 2 {
		t.Errorf("a walk of every lease took %d pages and listed %d, want 2 pages listing all %d in order", pages, len(ids), n)
	}
	if ids, pages := walk(lease.ListCheckoutsParams{Limit: 130}); len(ids) != n || pages != 5 {
		t.Errorf("a walk 130 at a time took %d pages listing %d, want 5 and %d", pages, len(ids), n)
	}
	var wantB []string
	for i := 0; i < n; i += 3 {
		wantB = append(wantB, fmt.Sprintf("t-%03d", i))
	}
	if ids, _ := walk(lease.ListCheckoutsParams{AgentID: "b", Limit: 70}); strings.Join(ids, ",") != strings.Join(wantB, ",") {
		t.Errorf("a walk of b's leases listed %v, want %v", ids, wantB)
	}

	// A cursor continues its own listing only.
	bPage := must[lease.CheckoutPage](t)(e.store.ListCheckoutsPage(c, lease.ListCheckoutsParams{AgentID: "b", Limit: 10}))
	_, err := e.store.ListCheckoutsPage(c, lease.ListCheckoutsParams{AgentID: "a", Cursor: bPage.NextCursor})
	expectRule(t, err, ruleFailure{"cursor", "invalid_request", "cursor continues the listing of the leases of b: give that agent_id, or none"})
	allPage := must[lease.CheckoutPage](t)(e.store.ListCheckoutsPage(c, lease.ListCheckoutsParams{Limit: 10}))
	_, err = e.store.ListCheckoutsPage(c, lease.ListCheckoutsParams{AgentID: "b", Cursor: allPage.NextCursor})
	expectRule(t, err, ruleFailure{"cursor", "invalid_request", "cursor continues the listing of every agent's leases: give no agent_id with it"})
	for _, p := range []lease.ListCheckoutsParams{{Cursor: "not-a-cursor"}, {Limit: 1001}, {Limit: -1}} {
		if _, err := e.store.ListCheckoutsPage(c, p); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("%+v: %v, want invalid input", p, err)
		}
	}
}
