package lease

import (
	"context"
	"encoding/base64"
	"encoding/json"
)

// Listing live leases in pages.
//
// GET /api/checkouts lists every live lease (or one agent's), oldest
// first, as one answer while it fits: a page ends when the next lease
// could take the answer past pageBytes (the 6 MB a Lambda can return
// bounds it in AWS; by checkoutWireBound, a page holds about 4,000
// ordinary leases, or 480 with the longest reasons, names and ids),
// or at the limit asked for. Its
// cursor is the position of its last lease, (locked_at, task_id), and
// the agent the listing is of. Each page reads every live lease and
// skips those up to the cursor: a lease granted behind the cursor
// during a walk is on no later page, as with the other listings.

// ListCheckoutsParams selects a page of live leases.
type ListCheckoutsParams struct {
	AgentID string // only this agent's; "" for every agent's
	Cursor  string // a page's NextCursor; "" for the first
	Limit   int    // 1 to MaxListLimit; 0: as many as fit in a page
}

// CheckoutPage is a page of live leases; NextCursor is "" on the last.
type CheckoutPage struct {
	Checkouts  []Checkout
	NextCursor string
}

// checkoutCursor is where a listing of leases goes on: after the lease
// locked at L (ms) on task T, in the listing of agent A's leases ("" for
// every agent's).
type checkoutCursor struct {
	L int64  `json:"l"`
	T string `json:"t"`
	A string `json:"a,omitempty"`
}

// ListCheckoutsPage returns a page of live leases, oldest first. A cursor
// continues its own listing: given alone, it keeps that listing's agent;
// with another agent, it is refused.
func (s *Store) ListCheckoutsPage(ctx context.Context, p ListCheckoutsParams) (CheckoutPage, error) {
	if p.Limit != 0 {
		if err := CheckLimit(p.Limit); err != nil {
			return CheckoutPage{}, err
		}
	}
	if err := CheckCursor(p.Cursor); err != nil {
		return CheckoutPage{}, err
	}
	var after *checkoutCursor
	if p.Cursor != "" {
		c, err := decodeCheckoutCursor(p.Cursor)
		if err != nil {
			return CheckoutPage{}, err
		}
		switch {
		case p.AgentID == "":
			p.AgentID = c.A
		case p.AgentID != c.A && c.A == "":
			return CheckoutPage{}, invalidField("cursor", CodeInvalidRequest, "cursor continues the listing of every agent's leases: give no agent_id with it")
		case p.AgentID != c.A:
			return CheckoutPage{}, invalidField("cursor", CodeInvalidRequest, "cursor continues the listing of the leases of %s: give that agent_id, or none", c.A)
		}
		after = &c
	}
	all, err := s.ListCheckouts(ctx, p.AgentID)
	if err != nil {
		return CheckoutPage{}, err
	}
	rest := all
	if after != nil {
		i := 0
		for i < len(all) && !afterCursor(all[i], *after) {
			i++
		}
		rest = all[i:]
	}
	n := len(rest)
	if p.Limit > 0 {
		n = min(n, p.Limit)
	}
	n = fitCheckouts(rest[:n])
	page := CheckoutPage{Checkouts: rest[:n]}
	if n < len(rest) {
		last := rest[n-1]
		page.NextCursor = encodeCheckoutCursor(checkoutCursor{L: last.LockedAt.UnixMilli(), T: last.TaskID, A: p.AgentID})
	}
	return page, nil
}

// afterCursor says whether c comes after the cursor's lease in the
// listing's order (locked_at, then task_id).
func afterCursor(c Checkout, at checkoutCursor) bool {
	l := c.LockedAt.UnixMilli()
	return l > at.L || l == at.L && c.TaskID > at.T
}

func encodeCheckoutCursor(c checkoutCursor) string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCheckoutCursor(s string) (checkoutCursor, error) {
	var c checkoutCursor
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || json.Unmarshal(b, &c) != nil || c.L < 0 || !ValidID(c.T) || c.A != "" && !ValidID(c.A) {
		return checkoutCursor{}, notIssued()
	}
	return c, nil
}

// checkoutWireFixed bounds a lease's field names, punctuation, times and
// numbers in an answer.
const checkoutWireFixed = 512

// checkoutWireBound is the most lease c can take in a listing's answer,
// which shows no title or queue (see eventWireBound): its free text 7
// bytes a byte, the rest 2.
func checkoutWireBound(c Checkout) int {
	text := len(c.Reason) + len(c.AgentName)
	rest := checkoutWireFixed + len(c.TaskID) + len(c.AgentID) + len(c.RunID)
	return 7*text + 2*rest
}

// fitCheckouts returns how many of cs, from the first, fit in pageBytes:
// at least one, if there is one.
func fitCheckouts(cs []Checkout) int {
	size := 0
	for i, c := range cs {
		if size += checkoutWireBound(c); size > pageBytes && i > 0 {
			return i
		}
	}
	return len(cs)
}
