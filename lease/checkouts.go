package lease

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
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
// the agent the listing is of. Each page reads every entry of the
// lease-expiry index (a few attributes each: every shard's Query pages
// on every 1 MB, thousands of entries) and skips those up to the cursor: a
// lease granted behind the cursor during a walk is on no later page, as
// with the other listings. It then confirms the entries that follow, in
// order, on the task items (a BatchGetItem per 100), a chunk at a time
// (the limit asked for, else MaxListLimit), until the page is full, for
// at most checkoutsChunks chunks: so a page reads the items of the leases
// it shows and few more, however many leases the fleet holds. A page cut
// short by that bound (entries whose leases have ended, which the sweep
// has yet to remove) ends with a cursor after the last entry it read.

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
	now := s.clock()
	entries, err := s.leaseEntriesOf(ctx, p.AgentID)
	if err != nil {
		return CheckoutPage{}, err
	}
	slices.SortFunc(entries, func(a, b taskItem) int {
		return cmp.Or(cmp.Compare(a.LockedAt, b.LockedAt), strings.Compare(a.TaskID, b.TaskID))
	})
	if after != nil {
		entries = slices.DeleteFunc(entries, func(it taskItem) bool { return !afterCursor(it, *after) })
	}
	chunk := MaxListLimit
	if p.Limit > 0 {
		chunk = p.Limit
	}
	page := CheckoutPage{Checkouts: []Checkout{}}
	size := 0
	var last *taskItem // the entry the page ends at
	for reads := 0; len(entries) > 0 && reads < checkoutsChunks; reads++ {
		batch := entries[:min(len(entries), chunk)]
		cos, err := s.liveCheckouts(ctx, batch, p.AgentID, now)
		if err != nil {
			return CheckoutPage{}, err
		}
		for i, co := range cos {
			if co == nil {
				last = &batch[i]
				continue
			}
			full := p.Limit > 0 && len(page.Checkouts) == p.Limit
			if size += checkoutWireBound(*co); full || size > pageBytes && len(page.Checkouts) > 0 {
				return endCheckoutsPage(page, last, p.AgentID), nil
			}
			page.Checkouts = append(page.Checkouts, *co)
			last = &batch[i]
		}
		entries = entries[len(batch):]
	}
	if len(entries) == 0 {
		last = nil
	}
	return endCheckoutsPage(page, last, p.AgentID), nil
}

// endCheckoutsPage ends page at the entry last (nil: the listing's end)
// of agentID's listing, in order. A lease locked after its task's entry
// (one the index still holds from the task's earlier lease) is shown at
// its own place: on this page when that is not past the cursor, else on
// the page its entry falls in once the index has it, never on both.
func endCheckoutsPage(page CheckoutPage, last *taskItem, agentID string) CheckoutPage {
	if last != nil {
		at := checkoutCursor{L: last.LockedAt, T: last.TaskID, A: agentID}
		page.Checkouts = slices.DeleteFunc(page.Checkouts, func(co Checkout) bool {
			return afterCursor(taskItem{TaskID: co.TaskID, LockedAt: co.LockedAt.UnixMilli()}, at)
		})
		page.NextCursor = encodeCheckoutCursor(at)
	}
	slices.SortFunc(page.Checkouts, func(a, b Checkout) int {
		return cmp.Or(a.LockedAt.Compare(b.LockedAt), strings.Compare(a.TaskID, b.TaskID))
	})
	return page
}

// checkoutsChunks bounds the chunks of lease entries one page of
// ListCheckoutsPage confirms.
const checkoutsChunks = 5

// afterCursor says whether the lease entry it comes after the cursor's
// lease in the listing's order (locked_at, then task_id).
func afterCursor(it taskItem, at checkoutCursor) bool {
	return it.LockedAt > at.L || it.LockedAt == at.L && it.TaskID > at.T
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
