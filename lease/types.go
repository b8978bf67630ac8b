package lease

import (
	"encoding/json"
	"time"
)

// Status is a task's state.
type Status string

// Task statuses.
const (
	StatusTodo       Status = "todo"
	StatusInProgress Status = "in_progress"
	StatusDone       Status = "done"
	StatusCancelled  Status = "cancelled"
	// StatusBlocked: at least one of the task's blockers is not done
	// (deps.go). Claim never hands it out; a named checkout answers
	// BlockedError.
	StatusBlocked Status = "blocked"
	// StatusFailed: the task used up its attempts (MaxAttempts). Terminal,
	// like done, until a PATCH reopens it.
	StatusFailed Status = "failed"
)

// Valid reports whether s is one of the statuses.
func (s Status) Valid() bool {
	switch s {
	case StatusTodo, StatusInProgress, StatusDone, StatusCancelled, StatusBlocked, StatusFailed:
		return true
	}
	return false
}

// Statuses lists every status in the order that listings walk them.
// The statuses of the work graph come last, so that a listing cursor
// issued before them still names the status it named.
var Statuses = []Status{StatusTodo, StatusInProgress, StatusDone, StatusCancelled, StatusBlocked, StatusFailed}

// Checkout is a live lease on a task.
type Checkout struct {
	TaskID    string
	AgentID   string
	AgentName string
	RunID     string
	Fence     int64
	LockedAt  time.Time
	Timeout   time.Duration
	ExpiresAt time.Time
	Reason    string
	// The task's title, queue and priority when the lease was granted (or,
	// for a lease read back, as the task is).
	Title    string
	Queue    string
	Priority int
	// Attempt is which attempt of the task this lease is: 1 for the first
	// grant since the task was created or reopened.
	Attempt int
}

// Remaining is how long the lease has left at now, never negative.
func (c Checkout) Remaining(now time.Time) time.Duration {
	if d := c.ExpiresAt.Sub(now); d > 0 {
		return d
	}
	return 0
}

// Task is a unit of work that agents check out.
type Task struct {
	TaskID      string
	Title       string
	Description string
	// Queue is the queue the task is claimed from; Priority orders it there
	// (0 to 9, higher first).
	Queue    string
	Priority int
	// Metadata is a JSON object of the orchestrator's own, as given.
	Metadata json.RawMessage
	// Version grows with every change of the task item; PATCH's If-Match.
	Version     int64
	Status      Status
	CreatedAt   time.Time
	StartedAt   *time.Time
	CompletedAt *time.Time
	// Checkout is the live lease, or nil. A lease that has expired or whose
	// holder is dead is never reported here, whether or not the sweep has run.
	Checkout *Checkout

	// The work graph (deps.go). BlockedBy is every blocker with its
	// status now; Blocks the ids of the tasks that name this one.
	BlockedBy []Blocker
	Blocks    []string
	// Attempts counts the grants since the task was created or reopened;
	// at MaxAttempts a failed attempt makes the task failed.
	Attempts    int
	MaxAttempts int
	// RetryDelay is the wait after the first failed release; it doubles
	// with each failure since the last reopen, up to MaxRetryWait.
	RetryDelay time.Duration
	// NotBefore is when the task may be granted again, or nil.
	NotBefore *time.Time
	// LastError is the error of the latest failed release ("" for none).
	LastError string
}

// Blocker is a task another task is blocked by, with its status.
type Blocker struct {
	TaskID string
	Status Status
}

// Duration is CompletedAt - StartedAt for a completed task.
func (t Task) Duration() (time.Duration, bool) {
	if t.StartedAt == nil || t.CompletedAt == nil {
		return 0, false
	}
	return t.CompletedAt.Sub(*t.StartedAt), true
}

// TaskPage is one page of a task listing.
type TaskPage struct {
	Tasks []Task
	// NextCursor is empty on the last page.
	NextCursor string
}

// EventType names a lease transition.
type EventType string

