package mcpserver

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/checkout-dev/checkout/client"
	"github.com/checkout-dev/checkout/lease"
)

// The tools' descriptions, and their arguments' and results' schemas: what
// the model reads. A number in them that the service decides (a default, a
// bound) is written as a placeholder such as {default_list_limit}, which
// New fills from package lease, where the service's own limits are
// stated; see limitsText.

const instructions = `These tools coordinate work between many agents sharing one pool of tasks.
Before working on a task, take it with checkout_task (a task you were given) or claim_task
(any open task); list_tasks and get_task show what there is. Only work on a task while you hold
its lease. If checkout_task answers acquired=false with holder, another agent holds the task: do
not work on it; pick another task, or watch it (watch_task, or checkout_task with watch=true) and
look in read_inbox later. If it answers held_by_you=true, your agent took the task in an earlier run
(before a restart): checkout_task with adopt=true continues it here. When done, call
complete_task; if the work failed (an error you cannot fix now), call fail_task with the error, so
the task is retried later or marked failed; if you merely stop, call release_task. A task may be
blocked (it waits for other tasks: blocked_by) or not ready (not_before): checkout_task answers
acquired=false with that code; do not work on it, pick another. Long work: call renew_task before the lease expires. Every result has ok, message and, on failure, code: read message for what to do next.
An argument given as null is the same as one left out.`

const descCheckout = `Take the lease on one task before you start working on it, so that no other agent works on it at the same time.
Answers acquired=true with your lease and the task's title (expires_at is when the lease ends unless you renew it with renew_task; when earlier attempts of the task failed, last_error says what the latest one failed with), or acquired=false with holder: another agent already holds the task. acquired=false is a normal answer, not an error: do NOT work on that task; pick another task (claim_task gives you one), or, if you need this very task, call it again with watch=true so the task's release is announced in read_inbox, and try again later.
held_by_you=true means your own agent holds the task under another run, usually this server before a restart: call checkout_task again with adopt=true to continue that lease in this session, unless another session of yours is still working on it.
Calling it again for a task you already hold returns the same lease. acquired=false with a code is also a normal answer, for a task nobody may take now: code blocked (blocked_by lists the unfinished tasks it waits for), not_ready (not_before says when it may be taken) or status_mismatch (the task is done, cancelled or failed): do not work on it; pick another task. Fails (ok=false) for an unknown task id.`

const descClaim = `Take the lease on the next open task when you have no particular task to work on: the highest-priority, then oldest, open task of queues (default ["{default_queue}"]; name the queues of the work you do). wait (up to {max_claim_wait}) waits that long for a task to become available. Answers acquired=true with the lease, its task_id, title, queue and priority (work on that task; when earlier attempts of it failed, last_error says what the latest one failed with), or acquired=false when no task is available right now: claim again with wait, watch a task, or stop.`

const descCreateTask = `Create a task for yourself or other agents to work on: a title, optionally a description (up to {max_description}), a queue (default "{default_queue}": agents claim from the queues they name), a priority (0 to {max_priority}, higher is claimed first; default {default_priority}) and metadata (a JSON object of up to {max_metadata}). blocked_by (up to {max_blockers} task ids) makes it wait: nobody can take it until those tasks are done. max_attempts (1 to {max_max_attempts}, default {default_max_attempts}) is how many times it may be taken (every checkout or claim is an attempt): an attempt that fails once that many were made fails the task; retry_delay (default {default_retry_delay}, up to {max_retry_wait}) is the wait after a failed attempt, doubling with each further one; not_before (RFC 3339) is a time before which nobody may take it. Give task_id to make retrying safe: a task with that id that exists already is reported, not created twice.`

const descUpdateTask = `Change a task's title, description, queue, priority, metadata, blocked_by (replaces the list; [] clears it; only on a todo or blocked task), max_attempts, retry_delay or not_before ("" clears it), or its status: "cancelled" (nobody should work on it; if it is checked out, only its holder or an admin may, and the lease ends) or "todo" (reopen a done, cancelled or failed task; its attempts start again). Fields you leave out, or give as null, stay as they are (give at least one); a checked-out task keeps its lease. Give version (from get_task) to change it only if nobody changed it since (else code version_mismatch: read it again).`

