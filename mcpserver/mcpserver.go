// Package mcpserver exposes the checkout service to LLM agents as a Model
// Context Protocol server. Its tools act as the agent whose API key the
// client carries: checkout_task, claim_task, renew_task, complete_task,
// release_task, task_status, list_checkouts, list_tasks, get_task,
// create_task, update_task, watch_task, read_inbox, ack_message and
// heartbeat.
//
// Every result carries structured content whose "ok", "code" and "message"
// say what happened, failures included: isError is set, ok is false, and
// code is the API's error code (task_not_found, not_holder, ...) or one of
// invalid_arguments, unreachable, not_a_checkout_server.
//
// A conflict is an answer, not a failure: checkout_task and claim_task
// return a normal result with "acquired": false and the holder, because
// being told "someone else has it, pick another task" is the expected
// outcome of a race that the agent should act on.
//
// One server session is one agent run: its checkouts share one run id, so
// a repeated checkout_task of a task it already holds returns the same
// lease, and its renewals, releases and completions name the lease it took.
// A session that finds its agent holding a task under another run (the
// process restarted) is told so, and adopts the lease with checkout_task
// adopt=true, or by giving its fence to renew_task, release_task or
// complete_task: the API's holder check is the agent plus the run id or
// fence given.
package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/checkout-dev/checkout/client"
)

// Version is reported to MCP clients unless Options.Version says otherwise.
const Version = "1.1.0"

// Options configure a server.
type Options struct {
	// AgentID is the agent the tools act as, sent as agent_id: empty for the
	// key's own agent (an admin's key may name any agent).
	AgentID string
	// RunID is the session's run id (default: a fresh one).
	RunID string
	// Version is reported to clients (default Version).
	Version string
}

// Serve runs the server over r and w (stdin and stdout) until the client
// disconnects or ctx is done.
func Serve(ctx context.Context, c *client.Client, r io.Reader, w io.Writer, opts ...Options) error {
	rc, ok := r.(io.ReadCloser)
	if !ok {
		rc = io.NopCloser(r)
	}
	wc, ok := w.(io.WriteCloser)
	if !ok {
		wc = nopWriteCloser{w}
	}
	err := New(c, opts...).Run(ctx, &mcp.IOTransport{Reader: rc, Writer: wc})
	if err != nil && (errors.Is(err, io.EOF) || ctx.Err() != nil) {
		return nil
	}
	return err
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// held is a lease this session took or adopted.
type held struct {
	runID string
	fence int64
}

type tools struct {
	c       *client.Client
	agentID string // as configured; "" for the key's own
	runID   string

	mu     sync.Mutex
	leases map[string]held // task id -> the lease this session holds
	claims int
}

// New returns the MCP server with its tools, acting through c.
func New(c *client.Client, opts ...Options) *mcp.Server {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.RunID == "" {
		o.RunID = client.NewRunID()
	}
	if o.Version == "" {
		o.Version = Version
	}
	t := &tools{c: c, agentID: o.AgentID, runID: o.RunID, leases: map[string]held{}}
	s := mcp.NewServer(&mcp.Implementation{Name: "checkout", Title: "Task checkout", Version: o.Version}, &mcp.ServerOptions{
		Instructions: instructions,
	})
	no := false
	write := func(idem bool) *mcp.ToolAnnotations {
		return &mcp.ToolAnnotations{DestructiveHint: &no, IdempotentHint: idem, OpenWorldHint: &no}
	}
	read := &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no}
	addTool(s, &mcp.Tool{Name: "checkout_task", Title: "Check a task out", Description: descCheckout, Annotations: write(true)}, t.checkout)
	addTool(s, &mcp.Tool{Name: "claim_task", Title: "Claim the next open task", Description: descClaim, Annotations: write(false)}, t.claim)
	addTool(s, &mcp.Tool{Name: "renew_task", Title: "Renew your lease", Description: descRenew, Annotations: write(true)}, t.renew)
	addTool(s, &mcp.Tool{Name: "complete_task", Title: "Complete a task", Description: descComplete, Annotations: write(false)}, t.complete)
	addTool(s, &mcp.Tool{Name: "release_task", Title: "Release a task", Description: descRelease, Annotations: write(false)}, t.release)
	addTool(s, &mcp.Tool{Name: "task_status", Title: "Who holds a task", Description: descStatus, Annotations: read}, t.status)
	addTool(s, &mcp.Tool{Name: "list_checkouts", Title: "List live checkouts", Description: descListCheckouts, Annotations: read}, t.listCheckouts)
	addTool(s, &mcp.Tool{Name: "list_tasks", Title: "List tasks", Description: descListTasks, Annotations: read}, t.listTasks)
	addTool(s, &mcp.Tool{Name: "list_queues", Title: "List queues", Description: descListQueues, Annotations: read}, t.listQueues)
	addTool(s, &mcp.Tool{Name: "get_task", Title: "Show a task", Description: descGetTask, Annotations: read}, t.getTask)
	addTool(s, &mcp.Tool{Name: "create_task", Title: "Create a task", Description: descCreateTask, Annotations: write(false)}, t.createTask)
	addTool(s, &mcp.Tool{Name: "update_task", Title: "Change or cancel a task", Description: descUpdateTask, Annotations: write(false)}, t.updateTask)
	addTool(s, &mcp.Tool{Name: "watch_task", Title: "Watch a task", Description: descWatch, Annotations: write(true)}, t.watch)
	addTool(s, &mcp.Tool{Name: "read_inbox", Title: "Read your inbox", Description: descInbox, Annotations: read}, t.inbox)
	addTool(s, &mcp.Tool{Name: "ack_message", Title: "Acknowledge an inbox message", Description: descAck, Annotations: write(true)}, t.ack)
	addTool(s, &mcp.Tool{Name: "heartbeat", Title: "Say you are alive", Description: descHeartbeat, Annotations: write(true)}, t.heartbeat)
	return s
}

