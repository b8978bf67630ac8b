package lease_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/checkout-dev/checkout/lease"
)

// The agent listing comes in pages: at a limit asked for, and, without
// one, where the next agent could take the answer past what a Lambda may
// return. Every registered agent used to be one answer, read whole at
// every call: past about 2,000 agents of the longest names (or tens of
// thousands of ordinary ones) it could not be answered in AWS at all. A
// walk of the pages lists every agent once, by id, with its liveness.
func TestAgentsComeInPagesThatFit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	const n = 2300
	name := strings.Repeat("<", lease.MaxNameLen) // \u003c in JSON: 6 bytes each
	ids := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range ids {
				if _, err := e.store.RegisterAgent(c, lease.RegisterParams{AgentID: fmt.Sprintf("ag-%04d", i), Name: name}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	for i := range n {
		ids <- i
	}
	close(ids)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "ag-2299", 0))
	e.caughtUp(t) // the agents are listed through an index

	walk := func(p lease.ListAgentsParams) (got []lease.Agent, sizes []int) {
		t.Helper()
		for {
			page := must[lease.AgentPage](t)(e.store.ListAgentsPage(c, p))
			got = append(got, page.Agents...)
			sizes = append(sizes, len(page.Agents))
			if page.NextCursor == "" || len(sizes) > 100 {
				return got, sizes
			}
			p.Cursor = page.NextCursor
		}
	}
	all, sizes := walk(lease.ListAgentsParams{})
	if len(sizes) != 2 || sizes[0] < 1900 {
		t.Errorf("agents of the longest names came in pages of %v, want two, the first of about 2,000", sizes)
	}
	if len(all) != n {
		t.Fatalf("a walk listed %d agents, want %d", len(all), n)
	}
	for i, a := range all {
		if want := fmt.Sprintf("ag-%04d", i); a.AgentID != want || a.Name != name {
			t.Fatalf("agent %d of the walk is %s, want %s", i, a.AgentID, want)
		}
	}
	if last := all[n-1]; last.Alive == nil || !*last.Alive || last.LastHeartbeatAt == nil {
		t.Errorf("ag-2299, which sent a heartbeat, is listed with alive %v", last.Alive)
	}
	if first := all[0]; first.Alive != nil {
		t.Errorf("ag-0000, which never sent a heartbeat, is listed with alive %v", *first.Alive)
	}
	for _, tc := range []struct {
		limit int
		want  string
	}{{700, "[700 700 700 200]"}, {1000, "[1000 1000 300]"}, {575, "[575 575 575 575]"}} {
		got, sizes := walk(lease.ListAgentsParams{Limit: tc.limit})
		if fmt.Sprint(sizes) != tc.want || len(got) != n || got[n-1].AgentID != "ag-2299" {
			t.Errorf("a walk %d at a time came in pages of %v, want %s", tc.limit, sizes, tc.want)
		}
	}
	for _, p := range []lease.ListAgentsParams{{Cursor: "not-a-cursor"}, {Cursor: strings.Repeat("x", 5000)}, {Limit: 1001}, {Limit: -1}} {
		if _, err := e.store.ListAgentsPage(c, p); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("%+.40v: %v, want invalid input", p, err)
		}
	}
}
