package client

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// FollowFeed rides out a restart (503s, dropped connections) from its
// last cursor, skipping and repeating nothing; an error retrying cannot
// mend still ends it.
func TestFollowFeedRidesOutARestart(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	f := newFlaky(t, func(r recorded) (int, string) {
		switch k := n.Add(1); {
		case k == 1:
			return 200, `{"events":[{"type":"checkout","task_id":"t1"}],"next_cursor":"c1","caught_up":true}`
		case k <= 6:
			return drop, ""
		case k <= 12:
			return 503, unavailableJSON
		case k == 13:
			return 200, `{"events":[{"type":"complete","task_id":"t1"}],"next_cursor":"c2","caught_up":false}`
		}
		return 401, `{"error":"bad key","code":"unauthorized"}`
	})
	var sl instant
	c := New(f.URL, "k", WithSleeper(sl.sleep))
	var got []string
	err := c.FollowFeed(context.Background(), FeedRequest{}, time.Second, func(e Event) error {
		got = append(got, e.Type)
		return nil
	})
	if !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("FollowFeed = %v, want the 401", err)
	}
	if strings.Join(got, " ") != "checkout complete" {
		t.Fatalf("events %v", got)
	}
	reqs := f.requests()
	for i, r := range reqs[1:13] {
		if !strings.Contains(r.Path, "cursor=c1") {
			t.Fatalf("request %d %s, want from cursor c1", i+2, r.Path)
		}
	}
	if !strings.Contains(reqs[13].Path, "cursor=c2") || len(reqs) != 14 {
		t.Fatalf("requests %+v", reqs)
	}
	for _, d := range sl.waits {
		if d > 30*time.Second {
			t.Fatalf("wait %v, want at most 30s", d)
		}
	}
}

// A follower is told when FollowFeed starts asking again after a failure,
// and when an answer comes again: OnFeedOutage is called once with the
// failure, however many tries it takes, then once with nil.
func TestFollowFeedSaysWhenItIsHeldUp(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	f := newFlaky(t, func(r recorded) (int, string) {
		switch k := n.Add(1); {
		case k == 1:
			return 200, `{"events":[],"next_cursor":"c1","caught_up":true}`
		case k <= 9:
			return 503, unavailableJSON
		case k == 10:
			return 200, `{"events":[],"next_cursor":"c2","caught_up":true}`
		}
		return 401, `{"error":"bad key","code":"unauthorized"}`
	})
	c := New(f.URL, "k", WithSleeper((&instant{}).sleep))
	var told []error
	err := c.FollowFeed(context.Background(), FeedRequest{}, time.Second, func(Event) error { return nil },
		OnFeedOutage(func(err error) { told = append(told, err) }))
	if !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("FollowFeed = %v, want the 401", err)
	}
	if len(told) != 2 || !errors.Is(told[0], ErrUnavailable) || told[1] != nil {
		t.Fatalf("told %v, want the 503, then nil", told)
	}
}
