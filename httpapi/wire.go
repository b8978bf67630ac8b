package httpapi

import (
	"encoding/json"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// The JSON shapes of the API (httpapi/openapi/openapi.yaml). Every field is always present; absent values
// are null, never omitted, and lists are [] when empty, except on events:
// held_seconds, which only events that end a lease carry, and outcome and
// error, which only release events carry (null when the release gave none).

const timeFormat = "2006-01-02T15:04:05.000Z"

// stamp formats t as RFC 3339 UTC with milliseconds (truncated).
func stamp(t time.Time) string { return t.UTC().Format(timeFormat) }

// Stamp is t formatted as every time of the API is (RFC 3339 UTC with
// milliseconds), or nil: for the notices' payloads.
func Stamp(t *time.Time) *string { return stampPtr(t) }

func stampPtr(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := stamp(*t)
	return &s
}

// seconds is d in whole seconds, rounded down and never negative.
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(d / time.Second)
}

type checkoutJSON struct {
	TaskID           string `json:"task_id"`
	AgentID          string `json:"agent_id"`
	AgentName        string `json:"agent_name"`
	RunID            string `json:"run_id"`
	Fence            int64  `json:"fence"`
	LockedAt         string `json:"locked_at"`
	TimeoutSeconds   int64  `json:"timeout_seconds"`
	ExpiresAt        string `json:"expires_at"`
	RemainingSeconds int64  `json:"remaining_seconds"`
	Reason           string `json:"reason"`
	// Attempt is which attempt of the task the lease is: 1 for the first
	// grant since the task was created or reopened.
	Attempt int `json:"attempt"`
}

func toCheckout(c lease.Checkout, now time.Time) checkoutJSON {
	return checkoutJSON{
		TaskID:           c.TaskID,
		AgentID:          c.AgentID,
		AgentName:        c.AgentName,
		RunID:            c.RunID,
		Fence:            c.Fence,
		LockedAt:         stamp(c.LockedAt),
		TimeoutSeconds:   seconds(c.Timeout),
		ExpiresAt:        stamp(c.ExpiresAt),
		RemainingSeconds: seconds(c.Remaining(now)),
		Reason:           c.Reason,
		Attempt:          c.Attempt,
	}
}

// claimJSON is a claim's answer: the checkout and what the task is.
type claimJSON struct {
	checkoutJSON
	Title    string `json:"title"`
	Queue    string `json:"queue"`
	Priority int    `json:"priority"`
}

func toClaim(c lease.Checkout, now time.Time) claimJSON {
	return claimJSON{checkoutJSON: toCheckout(c, now), Title: c.Title, Queue: c.Queue, Priority: c.Priority}
}

func toCheckoutPtr(c *lease.Checkout, now time.Time) *checkoutJSON {
	if c == nil {
		return nil
	}
	j := toCheckout(*c, now)
	return &j
}

func toCheckouts(cs []lease.Checkout, now time.Time) []checkoutJSON {
	out := make([]checkoutJSON, 0, len(cs))
	for _, c := range cs {
		out = append(out, toCheckout(c, now))
	}
	return out
}

type taskJSON struct {
	TaskID          string          `json:"task_id"`
	Title           string          `json:"title"`
	Description     string          `json:"description"`
	Queue           string          `json:"queue"`
	Priority        int             `json:"priority"`
	Metadata        json.RawMessage `json:"metadata"`
	Version         int64           `json:"version"`
	Status          lease.Status    `json:"status"`
	CreatedAt       string          `json:"created_at"`
	StartedAt       *string         `json:"started_at"`
	CompletedAt     *string         `json:"completed_at"`
	DurationSeconds *int64          `json:"duration_seconds"`
	Checkout        *checkoutJSON   `json:"checkout"`
	// The work graph (API 1.1).
	BlockedBy         []blockerJSON `json:"blocked_by"`
	Blocks            []string      `json:"blocks"`
	MaxAttempts       int           `json:"max_attempts"`
	Attempts          int           `json:"attempts"`
	RetryDelaySeconds int64         `json:"retry_delay_seconds"`
	NotBefore         *string       `json:"not_before"`
	LastError         *string       `json:"last_error"`
}

// blockerJSON is a task's blocker, with its status now.
type blockerJSON struct {
	TaskID string       `json:"task_id"`
	Status lease.Status `json:"status"`
}

func toBlockers(bs []lease.Blocker) []blockerJSON {
	out := make([]blockerJSON, 0, len(bs))
	for _, b := range bs {
		out = append(out, blockerJSON{TaskID: b.TaskID, Status: b.Status})
	}
	return out
}