const instructions = `These tools coordinate work between many agents sharing one pool of tasks.
Before working on a task, take it with checkout_task (a task you were given) or claim_task
(any open task); list_tasks and get_task show what there is. Only work on a task while you hold
its lease. If checkout_task answers acquired=false, another agent holds the task: do not work on
it; pick another task, or watch it (watch_task, or checkout_task with watch=true) and look in
read_inbox later. If it answers held_by_you=true, your agent took the task in an earlier run
(before a restart): checkout_task with adopt=true continues it here. When done, call
complete_task; if you give up, call release_task. Long work: call renew_task before the lease
expires. Every result has ok, message and, on failure, code: read message for what to do next.`

const descCheckout = `Take the lease on one task before you start working on it, so that no other agent works on it at the same time.
Answers acquired=true with your lease and the task's title (expires_at is when the lease ends unless you renew it with renew_task), or acquired=false with holder: another agent already holds the task. acquired=false is a normal answer, not an error: do NOT work on that task; pick another task (claim_task gives you one), or, if you need this very task, call it again with watch=true so the task's release is announced in read_inbox, and try again later.
held_by_you=true means your own agent holds the task under another run, usually this server before a restart: call checkout_task again with adopt=true to continue that lease in this session, unless another session of yours is still working on it.
Calling it again for a task you already hold returns the same lease. Fails (ok=false) for an unknown task id or a task already done or cancelled.`

const descClaim = `Take the lease on the next open task when you have no particular task to work on: the highest-priority, then oldest, open task of queues (default ["default"]; name the queues of the work you do). wait (up to 20s) waits that long for a task to become available. Answers acquired=true with the lease, its task_id, title, queue and priority (work on that task), or acquired=false when no task is available right now: claim again with wait, watch a task, or stop.`

const descCreateTask = `Create a task for yourself or other agents to work on: a title, optionally a description (up to 8 KiB), a queue (default "default": agents claim from the queues they name), a priority (0 to 9, higher is claimed first; default 5) and metadata (a JSON object of up to 4 KiB). Give task_id to make retrying safe: a task with that id that exists already is reported, not created twice.`

const descUpdateTask = `Change a task's title, description, queue, priority or metadata, or its status: "cancelled" (nobody should work on it; if it is checked out, only its holder or an admin may, and the lease ends) or "todo" (reopen a done or cancelled task). Fields you leave out stay as they are; a checked-out task keeps its lease. Give version (from get_task) to change it only if nobody changed it since (else code version_mismatch: read it again).`

const descRenew = `Extend your lease on a task you hold, before it expires, when your work takes longer than the lease timeout. Renew well before expires_at (for example at a third of the timeout). Optionally give a new timeout. Give fence only to adopt a lease your agent took in an earlier run (the fence checkout_task or task_status showed). Fails (ok=false, code not_holder or not_checked_out) when you no longer hold the task: your lease expired or was released, and another agent may now be working on it; stop working on it and check task_status.`

const descComplete = `Mark a task you hold as done when you have finished the work. This ends your lease and the task is never handed out again. Give fence only for a lease of your agent's earlier run. Fails (ok=false) when you no longer hold the task (your lease expired or someone else holds it): check task_status before assuming your work counts.`

const descRelease = `Give a task back without finishing it, for example when you are blocked or stop working. The task becomes open again at once and agents watching it are told. Give a short reason. Give fence only for a lease of your agent's earlier run. Fails (ok=false) when you do not hold the task.`

const descStatus = `Check whether a task is checked out right now, by whom, and how long its lease has left; held_by_this_session says whether it is the lease this session works under. Use it before deciding to wait for a task, or to confirm you still hold one. Read-only.`

const descListCheckouts = `List the live leases, all or one agent's (agent_id), up to limit (default 50). Use it to see which tasks are taken and by whom, or which tasks you still hold. Read-only.`

const descListTasks = `List tasks, optionally only one status (todo = open, in_progress = someone works on it, done, cancelled), up to limit per page (default 50), with each task's title and live lease. Use it to find a task to work on; then take it with checkout_task. Pass next_cursor as cursor for the next page. Read-only.`

const descGetTask = `Show one task: its title, status, times, and its live lease if any. Use it to read what a task is before or after taking it. Read-only.`