// Event types. Release, Complete, Timeout, AgentDeath and ForceRelease end a
// lease and carry Held.
const (
	EventCheckout     EventType = "checkout"
	EventRenew        EventType = "renew"
	EventRelease      EventType = "release"
	EventComplete     EventType = "complete"
	EventTimeout      EventType = "timeout"
	EventAgentDeath   EventType = "agent_death"
	EventForceRelease EventType = "force_release"
	// EventCancel records a PATCH to status cancelled. When a live lease
	// was on the task (cancelled by its holder or an admin) it ends that
	// lease and carries Held; else it names no lease (no agent, fence 0).
	EventCancel EventType = "cancel"
	// EventUnblocked: the task's last blocker was completed, and the task
	// became todo.
	EventUnblocked EventType = "unblocked"
	// EventFailed: an attempt failed at the task's MaxAttempts, and the
	// task became failed; the reason is how the attempt ended.
	EventFailed EventType = "failed"
)

// EndsLease reports whether an event of this type may end a lease (a
// cancel does when it names one: see Event.EndsLease).
func (t EventType) EndsLease() bool {
	switch t {
	case EventRelease, EventComplete, EventTimeout, EventAgentDeath, EventForceRelease, EventCancel:
		return true
	}
	return false
}

// Event is one entry of a task's audit trail.
type Event struct {
	Seq     int64
	Type    EventType
	TaskID  string
	AgentID string
	RunID   string
	Fence   int64
	At      time.Time
	// Held is how long the lease was held; set on every event that ends one.
	Held *time.Duration
	// By is who caused the transition: an agent id, or "system" for the sweep
	// and for takeovers.
	By     string
	Reason string
	// Outcome and Error are a release's: OutcomeDone or OutcomeFailed,
	// and the failure's error ("" for none).
	Outcome ReleaseOutcome
	Error   string
}

// EndsLease reports whether e ended a lease: every event of a type that
// may, but a cancel of a task that had none (fence 0).
func (e Event) EndsLease() bool { return e.Type.EndsLease() && e.Fence != 0 }

// ReleaseOutcome says how the attempt a release ends went.
type ReleaseOutcome string

const (
	// OutcomeNone is a plain release: not a failure.
	OutcomeNone ReleaseOutcome = ""
	// OutcomeDone is a release whose attempt went well (not a failure).
	OutcomeDone ReleaseOutcome = "done"
	// OutcomeFailed is a failed attempt: it counts towards MaxAttempts
	// and delays the task's next grant by its retry delay.
	OutcomeFailed ReleaseOutcome = "failed"
)

// BySystem is the Event.By of transitions made by the service itself.
const BySystem = "system"

// Agent is a registered agent.
type Agent struct {
	AgentID   string
	Name      string
	Admin     bool
	CreatedAt time.Time
	// LastHeartbeatAt and Alive are nil for an agent that never sent a
	// heartbeat: it is not watched, and its leases end only by time.
	LastHeartbeatAt *time.Time
	Alive           *bool
}

// Registration is a newly registered agent with its API key, which is shown
// once and stored only as a hash.
type Registration struct {
	Agent
	APIKey string
}

// Principal is an authenticated caller.
type Principal struct {
	AgentID string
	Name    string
	Admin   bool
}

// Heartbeat is the answer to a heartbeat.
type Heartbeat struct {
	AgentID   string
	ExpiresAt time.Time
}

// Message is an inbox message: a watched task became available
// (task_available), or the agent's lease ended without its consent
// (lease_lost).
type Message struct {
	MessageID string
	Type      string // MessageTaskAvailable or MessageLeaseLost
	TaskID    string
	// Reason is the ending's event type: for task_available what freed
	// the task; for lease_lost timeout, agent_death, force_release or
	// cancel (a release or completion an admin made for the holder is a
	// force_release to it).
	Reason string
	At     time.Time
	// Fence and RunID name the ended lease (0 and "" where the message
	// does not carry them: task_available messages written before they
	// were kept).
	Fence int64
	RunID string
	// NotBefore is, on a task_available message, when the task may be
	// granted, if the freeing left it waiting (a failed release's retry
	// delay, a not_before set on the task): nil when it is claimable at
	// once.
	NotBefore *time.Time
}

