package httpapi

// The audit-trail routes: a task's trail, and the fleet feed of every
// task's.

import (
	"net/http"
	"strings"
	"time"

	"github.com/checkout-dev/checkout/errcode"
	"github.com/checkout-dev/checkout/lease"
)

// events serves a task's trail, GET /api/tasks/{task_id}/events, a page at
// a time (lease.Store.TrailPage): limit events at most (default 1,000, so
// that a trail that short comes whole in one answer), and next_cursor while
// more follow, null on the last page.
func (s *server) events(w http.ResponseWriter, r *http.Request, _ lease.Principal) error {
	id, err := pathID(r, "task_id")
	if err != nil {
		return err
	}
	q := r.URL.Query()
	p := lease.TrailParams{TaskID: id, Limit: lease.MaxListLimit, Cursor: q.Get("cursor")}
	if v := q.Get("limit"); v != "" {
		if p.Limit, err = limit(v); err != nil {
			return err
		}
	}
	if err := lease.CheckCursor(p.Cursor); err != nil {
		return err
	}
	tr, err := s.svc.TrailPage(r.Context(), p)
	if err != nil {
		return err
	}
	var next *string
	if tr.NextCursor != "" {
		next = &tr.NextCursor
	}
	s.writeJSON(w, http.StatusOK, struct {
		Events     []EventJSON `json:"events"`
		Pending    int         `json:"pending"`
		NextCursor *string     `json:"next_cursor"`
	}{eventsJSON(tr.Events), tr.Pending, next})
	return nil
}

func (s *server) feed(w http.ResponseWriter, r *http.Request, _ lease.Principal) error {
	q := r.URL.Query()
	p := lease.FeedParams{Limit: lease.DefaultListLimit, Cursor: q.Get("cursor")}
	if err := lease.CheckCursor(p.Cursor); err != nil {
		return err
	}
	if v := q.Get("since"); strings.HasPrefix(v, "f1.") && p.Cursor == "" {
		p.Cursor = v // since may also be a cursor
	} else if v != "" && p.Cursor == "" {
		t, ok := parseTime(v)
		if !ok {
			return errorf(errcode.InvalidRequest, "since must be an RFC 3339 time such as 2026-03-20T14:35:00Z")
		}
		if t.IsZero() {
			// 0001-01-01T00:00:00Z is Go's zero time, which FeedParams
			// reads as no since; given, it is a time before the events'
			// retention like any other, and starts there too.
			t = time.Unix(0, 0)
		}
		p.Since = t
	}
	if v := q.Get("limit"); v != "" {
		var err error
		if p.Limit, err = limit(v); err != nil {
			return err
		}
	}
	if v := q.Get("type"); v != "" {
		for _, t := range strings.Split(v, ",") {
			p.Types = append(p.Types, lease.EventType(strings.TrimSpace(t)))
		}
		if err := lease.CheckEventTypes(p.Types); err != nil {
			return err
		}
	}
	page, err := s.svc.Feed(r.Context(), p)
	if err != nil {
		return err
	}
	s.writeJSON(w, http.StatusOK, struct {
		Events     []EventJSON `json:"events"`
		NextCursor string      `json:"next_cursor"`
		CaughtUp   bool        `json:"caught_up"`
	}{eventsJSON(page.Events), page.NextCursor, page.CaughtUp})
	return nil
}

// eventsJSON is events in their API form: [] for none.
func eventsJSON(evs []lease.Event) []EventJSON {
	out := make([]EventJSON, 0, len(evs))
	for _, e := range evs {
		out = append(out, ToEventJSON(e))
	}
	return out
}