const descWatch = `Ask to be told when a task that another agent holds becomes available (released, or its lease ends). One task_available message then arrives in read_inbox; the watch is used up. Meanwhile work on something else.`

const descInbox = `Read your inbox: one task_available message for each watched task that became available, oldest first, up to limit (default 50). For each message: try checkout_task on its task_id (someone may have taken it first), then ack_message its message_id so it is not shown again. Read-only.`

const descAck = `Delete an inbox message you have acted on, by its message_id from read_inbox, so that it is not shown again.`

const descHeartbeat = `Tell the service you are still alive. Once you have sent one heartbeat you are watched: if no heartbeat arrives within its ttl (default 90s), you are considered dead and all your leases end so other agents can take your tasks. Send one every ttl/3 while you work, or never send any and rely on lease timeouts alone.`

// Outcome is in every tool's result.
type Outcome struct {
	OK      bool   `json:"ok" jsonschema:"true when the call did what it was asked; false when it failed: see code and message"`
	Code    string `json:"code,omitempty" jsonschema:"when ok is false: the API's error code (task_not_found, not_holder, not_checked_out, status_mismatch, forbidden, ...) or invalid_arguments, unreachable, not_a_checkout_server, unauthorized"`
	Message string `json:"message" jsonschema:"what happened and what to do next"`
	// Holder is the lease in the way, on a denial or a not_holder failure.
	Holder *client.Checkout `json:"holder,omitempty" jsonschema:"the lease that holds the task, when it is not yours"`
}

func (o *Outcome) outcome() *Outcome { return o }

// CheckoutInput is checkout_task's input.
type CheckoutInput struct {
	TaskID  string `json:"task_id" jsonschema:"the id of the task to take"`
	Timeout string `json:"timeout,omitempty" jsonschema:"lease length as a Go duration such as 30m or 2h (1s to 24h); default 30m"`
	Reason  string `json:"reason,omitempty" jsonschema:"what you are going to do, shown to other agents"`
	Watch   bool   `json:"watch,omitempty" jsonschema:"when the task is held by another agent, get an inbox message once it is released"`
	Adopt   bool   `json:"adopt,omitempty" jsonschema:"when your own agent holds the task under another run (held_by_you), continue that lease in this session"`
}

// ClaimInput is claim_task's input.
type ClaimInput struct {
	Timeout string   `json:"timeout,omitempty" jsonschema:"lease length as a Go duration such as 30m or 2h (1s to 24h); default 30m"`
	Reason  string   `json:"reason,omitempty" jsonschema:"what you are going to do, shown to other agents"`
	Queues  []string `json:"queues,omitempty" jsonschema:"the queues to claim from; default [\"default\"]"`
	Wait    string   `json:"wait,omitempty" jsonschema:"wait up to this long for a task (a Go duration, up to 20s); default: answer at once"`
}

// CreateTaskInput is create_task's input.
type CreateTaskInput struct {
	TaskID      string         `json:"task_id,omitempty" jsonschema:"the task's id; generated when empty"`
	Title       string         `json:"title,omitempty" jsonschema:"what the task is"`
	Description string         `json:"description,omitempty" jsonschema:"more about it, up to 8 KiB"`
	Queue       string         `json:"queue,omitempty" jsonschema:"the queue agents claim it from; default \"default\""`
	Priority    *int           `json:"priority,omitempty" jsonschema:"0 to 9, higher is claimed first; default 5"`
	Metadata    map[string]any `json:"metadata,omitempty" jsonschema:"a JSON object of your own, up to 4 KiB"`
}

// UpdateTaskInput is update_task's input.
type UpdateTaskInput struct {
	TaskID      string         `json:"task_id" jsonschema:"the task to change"`
	Title       *string        `json:"title,omitempty" jsonschema:"the new title"`
	Description *string        `json:"description,omitempty" jsonschema:"the new description"`
	Queue       *string        `json:"queue,omitempty" jsonschema:"move it to this queue"`
	Priority    *int           `json:"priority,omitempty" jsonschema:"0 to 9, higher is claimed first"`
	Metadata    map[string]any `json:"metadata,omitempty" jsonschema:"replaces its metadata: a JSON object"`
	Status      string         `json:"status,omitempty" jsonschema:"cancelled, or todo to reopen a done or cancelled task"`
	Version     int64          `json:"version,omitempty" jsonschema:"change it only if its version (from get_task) is still this"`
}

// LeaseInput names a lease: the task, and optionally the fence of a lease
// of an earlier run of the agent.
type LeaseInput struct {
	TaskID string `json:"task_id" jsonschema:"the task whose lease you hold"`
	Fence  int64  `json:"fence,omitempty" jsonschema:"only to adopt a lease your agent took in an earlier run: that lease's fence"`
}

// RenewInput is renew_task's input.
type RenewInput struct {
	LeaseInput
	Timeout string `json:"timeout,omitempty" jsonschema:"new lease length from now, as a Go duration such as 30m; default the lease's own"`
}

// ReleaseInput is release_task's input.
type ReleaseInput struct {
	LeaseInput
	Reason string `json:"reason,omitempty" jsonschema:"why you give it back"`
}