// Inbox message types.
const (
	// MessageTaskAvailable tells a watcher that a task became available.
	MessageTaskAvailable = "task_available"
	// MessageLeaseLost tells a former holder that its lease ended other
	// than by its own release, completion or cancel (one an admin made
	// for it is not its own).
	MessageLeaseLost = "lease_lost"
)

// Released is the answer to a release.
type Released struct {
	TaskID     string
	ReleasedBy string
	Held       time.Duration
}

// SweepResult counts what one sweep did.
type SweepResult struct {
	Timeouts    int // leases ended by expiry
	AgentDeaths int // leases ended because their holder died
	// Ready counts the tasks whose not_before passed that the sweep
	// ranked by priority again (claim.go, "Delays").
	Ready int
}

// Params of the operations. Zero values mean "the default" where the
// operation has one.

type RegisterParams struct {
	AgentID string // generated when empty
	Name    string
	Admin   bool
}

type CreateTaskParams struct {
	TaskID      string // generated when empty
	Title       string
	Description string
	Queue       string // default DefaultQueue
	Priority    *int   // 0..9, default DefaultPriority
	Metadata    json.RawMessage
	// BlockedBy names up to MaxBlockers existing tasks; the task is
	// blocked until every one is done.
	BlockedBy []string
	// MaxAttempts is 1..MaxMaxAttempts, default DefaultMaxAttempts.
	MaxAttempts *int
	// RetryDelay is 0..MaxRetryWait, default DefaultRetryDelay.
	RetryDelay *time.Duration
	// NotBefore, when set, keeps the task from being granted until then.
	NotBefore *time.Time
}

// BatchOutcome says what a batch create did with one task.
type BatchOutcome string

const (
	BatchCreated BatchOutcome = "created"
	BatchExists  BatchOutcome = "exists"
)

// BatchResult is one task of a batch create: created now, or there already
// (Task is then the existing task).
type BatchResult struct {
	TaskID  string
	Outcome BatchOutcome
	// Task.Blocks holds at most MaxBatchBlocks ids, the first in id order;
	// MoreBlocks says the task blocks more (GET shows them all).
	Task       Task
	MoreBlocks bool
}

// UpdateTaskParams is a PATCH of a task: nil fields are left as they are.
type UpdateTaskParams struct {
	TaskID string
	// The caller, and whether it is an admin (cancelling a task with a live
	// lease needs its holder or an admin).
	AgentID     string
	Admin       bool
	Title       *string
	Description *string
	Metadata    json.RawMessage // nil: unchanged
	Queue       *string
	Priority    *int
	// Status may be cancelled or todo (reopen a done or cancelled task).
	Status *Status
	// IfVersion, when non-zero, makes the change a compare-and-set on the
	// task's version (ErrVersionMismatch).
	IfVersion int64
	// BlockedBy, when not nil, replaces the task's blockers (an empty
	// list: none). Only a todo or blocked task may change them.
	BlockedBy   *[]string
	MaxAttempts *int
	RetryDelay  *time.Duration
	// SetNotBefore says NotBefore is given: a time, or nil to clear it.
	SetNotBefore bool
	NotBefore    *time.Time
}

type ListTasksParams struct {
	Status Status // empty: every status
	Queue  string // empty: every queue
	Limit  int    // 1..1000, default 100
	Cursor string // opaque, from TaskPage.NextCursor
}

type CheckoutParams struct {
	TaskID    string
	AgentID   string
	AgentName string
	RunID     string        // generated when empty
	Timeout   time.Duration // default 30m, 1s..24h
	Reason    string
	// ExpectedStatuses defaults to todo and in_progress.
	ExpectedStatuses []Status
	// Watch puts the caller on the task's watch list when the task is held
	// by someone else.
	Watch bool
	// CreateIfMissing creates an unknown task instead of failing, when
	// ExpectedStatuses holds todo (else the checkout could not take it).
	CreateIfMissing bool
	// By is the agent that asked for the lease when it is not AgentID (an
	// admin acting for it): the checkout event names it as by.
	By string

	// queues, when set (by claim), confines the grant to tasks in them.
	queues []string
	// reopening is the finished task as read, every blocker it names
	// found done: the grant reopens it (see reopenable).
	reopening *taskItem
	// unblocking is the blocked task as read, every blocker it waits on
	// found done: the grant unblocks it in the same write (unblockCond).
	unblocking *taskItem
}

