package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
)

// CheckoutPage gives one page of live leases; ListCheckouts walks every
// page, an agent's leases too.
func TestAgainstServerCheckoutPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, admin := startServer(t, nil)
	a := agent(t, admin, "agent-cp1", "researcher")
	b := agent(t, admin, "agent-cp2", "writer")
	var want, wantB []string
	for i := range 5 {
		id := fmt.Sprintf("cp-%d", i)
		if _, err := a.CreateTask(ctx, CreateTaskRequest{TaskID: id, Title: id}); err != nil {
			t.Fatal(err)
		}
		holder := a
		if i%2 == 1 {
			holder = b
			wantB = append(wantB, id)
		}
		if _, err := holder.Checkout(ctx, id, CheckoutRequest{}); err != nil {
			t.Fatal(err)
		}
		want = append(want, id)
	}
	var ids []string
	for cursor, pages := "", 0; ; pages++ {
		page, err := a.CheckoutPage(ctx, "", 2, cursor)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Checkouts) > 2 || pages > 3 {
			t.Fatalf("page %d: %+v", pages, page)
		}
		for _, c := range page.Checkouts {
			ids = append(ids, c.TaskID)
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	slices.Sort(ids)
	if !slices.Equal(ids, want) {
		t.Errorf("pages of 2 listed %v, want %v", ids, want)
	}
	all, err := a.ListCheckouts(ctx, "agent-cp2")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range all {
		got = append(got, c.TaskID)
	}
	slices.Sort(got)
	if !slices.Equal(got, wantB) {
		t.Errorf("agent-cp2's leases: %v, want %v", got, wantB)
	}
	if _, err := a.CheckoutPage(ctx, "", 0, "bogus"); err == nil {
		t.Error("a cursor the server did not issue: no error")
	}
}

// ListCheckouts follows next_cursor (the server pages a listing that
// would pass 5 MB), and under RecordResponse records every page as the
// one answer they make. It used to read the first page alone.
func TestListCheckoutsReadsEveryPage(t *testing.T) {
	t.Parallel()
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		lease := func(id string) string {
			return fmt.Sprintf(`{"task_id":%q,"agent_id":"a","agent_name":"n","run_id":"r","fence":1,"locked_at":"2026-03-20T14:35:00.000Z","timeout_seconds":60,"expires_at":"2026-03-20T14:36:00.000Z","remaining_seconds":60,"reason":"","attempt":1}`, id)
		}
		switch c := r.URL.Query().Get("cursor"); c {
		case "":
			fmt.Fprintf(w, `{"checkouts":[%s,%s],"next_cursor":"p2"}`, lease("t1"), lease("t2"))
		case "p2":
			fmt.Fprintf(w, `{"checkouts":[%s],"next_cursor":null}`, lease("t3"))
		default:
			w.WriteHeader(400)
			fmt.Fprintf(w, `{"error":"cursor %s","code":"invalid_request"}`, c)
		}
	}))
	defer srv.Close()
	c := New(srv.URL, "ck_key-of-sixteen-chars")
	var rec Response
	cos, err := c.ListCheckouts(RecordResponse(context.Background(), &rec), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(cos) != 3 || cos[2].TaskID != "t3" || requests.Load() != 2 {
		t.Fatalf("%d leases in %d requests, want 3 in 2", len(cos), requests.Load())
	}
	var answer struct {
		Checkouts  []json.RawMessage `json:"checkouts"`
		NextCursor *string           `json:"next_cursor"`
	}
	if err := json.Unmarshal(rec.Body, &answer); err != nil || len(answer.Checkouts) != 3 || answer.NextCursor != nil {
		t.Fatalf("recorded %s (%v), want the three leases as one answer", rec.Body, err)
	}
}
