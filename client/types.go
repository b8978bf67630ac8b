package client

import (
	"encoding/json"
	"time"
)

// Task statuses.
const (
	StatusTodo       = "todo"
	StatusInProgress = "in_progress"
	StatusDone       = "done"
	StatusCancelled  = "cancelled"
	// StatusBlocked: at least one of the task's blockers (BlockedBy) is not
	// done. Claims never hand it out; a checkout answers a *BlockedError.
	StatusBlocked = "blocked"
	// StatusFailed: the task used up its attempts (MaxAttempts). Terminal,
	// like done, until it is reopened (UpdateTask with Status "todo").
	StatusFailed = "failed"
)

// Release outcomes (ReleaseRequest.Outcome, Event.Outcome).
const (
	// OutcomeDone is a release whose attempt went well: not a failure.
	OutcomeDone = "done"
	// OutcomeFailed is a failed attempt: it counts towards the task's
	// MaxAttempts and delays its next grant by its retry delay.
	OutcomeFailed = "failed"
)

// MaxErrorLen is the longest error text a failed release may carry, in
// bytes (2 KiB).
const MaxErrorLen = 2 << 10

// Checkout is a lease on a task, as the API returns it.
type Checkout struct {
	TaskID           string    `json:"task_id"`
	AgentID          string    `json:"agent_id"`
	AgentName        string    `json:"agent_name"`
	RunID            string    `json:"run_id"`
	Fence            int64     `json:"fence"`
	LockedAt         time.Time `json:"locked_at"`
	TimeoutSeconds   int64     `json:"timeout_seconds"`
	ExpiresAt        time.Time `json:"expires_at"`
	RemainingSeconds int64     `json:"remaining_seconds"`
	Reason           string    `json:"reason,omitempty"`
	// Title, Queue and Priority are the task's, where the answer carries
	// them (a claim's).
	Title    string `json:"title,omitempty"`
	Queue    string `json:"queue,omitempty"`
	Priority int    `json:"priority,omitempty"`
	// Attempt is which attempt of the task this lease is: 1 for the first
	// grant since the task was created or reopened (0 from a server older
	// than API version 1.1).
	Attempt int `json:"attempt,omitempty"`
}

// Timeout is the lease's length.
func (c Checkout) Timeout() time.Duration { return time.Duration(c.TimeoutSeconds) * time.Second }

// Remaining is how long the lease had left when the server answered.
func (c Checkout) Remaining() time.Duration {
	return time.Duration(c.RemainingSeconds) * time.Second
}

// Task is a unit of work.
type Task struct {
	TaskID      string `json:"task_id"`
	Title       string `json:"title"`
	Description string `json:"description"`
	Queue       string `json:"queue"`
	Priority    int    `json:"priority"`
	// Metadata is the task's JSON object of the orchestrator's own ({}
	// when none was given).
	Metadata map[string]any `json:"metadata"`
	// Version grows with every change of the task; UpdateTask's IfVersion.
	Version         int64      `json:"version"`
	Status          string     `json:"status"`
	CreatedAt       time.Time  `json:"created_at"`
	StartedAt       *time.Time `json:"started_at"`
	CompletedAt     *time.Time `json:"completed_at"`
	DurationSeconds *int64     `json:"duration_seconds"`
	// Checkout is the live lease, or nil.
	Checkout *Checkout `json:"checkout"`

	// The work graph (API version 1.1). BlockedBy is every task this one
	// waits for, with its status now; while one of them is not done the
	// task is blocked. Blocks lists the tasks that wait for this one.
	BlockedBy []Blocker `json:"blocked_by"`
	Blocks    []string  `json:"blocks"`
	// Attempts counts the grants since the task was created or reopened;
	// a failed attempt at MaxAttempts makes the task failed.
	Attempts    int `json:"attempts"`
	MaxAttempts int `json:"max_attempts"`
	// RetryDelaySeconds is the wait after the first failed release, in
	// whole seconds (see RetryDelay); it doubles with each further failure.
	RetryDelaySeconds int64 `json:"retry_delay_seconds"`
	// NotBefore is when the task may be granted again (after a failed
	// attempt, or as created), or nil.
	NotBefore *time.Time `json:"not_before"`
	// LastError is the error of the latest failed release ("" for none).
	LastError string `json:"last_error,omitempty"`

	// ServerTime is the server's clock when it answered with the task (the
	// answer's Date header, whole seconds), set on the tasks that GetTask,
	// ListTasks, CreateTask, CreateTasks, UpdateTask and Complete return;
	// zero when
	// the answer had none. NotBefore is the server's time, so it is read
	// against this rather than the local clock: see NotBeforeAhead.
	ServerTime time.Time `json:"-"`
}