type RenewParams struct {
	TaskID  string
	AgentID string
	RunID   string        // optional: must match when given
	Fence   int64         // optional: must match when non-zero
	Timeout time.Duration // default: the lease's own timeout
	// By is the agent that asked when it is not AgentID (an admin acting
	// for the holder): the renew event names it as by.
	By string
}

type ReleaseParams struct {
	TaskID  string
	AgentID string // the caller
	RunID   string // optional
	Fence   int64  // optional
	// Force ends whoever's lease it is (admins only; the caller checks the
	// role). It is audited as force_release.
	Force  bool
	Reason string
	// Outcome says how the attempt went; OutcomeFailed counts a failure
	// (Error, up to MaxErrorLen, says what went wrong).
	Outcome ReleaseOutcome
	Error   string
	// By is the agent that asked when it is not AgentID (an admin acting
	// for the holder): the release event names it as by, and the holder
	// is told (lease_lost). A force release is By's act, else AgentID's.
	By string
}

type CompleteParams struct {
	TaskID  string
	AgentID string
	RunID   string
	Fence   int64
	// By is the agent that asked when it is not AgentID, as in
	// ReleaseParams.
	By string
}

type ClaimParams struct {
	AgentID   string
	AgentName string
	RunID     string
	Timeout   time.Duration
	Reason    string
	// Queues to claim from; default [DefaultQueue].
	Queues []string
	// Wait, up to MaxClaimWait, waits for a task to become available.
	Wait time.Duration
	// By is the agent that asked when it is not AgentID, as in
	// CheckoutParams.
	By string
}

// Limits.
const (
	DefaultTimeout      = 30 * time.Minute
	MinTimeout          = time.Second
	MaxTimeout          = 24 * time.Hour
	DefaultHeartbeatTTL = 90 * time.Second
	MinHeartbeatTTL     = time.Second
	MaxHeartbeatTTL     = time.Hour
	DefaultListLimit    = 100
	MaxListLimit        = 1000
	// MaxInbox bounds the messages one read of an inbox answers: the
	// oldest ones; deleting them shows the next.
	MaxInbox     = 1000
	MaxTitleLen  = 1024
	MaxReasonLen = 1024
	MaxNameLen   = 256
	// MaxWatchers bounds a task's watch list, so that no number of
	// watchers can grow its item towards DynamoDB's 400 KB limit.
	MaxWatchers = 100

	DefaultQueue      = "default"
	DefaultPriority   = 5
	MaxPriority       = 9
	MaxDescriptionLen = 8 << 10
	MaxMetadataLen    = 4 << 10
	// MaxMetadataDepth is how deeply metadata may nest objects and arrays
	// (the metadata object itself is the first level).
	MaxMetadataDepth = 32
	MaxBatch         = 25
	MaxClaimQueues   = 10
	MaxClaimWait     = 20 * time.Second

	// The work graph.
	MaxBlockers = 20
	// MaxDependents bounds the tasks that may name one task in blocked_by,
	// so that its blocks, which every answer of it lists, stays small.
	MaxDependents = 1000
	// MaxBatchBlocks bounds the ids of blocks in one result of a batch
	// create: 25 tasks that exist, each with the largest text and
	// blocking MaxDependents tasks of the longest ids, would take the
	// answer past the 6 MB a Lambda can return; with at most 100 each
	// they stay under 4 MB (at 7 bytes a byte of free text, 2 of the rest).
	MaxBatchBlocks     = 100
	DefaultMaxAttempts = 5
	MaxMaxAttempts     = 100
	DefaultRetryDelay  = 10 * time.Second
	// MaxRetryWait caps both a task's retry delay and the wait it grows
	// to (retry delay x 2^(failures-1)).
	MaxRetryWait = time.Hour
	// MaxErrorLen bounds a failed release's error (2 KiB).
	MaxErrorLen = 2 << 10
)