func toTask(t lease.Task, now time.Time) taskJSON {
	j := taskJSON{
		TaskID:      t.TaskID,
		Title:       t.Title,
		Description: t.Description,
		Queue:       t.Queue,
		Priority:    t.Priority,
		Metadata:    t.Metadata,
		Version:     t.Version,
		Status:      t.Status,
		CreatedAt:   stamp(t.CreatedAt),
		StartedAt:   stampPtr(t.StartedAt),
		CompletedAt: stampPtr(t.CompletedAt),
		Checkout:    toCheckoutPtr(t.Checkout, now),

		BlockedBy:         toBlockers(t.BlockedBy),
		Blocks:            t.Blocks,
		MaxAttempts:       t.MaxAttempts,
		Attempts:          t.Attempts,
		RetryDelaySeconds: seconds(t.RetryDelay),
		NotBefore:         stampPtr(t.NotBefore),
	}
	if j.Blocks == nil {
		j.Blocks = []string{}
	}
	if j.MaxAttempts == 0 {
		// A task written before the work graph has none: the default
		// applies to it.
		j.MaxAttempts = lease.DefaultMaxAttempts
	}
	if t.LastError != "" {
		j.LastError = &t.LastError
	}
	if j.Metadata == nil {
		j.Metadata = json.RawMessage("{}")
	}
	if d, ok := t.Duration(); ok {
		s := seconds(d)
		j.DurationSeconds = &s
	}
	return j
}

// EventJSON is an audit event as the API shows it; the EventBridge notifier
// sends the same form as its events' detail.
type EventJSON struct {
	Type        lease.EventType `json:"type"`
	TaskID      string          `json:"task_id"`
	AgentID     string          `json:"agent_id"`
	RunID       string          `json:"run_id"`
	Fence       int64           `json:"fence"`
	At          string          `json:"at"`
	HeldSeconds *int64          `json:"held_seconds,omitempty"`
	By          string          `json:"by"`
	Reason      string          `json:"reason"`
	// Outcome and Error are a release's (API 1.1): on every release
	// event, null when the release gave none; on no other event.
	Outcome ReleaseText `json:"outcome,omitzero"`
	Error   ReleaseText `json:"error,omitzero"`
}

// ReleaseText is a release event's outcome or error. Set says the event
// is a release's, whose JSON carries the key: Text, or null when empty.
// Other events leave it unset, and their JSON leaves the key out.
type ReleaseText struct {
	Text string
	Set  bool
}

// IsZero reports an unset ReleaseText, which omitzero leaves out.
func (r ReleaseText) IsZero() bool { return !r.Set }

// MarshalJSON writes Text, or null when it is empty.
func (r ReleaseText) MarshalJSON() ([]byte, error) {
	if r.Text == "" {
		return []byte("null"), nil
	}
	return json.Marshal(r.Text)
}

// UnmarshalJSON reads a string or null; either sets r.
func (r *ReleaseText) UnmarshalJSON(b []byte) error {
	*r = ReleaseText{Set: true}
	if string(b) == "null" {
		return nil
	}
	return json.Unmarshal(b, &r.Text)
}

// ToEventJSON converts a lease event to its API form.
func ToEventJSON(e lease.Event) EventJSON {
	j := EventJSON{
		Type:    e.Type,
		TaskID:  e.TaskID,
		AgentID: e.AgentID,
		RunID:   e.RunID,
		Fence:   e.Fence,
		At:      stamp(e.At),
		By:      e.By,
		Reason:  e.Reason,
	}
	if e.Type == lease.EventRelease {
		j.Outcome = ReleaseText{Text: string(e.Outcome), Set: true}
		j.Error = ReleaseText{Text: e.Error, Set: true}
	}
	if e.Held != nil {
		s := seconds(*e.Held)
		j.HeldSeconds = &s
	} else if e.EndsLease() {
		var zero int64
		j.HeldSeconds = &zero
	}
	return j
}

type agentJSON struct {
	AgentID         string  `json:"agent_id"`
	Name            string  `json:"name"`
	Admin           bool    `json:"admin"`
	LastHeartbeatAt *string `json:"last_heartbeat_at"`
	Alive           *bool   `json:"alive"`
}

type registrationJSON struct {
	AgentID   string `json:"agent_id"`
	Name      string `json:"name"`
	Admin     bool   `json:"admin"`
	CreatedAt string `json:"created_at"`
	APIKey    string `json:"api_key"`
}

type messageJSON struct {
	MessageID string `json:"message_id"`
	Type      string `json:"type"`
	TaskID    string `json:"task_id"`
	Reason    string `json:"reason"`
	At        string `json:"at"`
	// Fence and RunID name the lease whose ending the message is about;
	// null on messages written before they were kept.
	Fence *int64  `json:"fence"`
	RunID *string `json:"run_id"`
	// NotBefore is when a task_available message's task may be granted,
	// if it waits (a failed release's retry delay); null otherwise.
	NotBefore *string `json:"not_before"`
}

func toMessage(m lease.Message) messageJSON {
	typ := m.Type
	if typ == "" {
		typ = lease.MessageTaskAvailable
	}
	j := messageJSON{MessageID: m.MessageID, Type: typ, TaskID: m.TaskID, Reason: m.Reason, At: stamp(m.At)}
	if m.Fence != 0 {
		j.Fence = &m.Fence
	}
	if m.RunID != "" {
		j.RunID = &m.RunID
	}
	if m.NotBefore != nil {
		nb := stamp(*m.NotBefore)
		j.NotBefore = &nb
	}
	return j
}

type releasedJSON struct {
	TaskID      string `json:"task_id"`
	ReleasedBy  string `json:"released_by"`
	HeldSeconds int64  `json:"held_seconds"`
}
