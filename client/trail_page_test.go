package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// getJSON sends GET path with key to the server at base and decodes its
// answer.
func getJSON(t *testing.T, base, key, path string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, out
}

// GET /api/tasks/{task_id}/events comes in pages: limit (1 to 1000,
// default 1000) events at most, and a next_cursor while more follow,
// absent on the last page; a bad limit or cursor is 400 invalid_request.
func TestAgainstServerTrailPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, admin := startServer(t, nil)
	a := agent(t, admin, "agent-a1b2", "researcher")
	if _, err := a.CreateTask(ctx, CreateTaskRequest{TaskID: "paged"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Checkout(ctx, "paged", CheckoutRequest{}); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, err := a.Renew(ctx, "paged", RenewRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	key := a.apiKey
	var types []string
	path := "/api/tasks/paged/events?limit=2"
	for pages := 1; ; pages++ {
		status, body := getJSON(t, srv.URL(), key, path)
		evs, _ := body["events"].([]any)
		if status != 200 || len(evs) > 2 || pages > 3 {
			t.Fatalf("page %d: %d %v", pages, status, body)
		}
		for _, e := range evs {
			types = append(types, e.(map[string]any)["type"].(string))
		}
		next, ok := body["next_cursor"].(string)
		if !ok {
			if pages != 3 || body["pending"] != 0.0 {
				t.Fatalf("the last page, %d: %v", pages, body)
			}
			break
		}
		path = "/api/tasks/paged/events?limit=2&cursor=" + url.QueryEscape(next)
	}
	if len(types) != 5 || types[0] != "checkout" || types[4] != "renew" {
		t.Fatalf("followed: %v", types)
	}
	// The default page holds the whole of a short trail, without a cursor.
	if status, body := getJSON(t, srv.URL(), key, "/api/tasks/paged/events"); status != 200 || len(body["events"].([]any)) != 5 || body["next_cursor"] != nil {
		t.Fatalf("default page: %d %v", status, body)
	}
	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "cursor=nonsense", "cursor=t1.bm9wZQ"} {
		if status, body := getJSON(t, srv.URL(), key, "/api/tasks/paged/events?"+q); status != 400 || body["code"] != "invalid_request" {
			t.Errorf("?%s: %d %v, want 400 invalid_request", q, status, body)
		}
	}
}

const trailEventJSON = `{"type":"renew","task_id":"t","agent_id":"a","run_id":"r","fence":1,"at":"2026-03-20T14:30:00.000Z","by":"a","reason":""}`

// Trail and Events follow the trail's cursors to its last page, whose
// pending they keep; TrailPage reads one page, with limit and cursor.
func TestTrailFollowsCursors(t *testing.T) {
	t.Parallel()
	s := newScripted(t, func(_ int, r recorded) (int, string) {
		switch r.Path {
		case "/api/tasks/t/events":
			return 200, `{"events":[` + trailEventJSON + `,` + trailEventJSON + `],"pending":0,"next_cursor":"t1.a"}`
		case "/api/tasks/t/events?cursor=t1.a":
			return 200, `{"events":[` + trailEventJSON + `],"pending":2}`
		case "/api/tasks/t/events?cursor=t1.a&limit=1":
			return 200, `{"events":[` + trailEventJSON + `],"pending":0,"next_cursor":"t1.b"}`
		case "/api/tasks/loop/events":
			return 200, `{"events":[],"pending":0,"next_cursor":"t1.c"}`
		case "/api/tasks/loop/events?cursor=t1.c":
			return 200, `{"events":[],"pending":0,"next_cursor":"t1.c"}`
		}
		return 404, `{"error":"no","code":"not_found"}`
	})
	c := New(s.URL, "k")
	ctx := context.Background()
	tr, err := c.Trail(ctx, "t")
	if err != nil || len(tr.Events) != 3 || tr.Pending != 2 || tr.NextCursor != "" {
		t.Fatalf("trail %+v, %v", tr, err)
	}
	// Recorded, as command-line tools print it: the whole trail as one
	// answer, its events as the server wrote them.
	var rec Response
	if _, err := c.Trail(RecordResponse(ctx, &rec), "t"); err != nil {
		t.Fatal(err)
	}
	if want := `{"events":[` + strings.Repeat(trailEventJSON+",", 3)[:3*len(trailEventJSON)+2] + `],"pending":2}`; string(rec.Body) != want || rec.Status != 200 {
		t.Fatalf("recorded %d %s\nwant %s", rec.Status, rec.Body, want)
	}
	evs, err := c.Events(ctx, "t")
	if err != nil || len(evs) != 3 {
		t.Fatalf("events %+v, %v", evs, err)
	}
	page, err := c.TrailPage(ctx, "t", TrailRequest{Cursor: "t1.a", Limit: 1})
	if err != nil || len(page.Events) != 1 || page.NextCursor != "t1.b" {
		t.Fatalf("page %+v, %v", page, err)
	}
	if _, err := c.Trail(ctx, "loop"); !errors.Is(err, errCursorRepeated) {
		t.Fatalf("a server repeating its cursor: %v", err)
	}
}

// A feed page is caught up when the server says so; a server from before
// caught_up is caught up at an empty page. FollowFeed asks again at once
// after a page that is not caught up, empty or not, and waits after one
// that is.
func TestFeedCaughtUp(t *testing.T) {
	t.Parallel()
	s := newScripted(t, func(n int, r recorded) (int, string) {
		switch {
		case strings.HasPrefix(r.Path, "/api/events?since="):
			return 200, `{"events":[],"next_cursor":"f1.a","caught_up":false}`
		case r.Path == "/api/events?cursor=f1.a":
			return 200, `{"events":[` + trailEventJSON + `],"next_cursor":"f1.b","caught_up":true}`
		case r.Path == "/api/events?cursor=f1.b":
			return 200, `{"events":[],"next_cursor":"f1.b","caught_up":true}`
		case r.Path == "/api/events?cursor=old-empty":
			return 200, `{"events":[],"next_cursor":"f1.x"}`
		case r.Path == "/api/events?cursor=old-full":
			return 200, `{"events":[` + trailEventJSON + `],"next_cursor":"f1.x"}`
		}
		return 404, `{"error":"no","code":"not_found"}`
	})
	var sleeper instant
	c := New(s.URL, "k", WithSleeper(sleeper.sleep))
	ctx := context.Background()
	for cursor, want := range map[string]bool{"f1.a": true, "old-empty": true, "old-full": false} {
		if page, err := c.Feed(ctx, FeedRequest{Cursor: cursor}); err != nil || page.CaughtUp != want {
			t.Errorf("cursor %s: caught up %v, %v; want %v", cursor, page.CaughtUp, err, want)
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var got []Event
	err := c.FollowFeed(ctx, FeedRequest{Since: time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)}, time.Second, func(e Event) error {
		got = append(got, e)
		cancel()
		return nil
	})
	if !errors.Is(err, context.Canceled) || len(got) != 1 {
		t.Fatalf("follow: %v, %d events", err, len(got))
	}
	// Each event keeps its JSON as the server sent it ("reason":"", the
	// milliseconds of at), for tools that print the server's JSON.
	if string(got[0].Raw) != trailEventJSON {
		t.Errorf("event's Raw %q, want the server's %q", got[0].Raw, trailEventJSON)
	}
	sleeper.mu.Lock()
	defer sleeper.mu.Unlock()
	if len(sleeper.waits) != 1 {
		t.Errorf("follow waited %v: want once, after the caught-up page only", sleeper.waits)
	}
}