// TaskInput names one task.
type TaskInput struct {
	TaskID string `json:"task_id" jsonschema:"the task's id"`
}

// ListCheckoutsInput is list_checkouts' input.
type ListCheckoutsInput struct {
	AgentID string `json:"agent_id,omitempty" jsonschema:"only this agent's leases; empty for all"`
	Limit   int    `json:"limit,omitempty" jsonschema:"at most this many leases, 1 to 1000; default 50"`
}

// ListTasksInput is list_tasks' input.
type ListTasksInput struct {
	Status string `json:"status,omitempty" jsonschema:"only tasks in this status: todo, in_progress, done or cancelled; empty for all"`
	Queue  string `json:"queue,omitempty" jsonschema:"only tasks in this queue; empty for all"`
	Limit  int    `json:"limit,omitempty" jsonschema:"page size, 1 to 1000; default 50"`
	Cursor string `json:"cursor,omitempty" jsonschema:"next_cursor of the previous page"`
}

// InboxInput is read_inbox's input.
type InboxInput struct {
	Limit int `json:"limit,omitempty" jsonschema:"at most this many messages, 1 to 1000; default 50"`
}

// AckInput is ack_message's input.
type AckInput struct {
	MessageID string `json:"message_id" jsonschema:"the message_id from read_inbox"`
}

// HeartbeatInput is heartbeat's input.
type HeartbeatInput struct {
	TTL string `json:"ttl,omitempty" jsonschema:"how long this heartbeat keeps you alive, as a Go duration (1s to 1h); default 90s"`
}

// CheckoutResult is the answer of checkout_task and claim_task.
type CheckoutResult struct {
	Outcome
	Acquired  bool             `json:"acquired" jsonschema:"true when you now hold the lease and may work on the task"`
	Adopted   bool             `json:"adopted,omitempty" jsonschema:"true when the lease is one your agent took in an earlier run, now continued in this session"`
	HeldByYou bool             `json:"held_by_you,omitempty" jsonschema:"true when your own agent holds the task under another run: call checkout_task with adopt=true to continue it"`
	TaskID    string           `json:"task_id,omitempty" jsonschema:"the task"`
	Title     string           `json:"title,omitempty" jsonschema:"the task's title"`
	Checkout  *client.Checkout `json:"checkout,omitempty" jsonschema:"your lease, when acquired"`
	Watching  bool             `json:"watching,omitempty" jsonschema:"true when you will get an inbox message once the task is released"`
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

// StatusResult is the answer of task_status.
type StatusResult struct {
	Outcome
	TaskID            string           `json:"task_id,omitempty"`
	Locked            bool             `json:"locked,omitempty" jsonschema:"true when a live lease holds the task"`
	Checkout          *client.Checkout `json:"checkout,omitempty" jsonschema:"the live lease, if any"`
	HeldByThisSession bool             `json:"held_by_this_session,omitempty" jsonschema:"true when the live lease is the one this session works under"`
}

// ListCheckoutsResult is the answer of list_checkouts.
type ListCheckoutsResult struct {
	Outcome
	Checkouts []client.Checkout `json:"checkouts,omitempty"`
	Total     int               `json:"total,omitempty" jsonschema:"how many live leases matched, before the limit"`
	Truncated bool              `json:"truncated,omitempty" jsonschema:"true when more leases matched than limit"`
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
	Watching bool   `json:"watching,omitempty"`
}

// InboxResult is the answer of read_inbox.
type InboxResult struct {
	Outcome
	Messages  []client.Message `json:"messages,omitempty"`
	Total     int              `json:"total,omitempty"`
	Truncated bool             `json:"truncated,omitempty"`
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

// outcomer is every result type (through its Outcome).
type outcomer interface{ outcome() *Outcome }

// addTool registers h with schemas inferred from In and Out, and does what
// mcp.AddTool does, except that every failure, bad arguments included, is
// a result whose structured content has ok=false, code and message.
func addTool[In, Out any, PO interface {
	*Out
	outcomer
}](s *mcp.Server, t *mcp.Tool, h func(context.Context, In) (Out, error)) {
	in, err := jsonschema.For[In](nil)
	if err != nil {
		panic(err)
	}
	out, err := jsonschema.For[Out](nil)
	if err != nil {
		panic(err)
	}
	// A failure carries only the Outcome: ok and message are the fields
	// every result has.
	out.Required = []string{"ok", "message"}
	resolved, err := in.Resolve(nil)
	if err != nil {
		panic(err)
	}
	t.InputSchema, t.OutputSchema = in, out
	s.AddTool(t, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args In
		raw := req.Params.Arguments
		if len(raw) == 0 || string(raw) == "null" {
			raw = json.RawMessage("{}")
		}
		var generic any
		if err := json.Unmarshal(raw, &generic); err != nil {
			return failure(Outcome{Code: "invalid_arguments", Message: "the arguments are not a JSON object: " + err.Error()}), nil
		}
		if err := resolved.Validate(generic); err != nil {
			return failure(Outcome{Code: "invalid_arguments", Message: "invalid arguments: " + err.Error()}), nil
		}
		if err := json.Unmarshal(raw, &args); err != nil {
			return failure(Outcome{Code: "invalid_arguments", Message: "invalid arguments: " + err.Error()}), nil
		}
		res, err := h(ctx, args)
		if err != nil {
			return failure(toolError(err)), nil
		}
		o := PO(&res).outcome()
		o.OK = true
		return result(o.Message, res, false), nil
	})
}

func failure(o Outcome) *mcp.CallToolResult {
	o.OK = false
	return result(o.Message, o, true)
}

func result(text string, structured any, isError bool) *mcp.CallToolResult {
	b, err := json.Marshal(structured)
	if err != nil {
		b = []byte(`{"ok":false,"code":"internal","message":"the result could not be encoded"}`)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, StructuredContent: json.RawMessage(b), IsError: isError}
}

// argError is a tool argument the service would refuse anyway.
type argError struct{ msg string }

func (e *argError) Error() string { return e.msg }

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func holderText(h client.Checkout) string {
	s := fmt.Sprintf("held by %s (%s) under run %s, fence %d, since %s until %s", h.AgentName, h.AgentID, h.RunID, h.Fence, stamp(h.LockedAt), stamp(h.ExpiresAt))
	if h.Reason != "" {
		s += fmt.Sprintf(", reason: %q", h.Reason)
	}
	return s
}

func parseDur(field, v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, &argError{fmt.Sprintf("invalid %s %q: use a Go duration such as 90s, 30m or 2h", field, v)}
	}
	return d, nil
}