// NotBeforeAhead reports whether the task's NotBefore was still ahead when
// the server answered. The server keeps a NotBefore after it has passed,
// and a task whose NotBefore has passed may be taken at once. A
// NotBefore within the second of ServerTime counts as ahead (the server's
// clock was somewhere in that second). Without a ServerTime it is read
// against the local clock.
func (t Task) NotBeforeAhead() bool {
	if t.NotBefore == nil {
		return false
	}
	now := t.ServerTime
	if now.IsZero() {
		now = time.Now()
	}
	return t.NotBefore.After(now)
}

// RetryDelay is the task's retry delay: the wait after its first failed
// release.
func (t Task) RetryDelay() time.Duration {
	return time.Duration(t.RetryDelaySeconds) * time.Second
}

// Blocker is a task another task waits for, with its status.
type Blocker struct {
	TaskID string `json:"task_id"`
	Status string `json:"status"`
}

// TaskPage is one page of a task listing.
type TaskPage struct {
	Tasks []Task `json:"tasks"`
	// NextCursor is nil on the last page. A page may hold fewer tasks
	// than asked for, even none, and still have one (its reads are
	// bounded): follow it until it is nil.
	NextCursor *string `json:"next_cursor"`
}

// LockStatus answers GET /api/tasks/{id}/checkout.
type LockStatus struct {
	TaskID   string    `json:"task_id"`
	Locked   bool      `json:"locked"`
	Checkout *Checkout `json:"checkout"`
}

// Released answers a release.
type Released struct {
	TaskID      string `json:"task_id"`
	ReleasedBy  string `json:"released_by"`
	HeldSeconds int64  `json:"held_seconds"`
}

// Event is one entry of a task's audit trail.
type Event struct {
	Type    string    `json:"type"`
	TaskID  string    `json:"task_id"`
	AgentID string    `json:"agent_id"`
	RunID   string    `json:"run_id"`
	Fence   int64     `json:"fence"`
	At      time.Time `json:"at"`
	// HeldSeconds is set on every event that ends a lease.
	HeldSeconds *int64 `json:"held_seconds,omitempty"`
	// By is the agent that made the transition, or "system": an admin
	// acting for another agent is By, and AgentID the lease's holder.
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Outcome and Error are a release's: OutcomeDone or OutcomeFailed and
	// the failure's error ("" for a plain release).
	Outcome string `json:"outcome,omitempty"`
	Error   string `json:"error,omitempty"`
	// Raw is the event's JSON exactly as the server sent it, set on every
	// event the client decoded from an answer (Feed, FollowFeed, Trail,
	// Events, ...). Tools that print the server's JSON print it: encoding
	// Event again drops empty fields (reason, by, ...) and writes At
	// without its fixed milliseconds. It is never encoded itself.
	Raw json.RawMessage `json:"-"`
}

// UnmarshalJSON decodes an event and keeps its JSON in Raw.
func (e *Event) UnmarshalJSON(b []byte) error {
	type plain Event // without this method
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*e = Event(p)
	e.Raw = append(json.RawMessage(nil), b...)
	return nil
}

// Agent is a registered agent.
type Agent struct {
	AgentID         string     `json:"agent_id"`
	Name            string     `json:"name"`
	Admin           bool       `json:"admin"`
	LastHeartbeatAt *time.Time `json:"last_heartbeat_at"`
	// Alive is nil for an agent that never sent a heartbeat.
	Alive *bool `json:"alive"`
}