const descRenew = `Extend your lease on a task you hold, before it expires, when your work takes longer than the lease timeout. Renew well before expires_at (for example at a third of the timeout). Optionally give a new timeout. Give fence only to adopt a lease your agent took in an earlier run (the fence checkout_task or task_status showed). Fails (ok=false, code not_holder or not_checked_out) when you no longer hold the task: your lease expired or was released, and another agent may now be working on it; stop working on it and check task_status.`

const descComplete = `Mark a task you hold as done when you have finished the work. This ends your lease and the task is never handed out again. Give fence only for a lease of your agent's earlier run. Fails (ok=false) when you no longer hold the task (your lease expired or someone else holds it): check task_status before assuming your work counts.`

const descRelease = `Give a task back without finishing it, for example when you are blocked or stop working. The task becomes open again at once and agents watching it are told. Give a short reason. If the work failed, call fail_task instead. Give fence only for a lease of your agent's earlier run. Fails (ok=false) when you do not hold the task.`

const descFail = `Give a task you hold back because the work failed (tests fail, a tool errors, the input is broken), with error saying what went wrong (up to {max_error}; it becomes the task's last_error for whoever tries next). This ends your lease as a failed attempt: the task waits its retry delay before anyone can take it again, and once it has used its max_attempts it is failed for good. The answer says which. Use release_task instead when you merely stop without the work having failed. Give fence only for a lease of your agent's earlier run. Fails (ok=false) when you do not hold the task.`

const descStatus = `Check whether a task is checked out right now, by whom, and how long its lease has left; held_by_this_session says whether it is the lease this session works under. Use it before deciding to wait for a task, or to confirm you still hold one. Read-only.`

const descListCheckouts = `List the live leases, all or one agent's (agent_id), up to limit (default {default_list_limit}). Use it to see which tasks are taken and by whom, or which tasks you still hold. Read-only.`

const descListTasks = `List tasks, optionally only one status (todo = open, blocked = waits for other tasks, in_progress = someone works on it, done, cancelled, failed = used up its attempts), up to limit per page (default {default_list_limit}), with each task's title and live lease. Use it to find a task to work on; then take it with checkout_task. Pass next_cursor as cursor for the next page. A call reads up to {list_reads} of the server's pages to fill the page (each is bounded, so may hold few tasks, even none): a page may still hold fewer than limit tasks, even none, and have a next_cursor. Read-only.`

const descGetTask = `Show one task: its title, status, times, its live lease if any, the tasks it waits for (blocked_by, with their statuses) and that wait for it (blocks), its attempts, not_before and last_error. Use it to read what a task is before or after taking it. Read-only.`

const descWatch = `Ask to be told when a task that another agent holds becomes available (released, its lease ends, or, for a blocked task, its last blocker is done). One task_available message then arrives in read_inbox; the watch is used up. Meanwhile work on something else.`

const descInbox = `Read your inbox, oldest first, up to limit (default {default_list_limit}): one task_available message for each watched task that became available, and one lease_lost message for each lease of yours that ended without you (reason timeout, agent_death, force_release or cancel; an admin's release or completion for you is a force_release). For task_available: try checkout_task on its task_id (someone may have taken it first), unless its reason is failed: that task used its attempts and nobody can take it until it is reopened. For lease_lost: stop working on that task, your lease on it (fence) is gone. Then ack_message its message_id so it is not shown again. Read-only.`

const descAck = `Delete an inbox message you have acted on, by its message_id from read_inbox, so that it is not shown again.`

const descHeartbeat = `Tell the service you are still alive. Once you have sent one heartbeat you are watched: if no heartbeat arrives within its ttl (default {default_ttl}), you are considered dead and all your leases end so other agents can take your tasks. Send one every ttl/3 while you work, or never send any and rely on lease timeouts alone.`

