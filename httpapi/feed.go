package httpapi

import (
	"net/http"
	"strings"
	"time"

	"github.com/checkout-dev/checkout/errcode"
	"github.com/checkout-dev/checkout/lease"
)

func (s *server) feed(w http.ResponseWriter, r *http.Request, _ lease.Principal) error {
	q := r.URL.Query()
	p := lease.FeedParams{Limit: lease.DefaultListLimit, Cursor: q.Get("cursor")}
	if err := lease.CheckCursor(p.Cursor); err != nil {
		return err
	}
	if v := q.Get("since"); strings.HasPrefix(v, "f1.") && p.Cursor == "" {
		p.Cursor = v // since may also be a cursor
	} else if v != "" && p.Cursor == "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return errorf(errcode.InvalidRequest, "since must be an RFC 3339 time such as 2026-03-20T14:35:00Z")
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
	out := make([]EventJSON, 0, len(page.Events))
	for _, e := range page.Events {
		out = append(out, ToEventJSON(e))
	}
	s.writeJSON(w, http.StatusOK, struct {
		Events     []EventJSON `json:"events"`
		NextCursor string      `json:"next_cursor"`
	}{out, page.NextCursor})
	return nil
}
