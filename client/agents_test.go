package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// ListAgents reads every page of GET /api/agents, and records the pages
// as the one answer they make (checkout agents --json prints it). It
// used to read the first page as the whole fleet.
func TestListAgentsReadsEveryPage(t *testing.T) {
	t.Parallel()
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		agent := func(id string) string {
			return fmt.Sprintf(`{"agent_id":%q,"name":"n","admin":false,"last_heartbeat_at":null,"alive":null}`, id)
		}
		switch c := r.URL.Query().Get("cursor"); c {
		case "":
			fmt.Fprintf(w, `{"agents":[%s,%s],"next_cursor":"p2"}`, agent("a1"), agent("a2"))
		case "p2":
			fmt.Fprintf(w, `{"agents":[%s],"next_cursor":null}`, agent("a3"))
		default:
			w.WriteHeader(400)
			fmt.Fprintf(w, `{"error":"cursor %s","code":"invalid_request"}`, c)
		}
	}))
	defer srv.Close()
	c := New(srv.URL, "ck_key-of-sixteen-chars")
	var rec Response
	as, err := c.ListAgents(RecordResponse(context.Background(), &rec))
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != 3 || as[2].AgentID != "a3" || requests.Load() != 2 {
		t.Fatalf("%d agents in %d requests, want 3 in 2", len(as), requests.Load())
	}
	var answer struct {
		Agents     []json.RawMessage `json:"agents"`
		NextCursor *string           `json:"next_cursor"`
	}
	if err := json.Unmarshal(rec.Body, &answer); err != nil || len(answer.Agents) != 3 || answer.NextCursor != nil {
		t.Fatalf("recorded %s (%v), want the three agents as one answer", rec.Body, err)
	}
}

// AgentPage walks the real server's agent listing a page at a time.
func TestAgainstServerAgentPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, admin := startServer(t, nil)
	for i := range 5 {
		agent(t, admin, fmt.Sprintf("pa-%d", i), "worker")
	}
	var ids []string
	for cursor, pages := "", 0; ; pages++ {
		page, err := admin.AgentPage(ctx, 2, cursor)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Agents) > 2 || pages > 4 {
			t.Fatalf("page %d: %+v", pages, page)
		}
		for _, a := range page.Agents {
			ids = append(ids, a.AgentID)
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	all, err := admin.ListAgents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The built-in admin and the five, by id.
	if want := "[admin pa-0 pa-1 pa-2 pa-3 pa-4]"; fmt.Sprint(ids) != want || len(all) != 6 {
		t.Fatalf("pages listed %v and ListAgents %d agents, want %s", ids, len(all), want)
	}
	if _, err := admin.AgentPage(ctx, 0, "bogus"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a bogus cursor: %v, want invalid_request", err)
	}
}