// Outcome is in every tool's result.
type Outcome struct {
	OK      bool   `json:"ok" jsonschema:"true when the call did what it was asked; false when it failed: see code and message"`
	Code    string `json:"code,omitempty" jsonschema:"when ok is false: the API's error code (task_not_found, not_holder, not_checked_out, version_mismatch, invalid_dependency, dependency_cycle, forbidden, unavailable = the service cannot answer now: try again later, ...) or invalid_arguments, unreachable, undecided (the request was sent but its answer was lost, so it may have taken effect: the message says what to call next), not_a_checkout_server, unauthorized, cancelled (the call was cancelled before it finished), error (a failure without a code of its own); with ok true and acquired false, why checkout_task or claim_task could not take the task: blocked, not_ready, status_mismatch, or not_live (it was granted, but your agent is dead by heartbeat, or another lease took it over at once: do not work on it; call heartbeat, then take a task again; or, for claim_task after a claim whose answer was lost, that claim's lease has ended since: claim again)"`
	Message string `json:"message" jsonschema:"what happened and what to do next"`
	// Holder is the lease in the way, on a denial or a not_holder failure.
	Holder *client.Checkout `json:"holder,omitempty" jsonschema:"the lease that holds the task, when it is not yours"`
	// BlockedBy and NotBefore explain a blocked or not_ready answer.
	BlockedBy []client.Blocker `json:"blocked_by,omitempty" jsonschema:"with code blocked: the tasks it waits for that are not done, with their statuses"`
	NotBefore *time.Time       `json:"not_before,omitempty" jsonschema:"with code not_ready: the time before which the task cannot be taken"`
}

func (o *Outcome) outcome() *Outcome { return o }

// CheckoutInput is checkout_task's input.
type CheckoutInput struct {
	TaskID  string `json:"task_id" jsonschema:"the id of the task to take"`
	Timeout string `json:"timeout,omitempty" jsonschema:"lease length in whole seconds, as a Go duration such as 30m or 2h ({min_timeout} to {max_timeout}); default {default_timeout}"`
	Reason  string `json:"reason,omitempty" jsonschema:"what you are going to do, shown to other agents"`
	Watch   bool   `json:"watch,omitempty" jsonschema:"when the task is held by another agent (or blocked), get an inbox message once it is released (or unblocked); watching in the answer says whether you got on its watch list"`
	Adopt   bool   `json:"adopt,omitempty" jsonschema:"when your own agent holds the task under another run (held_by_you), continue that lease in this session"`
}

// ClaimInput is claim_task's input.
type ClaimInput struct {
	Timeout string   `json:"timeout,omitempty" jsonschema:"lease length in whole seconds, as a Go duration such as 30m or 2h ({min_timeout} to {max_timeout}); default {default_timeout}"`
	Reason  string   `json:"reason,omitempty" jsonschema:"what you are going to do, shown to other agents"`
	Queues  []string `json:"queues,omitempty" jsonschema:"the queues to claim from; default [\"{default_queue}\"]"`
	Wait    string   `json:"wait,omitempty" jsonschema:"wait up to this long for a task (a Go duration, up to {max_claim_wait}); default: answer at once"`
}

// CreateTaskInput is create_task's input.
type CreateTaskInput struct {
	TaskID      string   `json:"task_id,omitempty" jsonschema:"the task's id; generated when empty"`
	Title       string   `json:"title,omitempty" jsonschema:"what the task is"`
	Description string   `json:"description,omitempty" jsonschema:"more about it, up to {max_description}"`
	Queue       string   `json:"queue,omitempty" jsonschema:"the queue agents claim it from; default \"{default_queue}\""`
	Priority    *int     `json:"priority,omitempty" jsonschema:"0 to {max_priority}, higher is claimed first; default {default_priority}"`
	Metadata    Metadata `json:"metadata,omitempty" jsonschema:"a JSON object of your own, up to {max_metadata}"`
	BlockedBy   []string `json:"blocked_by,omitempty" jsonschema:"ids of up to {max_blockers} tasks this one waits for: nobody can take it until they are all done"`
	MaxAttempts *int     `json:"max_attempts,omitempty" jsonschema:"how many times the task may be taken (every checkout or claim is an attempt): an attempt that fails once that many were made fails the task; 1 to {max_max_attempts}, default {default_max_attempts}"`
	RetryDelay  string   `json:"retry_delay,omitempty" jsonschema:"wait after a failed attempt, doubling with each further one, as a Go duration 0s to {max_retry_wait}; default {default_retry_delay}"`
	NotBefore   string   `json:"not_before,omitempty" jsonschema:"an RFC 3339 time (2026-03-20T15:00:00Z) before which nobody may take it"`
}