func limitOf(n int) (int, error) {
	switch {
	case n == 0:
		return 50, nil
	case n < 1 || n > 1000:
		return 0, &argError{fmt.Sprintf("limit %d is out of range: give 1 to 1000", n)}
	}
	return n, nil
}

// toolError is the failure outcome of err.
func toolError(err error) Outcome {
	var ae *client.APIError
	var ue *client.UnreachableError
	var nse *client.NotServerError
	var arg *argError
	var ne *client.NotHolderError
	var sm *client.StatusMismatchError
	switch {
	case errors.As(err, &arg):
		return Outcome{Code: "invalid_arguments", Message: arg.msg}
	case errors.As(err, &ue):
		return Outcome{Code: "unreachable", Message: ue.Error() + "; the checkout server is down or CHECKOUT_URL is wrong: try again later"}
	case errors.As(err, &nse):
		return Outcome{Code: "not_a_checkout_server", Message: nse.Error() + "; CHECKOUT_URL is wrong"}
	case errors.Is(err, client.ErrUnauthorized):
		return Outcome{Code: "unauthorized", Message: "unauthorized: the API key (CHECKOUT_API_KEY) is missing, wrong or revoked"}
	case errors.As(err, &ne):
		o := Outcome{Code: "not_holder", Message: "you do not hold this task's lease: stop working on it"}
		if ne.Holder.AgentID != "" {
			h := ne.Holder
			o.Holder = &h
			o.Message = fmt.Sprintf("this session does not hold the lease: the task is %s. If that is your own agent in an earlier run "+
				"(before a restart), give fence=%d to adopt it; otherwise stop working on it", holderText(h), h.Fence)
		}
		return o
	case errors.Is(err, client.ErrNotCheckedOut):
		return Outcome{Code: "not_checked_out", Message: "no live lease holds this task: yours expired or was released, so another agent may take it. " +
			"Stop working on it, or take it again with checkout_task"}
	case errors.As(err, &sm):
		return Outcome{Code: "status_mismatch", Message: fmt.Sprintf("the task has status %s and cannot be checked out; pick another task", sm.Status)}
	case errors.As(err, &ae):
		code := ae.Code
		if code == "" {
			code = "error"
		}
		msg := ae.Message
		if msg == "" {
			msg = ae.Error()
		}
		return Outcome{Code: code, Message: msg}
	}
	return Outcome{Code: "error", Message: err.Error()}
}

func (t *tools) hold(co client.Checkout) {
	t.mu.Lock()
	t.leases[co.TaskID] = held{co.RunID, co.Fence}
	t.mu.Unlock()
}

func (t *tools) drop(taskID string) {
	t.mu.Lock()
	delete(t.leases, taskID)
	t.mu.Unlock()
}