// Registration is a new agent with its API key, which is shown only once.
type Registration struct {
	AgentID string `json:"agent_id"`
	Name    string `json:"name"`
	Admin   bool   `json:"admin"`
	APIKey  string `json:"api_key"`
}

// Heartbeat answers a heartbeat.
type Heartbeat struct {
	AgentID   string    `json:"agent_id"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Message is an inbox message: a watched task became available
// (MessageTaskAvailable), or a lease of the caller's ended without its
// consent (MessageLeaseLost, with Reason timeout, agent_death,
// force_release or cancel; an admin's release or completion for the
// agent is a force_release).
type Message struct {
	MessageID string    `json:"message_id"`
	Type      string    `json:"type"`
	TaskID    string    `json:"task_id"`
	Reason    string    `json:"reason,omitempty"`
	At        time.Time `json:"at"`
	// Fence and RunID name the lease whose ending the message is about:
	// 0 and "" when no lease ended (a task_available with reason
	// unblocked), and on messages from before the server kept them.
	Fence int64  `json:"fence,omitempty"`
	RunID string `json:"run_id,omitempty"`
	// NotBefore is when a task_available message's task may be granted,
	// if the freeing left it waiting (a failed release's retry delay): nil
	// when it is claimable at once.
	NotBefore *time.Time `json:"not_before,omitempty"`

	// ServerTime is the server's clock when it answered with the message
	// (the answer's Date header), set by Inbox; zero when the answer had
	// none. NotBefore is read against it: see NotBeforeAhead.
	ServerTime time.Time `json:"-"`
}

// NotBeforeAhead reports whether the message's NotBefore was still ahead
// when the server answered, as Task.NotBeforeAhead does for a task.
func (m Message) NotBeforeAhead() bool {
	return Task{NotBefore: m.NotBefore, ServerTime: m.ServerTime}.NotBeforeAhead()
}

// Inbox message types.
const (
	MessageTaskAvailable = "task_available"
	MessageLeaseLost     = "lease_lost"
)

// CheckoutRequest is the body of a checkout. Every field is optional.
type CheckoutRequest struct {
	// Timeout is the lease length; zero means the server's default (30m).
	Timeout time.Duration
	Reason  string
	// RunID is the lease token. When empty the client generates one, so that
	// a retried request is recognised by the server as the same attempt.
	RunID            string
	ExpectedStatuses []string
	// Watch puts the caller on the task's watch list when it is held.
	Watch bool
	// AgentID names the agent the lease is for: for an admin, any agent.
	// The server takes the field from admins only (403 forbidden from
	// anyone else, even naming itself), so the client leaves it out when
	// it names the key's own agent, which it learns once (Whoami): the
	// same as leaving it empty.
	AgentID string
}

// MarshalJSON writes the API's body, with Timeout as a Go duration string.
func (r CheckoutRequest) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Timeout          string   `json:"timeout,omitempty"`
		Reason           string   `json:"reason,omitempty"`
		RunID            string   `json:"run_id,omitempty"`
		ExpectedStatuses []string `json:"expected_statuses,omitempty"`
		Watch            bool     `json:"watch,omitempty"`
		AgentID          string   `json:"agent_id,omitempty"`
	}{durationString(r.Timeout), r.Reason, r.RunID, r.ExpectedStatuses, r.Watch, r.AgentID})
}

// Identity is whom a key belongs to (GET /api/whoami).
type Identity struct {
	AgentID string `json:"agent_id"`
	Name    string `json:"name"`
	Admin   bool   `json:"admin"`
}

// ClaimRequest is the body of a claim. Every field is optional.
type ClaimRequest struct {
	Timeout time.Duration
	Reason  string
	// RunID is generated by the client when empty (see CheckoutRequest).
	RunID   string
	AgentID string // for an admin, any agent; the key's own agent is left out (see CheckoutRequest)
	// Queues to claim from; nil for the server's default, ["default"]. A
	// non-nil empty list (one computed, that filtered to nothing) is
	// refused, matching ErrInvalid, as the server refuses it: it does not
	// claim from the default queue.
	Queues []string
	// Wait, up to 20s, waits for a task to become available before the
	// answer is ErrNoTaskAvailable.
	Wait time.Duration
}

// MarshalJSON writes the API's body.
func (r ClaimRequest) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Timeout string   `json:"timeout,omitempty"`
		Reason  string   `json:"reason,omitempty"`
		RunID   string   `json:"run_id,omitempty"`
		AgentID string   `json:"agent_id,omitempty"`
		Queues  []string `json:"queues,omitempty"`
		Wait    string   `json:"wait,omitempty"`
	}{durationString(r.Timeout), r.Reason, r.RunID, r.AgentID, r.Queues, durationString(r.Wait)})
}

// RenewRequest is the body of a renew. RunID and Fence, when set, must
// match the live lease.
//
// A lease the caller's agent holds under another run (a process that
// restarted with a new run id) is adopted by giving its Fence and no RunID;
// the same goes for ReleaseRequest and CompleteRequest.
type RenewRequest struct {
	// Timeout is the new lease length; zero keeps the lease's own.
	Timeout time.Duration
	RunID   string
	Fence   int64
	// AgentID names the holder the request acts as: for an admin, any
	// agent (the key's own agent is left out: see CheckoutRequest). The
	// event's By is then the admin; a release or completion made for the
	// holder tells it (a lease_lost message, reason force_release).
	AgentID string
}

// MarshalJSON writes the API's body.
func (r RenewRequest) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Timeout string `json:"timeout,omitempty"`
		RunID   string `json:"run_id,omitempty"`
		Fence   int64  `json:"fence,omitempty"`
		AgentID string `json:"agent_id,omitempty"`
	}{durationString(r.Timeout), r.RunID, r.Fence, r.AgentID})
}

// ReleaseRequest is the body of a release.
type ReleaseRequest struct {
	RunID string `json:"run_id,omitempty"`
	Fence int64  `json:"fence,omitempty"`
	// Force ends whoever holds the task (admins only).
	Force  bool   `json:"force,omitempty"`
	Reason string `json:"reason,omitempty"`
	// AgentID is the holder the request acts as (see RenewRequest).
	AgentID string `json:"agent_id,omitempty"`
	// Outcome says how the attempt went: "" (a plain release, not a
	// failure), OutcomeDone or OutcomeFailed. Fail sets it.
	Outcome string `json:"outcome,omitempty"`
	// Error says what went wrong, up to MaxErrorLen bytes; only with
	// Outcome OutcomeFailed. It becomes the task's LastError.
	Error string `json:"error,omitempty"`
}

// CompleteRequest is the body of a completion.
type CompleteRequest struct {
	RunID string `json:"run_id,omitempty"`
	Fence int64  `json:"fence,omitempty"`
	// AgentID is the holder the request acts as (see RenewRequest).
	AgentID string `json:"agent_id,omitempty"`
}

// CreateTaskRequest is the body of a task creation.
type CreateTaskRequest struct {
	TaskID      string `json:"task_id,omitempty"` // generated by the server when empty
	Title       string `json:"title,omitempty"`
	Description string `json:"description,omitempty"`
	Queue       string `json:"queue,omitempty"`    // default "default"
	Priority    *int   `json:"priority,omitempty"` // 0 to 9, higher first; default 5
	// Metadata is a JSON object of up to 4 KiB.
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// BlockedBy names up to 20 existing tasks this one waits for: it is
	// blocked until they are all done.
	BlockedBy []string `json:"blocked_by,omitempty"`
	// MaxAttempts is 1 to 100 (server default 5).
	MaxAttempts *int `json:"max_attempts,omitempty"`
	// RetryDelay is 0 to 1h (server default 10s); nil leaves the default.
	RetryDelay *time.Duration `json:"-"`
	// NotBefore, when set, is the time before which the task is not
	// handed out.
	NotBefore *time.Time `json:"not_before,omitempty"`
}

// MarshalJSON writes the API's body, with RetryDelay as a Go duration
// string.
func (r CreateTaskRequest) MarshalJSON() ([]byte, error) {
	type plain CreateTaskRequest
	return json.Marshal(struct {
		plain
		RetryDelay *string `json:"retry_delay,omitempty"`
	}{plain(r), optDuration(r.RetryDelay)})
}

// BatchResult is one task of CreateTasks: Outcome "created", or "exists"
// with the task that already had the id. Task.Blocks holds at most 100
// ids; MoreBlocks says the task blocks more (GetTask shows them all).
type BatchResult struct {
	TaskID     string `json:"task_id"`
	Outcome    string `json:"outcome"`
	Task       Task   `json:"task"`
	MoreBlocks bool   `json:"more_blocks,omitempty"`
}

// UpdateTaskRequest is a PATCH of a task: nil fields are left as they are.
type UpdateTaskRequest struct {
	Title       *string         `json:"title,omitempty"`
	Description *string         `json:"description,omitempty"`
	Metadata    json.RawMessage `json:"metadata,omitempty"`
	Queue       *string         `json:"queue,omitempty"`
	Priority    *int            `json:"priority,omitempty"`
	// Status "cancelled" (which ends a live lease: its holder or an admin
	// only) or "todo" (reopens a done, cancelled or failed task, with its
	// attempts back to 0 and its NotBefore cleared).
	Status string `json:"status,omitempty"`
	// BlockedBy, when not nil, replaces the tasks this one waits for; a
	// pointer to an empty (or nil) list clears them. Only a todo or blocked task's
	// may change (else ErrInvalidTransition).
	BlockedBy *[]string `json:"blocked_by,omitempty"`
	// MaxAttempts is 1 to 100.
	MaxAttempts *int `json:"max_attempts,omitempty"`
	// RetryDelay is 0 to 1h.
	RetryDelay *time.Duration `json:"-"`
	// NotBefore, when set, is the new time before which the task is not
	// handed out; ClearNotBefore removes it (it wins over NotBefore).
	NotBefore      *time.Time `json:"-"`
	ClearNotBefore bool       `json:"-"`
	// IfVersion, when non-zero, is sent as If-Match: the change is made
	// only if the task is still at that version (else ErrVersionMismatch).
	IfVersion int64 `json:"-"`
}

// MarshalJSON writes the API's body: RetryDelay as a Go duration string,
// not_before as a time, or null with ClearNotBefore, and a BlockedBy
// pointing to a nil list as [].
func (r UpdateTaskRequest) MarshalJSON() ([]byte, error) {
	type plain UpdateTaskRequest
	var notBefore json.RawMessage
	switch {
	case r.ClearNotBefore:
		notBefore = json.RawMessage("null")
	case r.NotBefore != nil:
		b, err := json.Marshal(r.NotBefore)
		if err != nil {
			return nil, err
		}
		notBefore = b
	}
	if r.BlockedBy != nil && *r.BlockedBy == nil {
		// A pointer to a nil list clears the blockers, as one to an
		// empty list does: null would leave them as they are.
		r.BlockedBy = &[]string{}
	}
	return json.Marshal(struct {
		plain
		RetryDelay *string         `json:"retry_delay,omitempty"`
		NotBefore  json.RawMessage `json:"not_before,omitempty"`
	}{plain(r), optDuration(r.RetryDelay), notBefore})
}

// ListTasksRequest filters a task listing.
type ListTasksRequest struct {
	Status string // empty: every status
	Queue  string // empty: every queue
	Limit  int    // 0: the server's default (100)
	Cursor string
}

// CreateAgentRequest is the body of an agent registration (admins only).
type CreateAgentRequest struct {
	Name    string `json:"name"`
	Admin   bool   `json:"admin,omitempty"`
	AgentID string `json:"agent_id,omitempty"`
}

// optDuration is *d as a Go duration string ("0s" for zero), or nil.
func optDuration(d *time.Duration) *string {
	if d == nil {
		return nil
	}
	s := d.String()
	return &s
}

func durationString(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}