// Metadata is a tool's metadata argument: a JSON object whose numbers
// are kept as sent (json.Number), so that the server judges them, not a
// float that rounded them first.
type Metadata map[string]any

// UnmarshalJSON decodes m keeping its numbers' digits.
func (m *Metadata) UnmarshalJSON(b []byte) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v map[string]any
	if err := d.Decode(&v); err != nil {
		return err
	}
	*m = v
	return nil
}

// UpdateTaskInput is update_task's input.
type UpdateTaskInput struct {
	TaskID      string    `json:"task_id" jsonschema:"the task to change"`
	Title       *string   `json:"title,omitempty" jsonschema:"the new title"`
	Description *string   `json:"description,omitempty" jsonschema:"the new description"`
	Queue       *string   `json:"queue,omitempty" jsonschema:"move it to this queue"`
	Priority    *int      `json:"priority,omitempty" jsonschema:"0 to {max_priority}, higher is claimed first"`
	Metadata    Metadata  `json:"metadata,omitempty" jsonschema:"replaces its metadata: a JSON object"`
	Status      string    `json:"status,omitempty" jsonschema:"cancelled, or todo to reopen a done, cancelled or failed task"`
	BlockedBy   *[]string `json:"blocked_by,omitempty" jsonschema:"replaces the ids of the tasks it waits for (up to {max_blockers}); [] clears them; only on a todo or blocked task"`
	MaxAttempts *int      `json:"max_attempts,omitempty" jsonschema:"how many times the task may be taken (every checkout or claim is an attempt): an attempt that fails once that many were made fails the task; 1 to {max_max_attempts}"`
	RetryDelay  string    `json:"retry_delay,omitempty" jsonschema:"wait after a failed attempt, as a Go duration 0s to {max_retry_wait}"`
	NotBefore   *string   `json:"not_before,omitempty" jsonschema:"an RFC 3339 time before which nobody may take it; \"\" clears it"`
	Version     *int64    `json:"version,omitempty" jsonschema:"change it only if its version (from get_task, 1 or more) is still this"`
}

// LeaseInput names a lease: the task, and optionally the fence of a lease
// of an earlier run of the agent.
type LeaseInput struct {
	TaskID string `json:"task_id" jsonschema:"the task whose lease you hold"`
	Fence  *int64 `json:"fence,omitempty" jsonschema:"only to adopt a lease your agent took in an earlier run: that lease's fence (1 or more)"`
}

// RenewInput is renew_task's input.
type RenewInput struct {
	LeaseInput
	Timeout string `json:"timeout,omitempty" jsonschema:"new lease length from now in whole seconds, as a Go duration such as 30m; default the lease's own"`
}

// ReleaseInput is release_task's input.
type ReleaseInput struct {
	LeaseInput
	Reason string `json:"reason,omitempty" jsonschema:"why you give it back"`
}

// FailInput is fail_task's input.
type FailInput struct {
	LeaseInput
	Error string `json:"error" jsonschema:"what went wrong, up to {max_error}: the next agent reads it as the task's last_error"`
}

// TaskInput names one task.
type TaskInput struct {
	TaskID string `json:"task_id" jsonschema:"the task's id"`
}

// ListCheckoutsInput is list_checkouts' input.
type ListCheckoutsInput struct {
	AgentID string `json:"agent_id,omitempty" jsonschema:"only this agent's leases; empty for all"`
	Limit   *int   `json:"limit,omitempty" jsonschema:"at most this many leases, 1 to {max_list_limit}; default {default_list_limit}"`
}