// lease is how a renewal, release or completion names its lease: by the
// fence given (adopting a lease of an earlier run), by the lease this
// session took, or by the session's run id.
func (t *tools) lease(in LeaseInput) (runID string, fence int64) {
	if in.Fence != 0 {
		return "", in.Fence
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if l, ok := t.leases[in.TaskID]; ok {
		return l.runID, l.fence
	}
	return t.runID, 0
}

// title is a task's title, best effort (a checkout's answer has none).
func (t *tools) title(ctx context.Context, co client.Checkout) string {
	if co.Title != "" {
		return co.Title
	}
	task, err := t.c.GetTask(ctx, co.TaskID)
	if err != nil {
		return ""
	}
	return task.Title
}

func named(taskID, title string) string {
	if title == "" {
		return taskID
	}
	return fmt.Sprintf("%s (%q)", taskID, title)
}

func (t *tools) checkout(ctx context.Context, in CheckoutInput) (CheckoutResult, error) {
	d, err := parseDur("timeout", in.Timeout)
	if err != nil {
		return CheckoutResult{}, err
	}
	co, err := t.c.Checkout(ctx, in.TaskID, client.CheckoutRequest{Timeout: d, Reason: in.Reason, RunID: t.runID, Watch: in.Watch, AgentID: t.agentID})
	var ce *client.ConflictError
	switch {
	case errors.As(err, &ce) && ce.SameAgent && in.Adopt:
		return t.adopt(ctx, ce.Holder, d)
	case errors.As(err, &ce) && ce.SameAgent:
		h := ce.Holder
		r := CheckoutResult{TaskID: in.TaskID, HeldByYou: true, Outcome: Outcome{Holder: &h}, Title: t.title(ctx, h)}
		r.Message = fmt.Sprintf("You (agent %s) already hold task %s under another run (run %s, fence %d, until %s), probably from before this session restarted. "+
			"If you were working on it, call checkout_task again with adopt=true to continue that lease here (or give fence=%d to renew_task, release_task or complete_task). "+
			"If another session of yours is working on it, leave it and pick another task.",
			h.AgentID, named(in.TaskID, r.Title), h.RunID, h.Fence, stamp(h.ExpiresAt), h.Fence)
		return r, nil
	case errors.As(err, &ce):
		h := ce.Holder
		r := CheckoutResult{TaskID: in.TaskID, Outcome: Outcome{Holder: &h}, Watching: in.Watch, Title: t.title(ctx, h)}
		r.Message = fmt.Sprintf("Checkout DENIED: task %s is %s. Do not work on it. ", named(in.TaskID, r.Title), holderText(h))
		if in.Watch {
			r.Message += "You will get a message in read_inbox when it is released; meanwhile pick another task (claim_task)."
		} else {
			r.Message += "Pick another task (claim_task), or watch it (watch_task) and try again once read_inbox says it is free."
		}
		return r, nil
	case err != nil:
		return CheckoutResult{}, err
	}
	t.hold(co)
	r := CheckoutResult{Acquired: true, TaskID: co.TaskID, Checkout: &co, Title: t.title(ctx, co)}
	r.Message = fmt.Sprintf("Checkout acquired: task %s is yours until %s (fence %d). Work on it, renew_task before then if you need longer, and complete_task when done.",
		named(co.TaskID, r.Title), stamp(co.ExpiresAt), co.Fence)
	return r, nil
}

// adopt continues h, a lease of the agent's earlier run, in this session:
// a renewal by its fence proves it is the agent's and extends it.
func (t *tools) adopt(ctx context.Context, h client.Checkout, timeout time.Duration) (CheckoutResult, error) {
	co, err := t.c.Renew(ctx, h.TaskID, client.RenewRequest{Timeout: timeout, Fence: h.Fence, AgentID: t.agentID})
	if err != nil {
		return CheckoutResult{}, err
	}
	t.hold(co)
	r := CheckoutResult{Acquired: true, Adopted: true, TaskID: co.TaskID, Checkout: &co, Title: t.title(ctx, co)}
	r.Message = fmt.Sprintf("Adopted your earlier run's lease on task %s (run %s, fence %d): it is yours in this session until %s. Go on with the work, renew_task before then if you need longer, and complete_task when done.",
		named(co.TaskID, r.Title), co.RunID, co.Fence, stamp(co.ExpiresAt))
	return r, nil
}

func (t *tools) claim(ctx context.Context, in ClaimInput) (CheckoutResult, error) {
	d, err := parseDur("timeout", in.Timeout)
	if err != nil {
		return CheckoutResult{}, err
	}
	// Each claim has its own run id, derived from the session's: the API
	// answers a claim whose run already holds a lease with that lease.
	t.mu.Lock()
	t.claims++
	runID := fmt.Sprintf("%s.c%d", t.runID, t.claims)
	t.mu.Unlock()
	wait, err := parseDur("wait", in.Wait)
	if err != nil {
		return CheckoutResult{}, err
	}
	co, err := t.c.Claim(ctx, client.ClaimRequest{Timeout: d, Reason: in.Reason, RunID: runID, AgentID: t.agentID, Queues: in.Queues, Wait: wait})
	if errors.Is(err, client.ErrNoTaskAvailable) || errors.Is(err, client.ErrCheckedOut) {
		return CheckoutResult{Outcome: Outcome{Message: "No task is available right now: every open task is taken. Wait a while before calling claim_task again, watch a task (watch_task), or stop."}}, nil
	}
	if err != nil {
		return CheckoutResult{}, err
	}
	t.hold(co)
	r := CheckoutResult{Acquired: true, TaskID: co.TaskID, Checkout: &co, Title: t.title(ctx, co)}
	r.Message = fmt.Sprintf("Claimed task %s (queue %s, priority %d): it is yours until %s (fence %d). Work on it, renew_task before then if you need longer, and complete_task when done.",
		named(co.TaskID, r.Title), co.Queue, co.Priority, stamp(co.ExpiresAt), co.Fence)
	return r, nil
}

func (t *tools) createTask(ctx context.Context, in CreateTaskInput) (TaskResult, error) {
	req := client.CreateTaskRequest{TaskID: in.TaskID, Title: in.Title, Description: in.Description, Queue: in.Queue, Priority: in.Priority, Metadata: rawObject(in.Metadata)}
	task, err := t.c.CreateTask(ctx, req)
	if errors.Is(err, client.ErrTaskExists) && in.TaskID != "" {
		if task, err = t.c.GetTask(ctx, in.TaskID); err == nil {
			return TaskResult{Task: &task, Outcome: Outcome{Message: fmt.Sprintf("Task %s exists already (status %s); nothing was created.", task.TaskID, task.Status)}}, nil
		}
	}
	if err != nil {
		return TaskResult{}, err
	}
	return TaskResult{Task: &task, Outcome: Outcome{Message: fmt.Sprintf("Task %s created in queue %s at priority %d.", task.TaskID, task.Queue, task.Priority)}}, nil
}

// rawObject is m as JSON, or nil when absent.
func rawObject(m map[string]any) json.RawMessage {
	if m == nil {
		return nil
	}
	b, _ := json.Marshal(m)
	return b
}

func (t *tools) updateTask(ctx context.Context, in UpdateTaskInput) (TaskResult, error) {
	req := client.UpdateTaskRequest{Title: in.Title, Description: in.Description, Queue: in.Queue, Priority: in.Priority,
		Metadata: rawObject(in.Metadata), Status: in.Status, IfVersion: in.Version}
	task, err := t.c.UpdateTask(ctx, in.TaskID, req)
	if err != nil {
		return TaskResult{}, err
	}
	if in.Status == "cancelled" {
		t.drop(in.TaskID)
	}
	return TaskResult{Task: &task, Outcome: Outcome{Message: fmt.Sprintf("Task %s is now %s (queue %s, priority %d, version %d).", task.TaskID, task.Status, task.Queue, task.Priority, task.Version)}}, nil
}

func (t *tools) renew(ctx context.Context, in RenewInput) (LeaseResult, error) {
	d, err := parseDur("timeout", in.Timeout)
	if err != nil {
		return LeaseResult{}, err
	}
	runID, fence := t.lease(in.LeaseInput)
	co, err := t.c.Renew(ctx, in.TaskID, client.RenewRequest{Timeout: d, RunID: runID, Fence: fence, AgentID: t.agentID})
	if err != nil {
		return LeaseResult{}, err
	}
	t.hold(co)
	return LeaseResult{Checkout: &co, Outcome: Outcome{Message: fmt.Sprintf("Lease on task %s renewed until %s (fence %d).", co.TaskID, stamp(co.ExpiresAt), co.Fence)}}, nil
}

func (t *tools) complete(ctx context.Context, in LeaseInput) (CompleteResult, error) {
	runID, fence := t.lease(in)
	task, err := t.c.Complete(ctx, in.TaskID, client.CompleteRequest{RunID: runID, Fence: fence, AgentID: t.agentID})
	if err != nil {
		return CompleteResult{}, err
	}
	t.drop(in.TaskID)
	return CompleteResult{Task: &task, Outcome: Outcome{Message: fmt.Sprintf("Task %s is done and your lease has ended. Pick your next task (claim_task).", task.TaskID)}}, nil
}

func (t *tools) release(ctx context.Context, in ReleaseInput) (ReleaseResult, error) {
	runID, fence := t.lease(in.LeaseInput)
	rel, err := t.c.Release(ctx, in.TaskID, client.ReleaseRequest{Reason: in.Reason, RunID: runID, Fence: fence, AgentID: t.agentID})
	if err != nil {
		return ReleaseResult{}, err
	}
	t.drop(in.TaskID)
	return ReleaseResult{Released: &rel, Outcome: Outcome{Message: fmt.Sprintf("Task %s released after %ds; it is open for other agents again. Do not work on it any more.", rel.TaskID, rel.HeldSeconds)}}, nil
}

func (t *tools) status(ctx context.Context, in TaskInput) (StatusResult, error) {
	s, err := t.c.Status(ctx, in.TaskID)
	if err != nil {
		return StatusResult{}, err
	}
	r := StatusResult{TaskID: s.TaskID, Locked: s.Locked, Checkout: s.Checkout}
	r.Message = fmt.Sprintf("Task %s is not checked out: take it with checkout_task.", in.TaskID)
	if s.Locked && s.Checkout != nil {
		co := s.Checkout
		t.mu.Lock()
		l, ok := t.leases[in.TaskID]
		t.mu.Unlock()
		r.HeldByThisSession = ok && l.runID == co.RunID
		r.Message = fmt.Sprintf("Task %s is %s (%ds left).", in.TaskID, holderText(*co), co.RemainingSeconds)
		if r.HeldByThisSession {
			r.Message += " That is your lease in this session."
		}
	}
	return r, nil
}

func (t *tools) listCheckouts(ctx context.Context, in ListCheckoutsInput) (ListCheckoutsResult, error) {
	limit, err := limitOf(in.Limit)
	if err != nil {
		return ListCheckoutsResult{}, err
	}
	cos, err := t.c.ListCheckouts(ctx, in.AgentID)
	if err != nil {
		return ListCheckoutsResult{}, err
	}
	r := ListCheckoutsResult{Total: len(cos)}
	if len(cos) > limit {
		cos, r.Truncated = cos[:limit], true
	}
	r.Checkouts = cos
	var b strings.Builder
	fmt.Fprintf(&b, "%d live checkout(s)", r.Total)
	if r.Truncated {
		fmt.Fprintf(&b, ", the first %d shown", limit)
	}
	b.WriteString(".")
	for _, co := range cos {
		fmt.Fprintf(&b, "\n- %s: %s", co.TaskID, holderText(co))
	}
	r.Message = b.String()
	return r, nil
}

func (t *tools) listTasks(ctx context.Context, in ListTasksInput) (ListTasksResult, error) {
	limit, err := limitOf(in.Limit)
	if err != nil {
		return ListTasksResult{}, err
	}
	p, err := t.c.ListTasks(ctx, client.ListTasksRequest{Status: in.Status, Queue: in.Queue, Limit: limit, Cursor: in.Cursor})
	if err != nil {
		return ListTasksResult{}, err
	}
	r := ListTasksResult{Tasks: p.Tasks}
	var b strings.Builder
	fmt.Fprintf(&b, "%d task(s) on this page.", len(p.Tasks))
	for _, task := range p.Tasks {
		fmt.Fprintf(&b, "\n- %s [%s, %s, priority %d]", task.TaskID, task.Status, task.Queue, task.Priority)
		if task.Title != "" {
			fmt.Fprintf(&b, " %q", task.Title)
		}
		if task.Checkout != nil {
			fmt.Fprintf(&b, ", held by %s until %s", task.Checkout.AgentID, stamp(task.Checkout.ExpiresAt))
		}
	}
	if p.NextCursor != nil {
		r.NextCursor = *p.NextCursor
		b.WriteString("\nMore tasks: call list_tasks with cursor=next_cursor.")
	}
	r.Message = b.String()
	return r, nil
}

func (t *tools) getTask(ctx context.Context, in TaskInput) (TaskResult, error) {
	task, err := t.c.GetTask(ctx, in.TaskID)
	if err != nil {
		return TaskResult{}, err
	}
	msg := fmt.Sprintf("Task %s: %s.", named(task.TaskID, task.Title), task.Status)
	switch {
	case task.Checkout != nil:
		msg += " It is " + holderText(*task.Checkout) + "."
	case task.Status == client.StatusTodo:
		msg += " It is open: take it with checkout_task."
	}
	return TaskResult{Task: &task, Outcome: Outcome{Message: msg}}, nil
}

func (t *tools) watch(ctx context.Context, in TaskInput) (WatchResult, error) {
	if err := t.c.Watch(ctx, in.TaskID); err != nil {
		return WatchResult{}, err
	}
	return WatchResult{TaskID: in.TaskID, Watching: true, Outcome: Outcome{Message: fmt.Sprintf(
		"Watching task %s: one message will arrive in read_inbox when it becomes available. Work on something else meanwhile, then try checkout_task.", in.TaskID)}}, nil
}

func (t *tools) inbox(ctx context.Context, in InboxInput) (InboxResult, error) {
	limit, err := limitOf(in.Limit)
	if err != nil {
		return InboxResult{}, err
	}
	msgs, err := t.c.Inbox(ctx)
	if err != nil {
		return InboxResult{}, err
	}
	r := InboxResult{Total: len(msgs)}
	if len(msgs) > limit {
		msgs, r.Truncated = msgs[:limit], true
	}
	r.Messages = msgs
	if len(msgs) == 0 {
		r.Message = "Your inbox is empty: no watched task has become available yet."
		return r, nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d message(s). For each, try checkout_task on the task (another agent may take it first), then ack_message the message_id.", r.Total)
	for _, m := range msgs {
		fmt.Fprintf(&b, "\n- %s: task %s became available (%s) at %s", m.MessageID, m.TaskID, m.Reason, stamp(m.At))
	}
	r.Message = b.String()
	return r, nil
}

func (t *tools) ack(ctx context.Context, in AckInput) (AckResult, error) {
	if err := t.c.DeleteMessage(ctx, in.MessageID); err != nil {
		return AckResult{}, err
	}
	return AckResult{MessageID: in.MessageID, Outcome: Outcome{Message: "Message " + in.MessageID + " deleted."}}, nil
}

func (t *tools) heartbeat(ctx context.Context, in HeartbeatInput) (HeartbeatResult, error) {
	d, err := parseDur("ttl", in.TTL)
	if err != nil {
		return HeartbeatResult{}, err
	}
	h, err := t.c.Heartbeat(ctx, d)
	if err != nil {
		return HeartbeatResult{}, err
	}
	return HeartbeatResult{AgentID: h.AgentID, ExpiresAt: &h.ExpiresAt, Outcome: Outcome{Message: fmt.Sprintf("Alive until %s: send the next heartbeat before then.", stamp(h.ExpiresAt))}}, nil
}