// ListTasksInput is list_tasks' input.
type ListTasksInput struct {
	Status string `json:"status,omitempty" jsonschema:"only tasks in this status: todo, blocked, in_progress, done, cancelled or failed; empty for all"`
	Queue  string `json:"queue,omitempty" jsonschema:"only tasks in this queue; empty for all"`
	Limit  *int   `json:"limit,omitempty" jsonschema:"page size, 1 to {max_list_limit}; default {default_list_limit}"`
	Cursor string `json:"cursor,omitempty" jsonschema:"next_cursor of the previous page"`
}

// InboxInput is read_inbox's input.
type InboxInput struct {
	Limit *int `json:"limit,omitempty" jsonschema:"at most this many messages, 1 to {max_list_limit}; default {default_list_limit}"`
}

// AckInput is ack_message's input.
type AckInput struct {
	MessageID string `json:"message_id" jsonschema:"the message_id from read_inbox"`
}

// HeartbeatInput is heartbeat's input.
type HeartbeatInput struct {
	TTL string `json:"ttl,omitempty" jsonschema:"how long this heartbeat keeps you alive, as a Go duration ({min_ttl} to {max_ttl}); default {default_ttl}"`
}

// CheckoutResult is the answer of checkout_task and claim_task.
type CheckoutResult struct {
	Outcome
	Acquired  bool             `json:"acquired" jsonschema:"true when you now hold the lease and may work on the task"`
	Adopted   bool             `json:"adopted" jsonschema:"true when the lease is one your agent took in an earlier run, now continued in this session"`
	HeldByYou bool             `json:"held_by_you" jsonschema:"true when your own agent holds the task under another run: call checkout_task with adopt=true to continue it"`
	TaskID    string           `json:"task_id,omitempty" jsonschema:"the task"`
	Title     string           `json:"title,omitempty" jsonschema:"the task's title"`
	Checkout  *client.Checkout `json:"checkout,omitempty" jsonschema:"your lease, when acquired"`
	Watching  bool             `json:"watching" jsonschema:"true when you will get an inbox message once the task is released (or, when blocked, unblocked); false when you did not ask (watch), or the task's watch list is full or could not take the watch just now, or the task is done, cancelled, failed or waiting for its time (such a task is not watched)"`
	LastError string           `json:"last_error,omitempty" jsonschema:"when acquired and earlier attempts of the task failed: the error the latest failed attempt was given back with (the task's last_error); learn from it before you start"`
	// RetryAfterSeconds and HolderHeartbeatExpiresAt are set on a denial.
	RetryAfterSeconds        *int64     `json:"retry_after_seconds,omitempty" jsonschema:"on a denial: whole seconds until the lease can end without its holder (its expiry, or its holder's heartbeat running out); checking out again after that may succeed"`
	HolderHeartbeatExpiresAt *time.Time `json:"holder_heartbeat_expires_at,omitempty" jsonschema:"on a denial: when the holder's heartbeat runs out unless it sends another (absent when the holder sends none)"`
}

// LeaseResult is the answer of renew_task.
type LeaseResult struct {
	Outcome
	Checkout *client.Checkout `json:"checkout,omitempty" jsonschema:"your renewed lease"`
}

// CompleteResult is the answer of complete_task.
type CompleteResult struct {
	Outcome
	Task *client.Task `json:"task,omitempty" jsonschema:"the task, now done"`
}

// ReleaseResult is the answer of release_task.
type ReleaseResult struct {
	Outcome
	Released *client.Released `json:"released,omitempty"`
}

// FailResult is the answer of fail_task.
type FailResult struct {
	Outcome
	Released *client.Released `json:"released,omitempty"`
	Task     *client.Task     `json:"task,omitempty" jsonschema:"the task after the failed attempt: its status (todo, or failed when its attempts are used up), attempts, not_before and last_error"`
}

// StatusResult is the answer of task_status.
type StatusResult struct {
	Outcome
	TaskID            string           `json:"task_id,omitempty"`
	Locked            bool             `json:"locked" jsonschema:"true when a live lease holds the task, false when none does"`
	Checkout          *client.Checkout `json:"checkout" jsonschema:"the live lease, or null when none holds the task"`
	HeldByThisSession bool             `json:"held_by_this_session" jsonschema:"true when the live lease is the one this session works under; false when it is another's, or there is none"`
}

// ListCheckoutsResult is the answer of list_checkouts.
type ListCheckoutsResult struct {
	Outcome
	Checkouts []client.Checkout `json:"checkouts,omitempty"`
	Total     int               `json:"total" jsonschema:"how many live leases matched, before the limit"`
	Truncated bool              `json:"truncated" jsonschema:"true when more leases matched than limit"`
}

// ListTasksResult is the answer of list_tasks.
type ListTasksResult struct {
	Outcome
	Tasks      []client.Task `json:"tasks,omitempty"`
	NextCursor string        `json:"next_cursor,omitempty" jsonschema:"pass it as cursor for the next page; absent on the last"`
}

// TaskResult is the answer of get_task.
type TaskResult struct {
	Outcome
	Task *client.Task `json:"task,omitempty"`
}

// WatchResult is the answer of watch_task.
type WatchResult struct {
	Outcome
	TaskID   string `json:"task_id,omitempty"`
	Watching bool   `json:"watching"`
}

// InboxResult is the answer of read_inbox.
type InboxResult struct {
	Outcome
	Messages  []client.Message `json:"messages,omitempty"`
	Total     int              `json:"total" jsonschema:"how many messages there are, before the limit"`
	Truncated bool             `json:"truncated" jsonschema:"true when there are more messages than limit"`
}

// AckResult is the answer of ack_message.
type AckResult struct {
	Outcome
	MessageID string `json:"message_id,omitempty"`
}

// HeartbeatResult is the answer of heartbeat.
type HeartbeatResult struct {
	Outcome
	AgentID   string     `json:"agent_id,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// limitsText fills the placeholders of the descriptions with the service's
// limits and defaults, as package lease states them.
var limitsText = strings.NewReplacer(
	"{min_timeout}", shortDuration(lease.MinTimeout),
	"{max_timeout}", shortDuration(lease.MaxTimeout),
	"{default_timeout}", shortDuration(lease.DefaultTimeout),
	"{max_claim_wait}", shortDuration(lease.MaxClaimWait),
	"{min_ttl}", shortDuration(lease.MinHeartbeatTTL),
	"{max_ttl}", shortDuration(lease.MaxHeartbeatTTL),
	"{default_ttl}", shortDuration(lease.DefaultHeartbeatTTL),
	"{default_list_limit}", strconv.Itoa(lease.DefaultListLimit),
	"{max_list_limit}", strconv.Itoa(lease.MaxListLimit),
	"{list_reads}", strconv.Itoa(listReads),
	"{max_queues_listed}", strconv.Itoa(queuesPerCall),
	"{max_priority}", strconv.Itoa(lease.MaxPriority),
	"{default_priority}", strconv.Itoa(lease.DefaultPriority),
	"{max_description}", kib(lease.MaxDescriptionLen),
	"{max_metadata}", kib(lease.MaxMetadataLen),
	"{default_queue}", lease.DefaultQueue,
	"{max_blockers}", strconv.Itoa(lease.MaxBlockers),
	"{default_max_attempts}", strconv.Itoa(lease.DefaultMaxAttempts),
	"{max_max_attempts}", strconv.Itoa(lease.MaxMaxAttempts),
	"{default_retry_delay}", shortDuration(lease.DefaultRetryDelay),
	"{max_retry_wait}", shortDuration(lease.MaxRetryWait),
	"{max_error}", kib(lease.MaxErrorLen),
)

// describe fills the placeholders of a schema's descriptions, and of its
// properties', at every depth.
func describe(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	s.Description = limitsText.Replace(s.Description)
	for _, p := range s.Properties {
		describe(p)
	}
	describe(s.Items)
	for _, d := range s.Defs {
		describe(d)
	}
}

// shortDuration is d as the service's documents write it: 30m, 24h, 90s,
// rather than time.Duration's 30m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func kib(n int) string { return strconv.Itoa(n>>10) + " KiB" }
