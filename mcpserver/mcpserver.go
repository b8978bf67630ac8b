// Package mcpserver exposes the checkout service to LLM agents as a Model
// Context Protocol server: eight tools (checkout_task, release_task,
// renew_task, complete_task, task_status, list_checkouts, claim_task,
// heartbeat) that act as the agent whose API key the client carries.
//
// A conflict is an answer, not a failure: checkout_task and claim_task
// return a normal result (IsError false) with "acquired": false and the
// holder, because being told "someone else has it, pick another task" is
// the expected outcome of a race that the agent should act on. IsError is
// set only for calls the agent should change or retry: bad input, an unknown
// task, a lease it does not hold, an unreachable server or a bad key.
//
// One server process is one agent run: its checkouts share one run id, so
// a repeated checkout_task of a task it already holds returns the same lease.
package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/checkout-dev/checkout/client"
)

// Version is reported to MCP clients.
const Version = "1.0.0"

// Serve runs the server over r and w (stdin and stdout) until the client
// disconnects or ctx is done.
func Serve(ctx context.Context, c *client.Client, r io.Reader, w io.Writer) error {
	rc, ok := r.(io.ReadCloser)
	if !ok {
		rc = io.NopCloser(r)
	}
	wc, ok := w.(io.WriteCloser)
	if !ok {
		wc = nopWriteCloser{w}
	}
	err := New(c).Run(ctx, &mcp.IOTransport{Reader: rc, Writer: wc})
	if err != nil && (errors.Is(err, io.EOF) || ctx.Err() != nil) {
		return nil
	}
	return err
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

type tools struct {
	c     *client.Client
	runID string
}

// New returns the MCP server with its eight tools, acting through c.
func New(c *client.Client) *mcp.Server {
	t := &tools{c: c, runID: client.NewRunID()}
	s := mcp.NewServer(&mcp.Implementation{Name: "checkout", Title: "Task checkout", Version: Version}, &mcp.ServerOptions{
		Instructions: instructions,
	})
	no := false
	write := func(idem bool) *mcp.ToolAnnotations {
		return &mcp.ToolAnnotations{DestructiveHint: &no, IdempotentHint: idem, OpenWorldHint: &no}
	}
	read := &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no}
	mcp.AddTool(s, &mcp.Tool{Name: "checkout_task", Title: "Check a task out", Description: descCheckout, Annotations: write(true)}, t.checkout)
	mcp.AddTool(s, &mcp.Tool{Name: "claim_task", Title: "Claim the next open task", Description: descClaim, Annotations: write(false)}, t.claim)
	mcp.AddTool(s, &mcp.Tool{Name: "renew_task", Title: "Renew your lease", Description: descRenew, Annotations: write(true)}, t.renew)
	mcp.AddTool(s, &mcp.Tool{Name: "complete_task", Title: "Complete a task", Description: descComplete, Annotations: write(false)}, t.complete)
	mcp.AddTool(s, &mcp.Tool{Name: "release_task", Title: "Release a task", Description: descRelease, Annotations: write(false)}, t.release)
	mcp.AddTool(s, &mcp.Tool{Name: "task_status", Title: "Who holds a task", Description: descStatus, Annotations: read}, t.status)
	mcp.AddTool(s, &mcp.Tool{Name: "list_checkouts", Title: "List live checkouts", Description: descList, Annotations: read}, t.list)
	mcp.AddTool(s, &mcp.Tool{Name: "heartbeat", Title: "Say you are alive", Description: descHeartbeat, Annotations: write(true)}, t.heartbeat)
	return s
}

const instructions = `These tools coordinate work between many agents sharing one pool of tasks.
Before working on a task, take it with checkout_task (a task you were given) or claim_task
(any open task). Only work on a task while you hold its lease. If checkout_task answers
acquired=false, another agent holds the task: do not work on it; pick another task or
call checkout_task again later (with watch=true to be told when it is free). When done,
call complete_task; if you give up, call release_task. Long work: call renew_task before
the lease expires.`

const descCheckout = `Take the lease on one task before you start working on it, so that no other agent works on it at the same time.
Answers acquired=true with your lease (expires_at is when it ends unless you renew it with renew_task), or acquired=false with holder: another agent already holds the task. acquired=false is a normal answer, not an error: do NOT work on that task; pick another task (claim_task gives you one), or, if you need this very task, call checkout_task again with watch=true so the task's release is announced to your inbox, and try again later.
Calling it again for a task you already hold returns the same lease. Fails (isError) for an unknown task id or a task already done or cancelled.`

const descClaim = `Take the lease on the oldest open task in the pool when you have no particular task to work on. Answers acquired=true with the lease (its task_id is your task), or acquired=false when no task is available right now: wait a while before claiming again, or stop.`

const descRenew = `Extend your lease on a task you hold, before it expires, when your work takes longer than the lease timeout. Renew well before expires_at (for example at a third of the timeout). Optionally give a new timeout. Fails (isError) when you no longer hold the task: your lease expired or was released, and another agent may now be working on it; stop working on it and check task_status.`

const descComplete = `Mark a task you hold as done when you have finished the work. This ends your lease and the task is never handed out again. Fails (isError) when you no longer hold the task (your lease expired or someone else holds it): check task_status before assuming your work counts.`

const descRelease = `Give a task back without finishing it, for example when you are blocked or stop working. The task becomes open again at once and agents watching it are told. Give a short reason. Fails (isError) when you do not hold the task.`

const descStatus = `Check whether a task is checked out right now and by whom, and how long its lease has left. Use it before deciding to wait for a task, or to confirm you still hold one. Read-only.`

const descList = `List every live lease, or only one agent's (agent_id). Use it to see which tasks are taken and by whom, or which tasks you still hold. Read-only.`

const descHeartbeat = `Tell the service you are still alive. Once you have sent one heartbeat you are watched: if no heartbeat arrives within its ttl (default 90s), you are considered dead and all your leases end so other agents can take your tasks. Send one every ttl/3 while you work, or never send any and rely on lease timeouts alone.`

// CheckoutInput is checkout_task's input.
type CheckoutInput struct {
	TaskID  string `json:"task_id" jsonschema:"the id of the task to take"`
	Timeout string `json:"timeout,omitempty" jsonschema:"lease length as a Go duration such as 30m or 2h (1s to 24h); default 30m"`
	Reason  string `json:"reason,omitempty" jsonschema:"what you are going to do, shown to other agents"`
	Watch   bool   `json:"watch,omitempty" jsonschema:"when the task is held by another agent, get an inbox message once it is released"`
}

// ClaimInput is claim_task's input.
type ClaimInput struct {
	Timeout string `json:"timeout,omitempty" jsonschema:"lease length as a Go duration such as 30m or 2h (1s to 24h); default 30m"`
	Reason  string `json:"reason,omitempty" jsonschema:"what you are going to do, shown to other agents"`
}

// RenewInput is renew_task's input.
type RenewInput struct {
	TaskID  string `json:"task_id" jsonschema:"the task whose lease you hold"`
	Timeout string `json:"timeout,omitempty" jsonschema:"new lease length from now, as a Go duration such as 30m; default the lease's own"`
}

// TaskInput names one task.
type TaskInput struct {
	TaskID string `json:"task_id" jsonschema:"the task's id"`
}

// ReleaseInput is release_task's input.
type ReleaseInput struct {
	TaskID string `json:"task_id" jsonschema:"the task whose lease you hold"`
	Reason string `json:"reason,omitempty" jsonschema:"why you give it back"`
}

// ListInput is list_checkouts' input.
type ListInput struct {
	AgentID string `json:"agent_id,omitempty" jsonschema:"only this agent's leases; empty for all"`
}

// HeartbeatInput is heartbeat's input.
type HeartbeatInput struct {
	TTL string `json:"ttl,omitempty" jsonschema:"how long this heartbeat keeps you alive, as a Go duration (1s to 1h); default 90s"`
}

// CheckoutResult is the answer of checkout_task and claim_task.
type CheckoutResult struct {
	Acquired bool   `json:"acquired" jsonschema:"true when you now hold the lease and may work on the task"`
	TaskID   string `json:"task_id,omitempty" jsonschema:"the task"`
	// Checkout is your lease when Acquired.
	Checkout *client.Checkout `json:"checkout,omitempty" jsonschema:"your lease, when acquired"`
	// Holder is the other agent's lease when the task is held.
	Holder   *client.Checkout `json:"holder,omitempty" jsonschema:"the lease of the agent holding the task, when not acquired"`
	Watching bool             `json:"watching,omitempty" jsonschema:"true when you will get an inbox message once the task is released"`
	Message  string           `json:"message" jsonschema:"what happened and what to do next"`
}

// LeaseResult is the answer of renew_task.
type LeaseResult struct {
	Checkout client.Checkout `json:"checkout" jsonschema:"your renewed lease"`
	Message  string          `json:"message"`
}

// CompleteResult is the answer of complete_task.
type CompleteResult struct {
	Task    client.Task `json:"task" jsonschema:"the task, now done"`
	Message string      `json:"message"`
}

// ReleaseResult is the answer of release_task.
type ReleaseResult struct {
	Released client.Released `json:"released"`
	Message  string          `json:"message"`
}

// StatusResult is the answer of task_status.
type StatusResult struct {
	client.LockStatus
	Message string `json:"message"`
}

// ListResult is the answer of list_checkouts.
type ListResult struct {
	Checkouts []client.Checkout `json:"checkouts"`
	Message   string            `json:"message"`
}

// HeartbeatResult is the answer of heartbeat.
type HeartbeatResult struct {
	client.Heartbeat
	Message string `json:"message"`
}

func text(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func holderText(h client.Checkout) string {
	s := fmt.Sprintf("held by %s (%s) since %s until %s", h.AgentName, h.AgentID, stamp(h.LockedAt), stamp(h.ExpiresAt))
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
		return 0, fmt.Errorf("invalid %s %q: use a Go duration such as 90s, 30m or 2h", field, v)
	}
	return d, nil
}

// toolError turns a client error into the message of a failed tool call.
func toolError(err error) error {
	var ae *client.APIError
	var ue *client.UnreachableError
	switch {
	case errors.As(err, &ue):
		return fmt.Errorf("%s; the checkout server is down or CHECKOUT_URL is wrong", ue.Error())
	case errors.Is(err, client.ErrUnauthorized):
		return errors.New("unauthorized: the API key (CHECKOUT_API_KEY) is missing, wrong or revoked")
	case errors.Is(err, client.ErrNotHolder), errors.Is(err, client.ErrNotCheckedOut):
		var ne *client.NotHolderError
		msg := "you do not hold this task's lease (it expired, was released, or another agent holds it): stop working on it"
		if errors.As(err, &ne) && ne.Holder.AgentID != "" {
			msg += "; it is " + holderText(ne.Holder)
		}
		return errors.New(msg)
	case errors.As(err, &ae):
		return errors.New(ae.Message)
	}
	return err
}

func (t *tools) checkout(ctx context.Context, _ *mcp.CallToolRequest, in CheckoutInput) (*mcp.CallToolResult, CheckoutResult, error) {
	d, err := parseDur("timeout", in.Timeout)
	if err != nil {
		return nil, CheckoutResult{}, err
	}
	co, err := t.c.Checkout(ctx, in.TaskID, client.CheckoutRequest{Timeout: d, Reason: in.Reason, RunID: t.runID, Watch: in.Watch})
	var ce *client.ConflictError
	if errors.As(err, &ce) {
		h := ce.Holder
		r := CheckoutResult{TaskID: in.TaskID, Holder: &h, Watching: in.Watch}
		r.Message = fmt.Sprintf("Checkout DENIED: task %s is %s. Do not work on it. ", in.TaskID, holderText(h))
		if in.Watch {
			r.Message += "You will get an inbox message when it is released; meanwhile pick another task (claim_task)."
		} else {
			r.Message += "Pick another task (claim_task), or wait and call checkout_task again (watch=true to be told when it is free)."
		}
		return text(r.Message), r, nil
	}
	var sm *client.StatusMismatchError
	if errors.As(err, &sm) {
		return nil, CheckoutResult{}, fmt.Errorf("task %s has status %s and cannot be checked out; pick another task", in.TaskID, sm.Status)
	}
	if err != nil {
		return nil, CheckoutResult{}, toolError(err)
	}
	r := CheckoutResult{Acquired: true, TaskID: co.TaskID, Checkout: &co,
		Message: fmt.Sprintf("Checkout acquired: task %s is yours until %s (fence %d). Work on it, renew_task before then if you need longer, and complete_task when done.",
			co.TaskID, stamp(co.ExpiresAt), co.Fence)}
	return text(r.Message), r, nil
}

func (t *tools) claim(ctx context.Context, _ *mcp.CallToolRequest, in ClaimInput) (*mcp.CallToolResult, CheckoutResult, error) {
	d, err := parseDur("timeout", in.Timeout)
	if err != nil {
		return nil, CheckoutResult{}, err
	}
	co, err := t.c.Claim(ctx, client.ClaimRequest{Timeout: d, Reason: in.Reason, RunID: client.NewRunID()})
	if errors.Is(err, client.ErrNoTaskAvailable) || errors.Is(err, client.ErrCheckedOut) {
		r := CheckoutResult{Message: "No task is available right now: every open task is taken. Wait a while before calling claim_task again, or stop."}
		return text(r.Message), r, nil
	}
	if err != nil {
		return nil, CheckoutResult{}, toolError(err)
	}
	r := CheckoutResult{Acquired: true, TaskID: co.TaskID, Checkout: &co,
		Message: fmt.Sprintf("Claimed task %s: it is yours until %s (fence %d). Work on it, renew_task before then if you need longer, and complete_task when done.",
			co.TaskID, stamp(co.ExpiresAt), co.Fence)}
	return text(r.Message), r, nil
}

func (t *tools) renew(ctx context.Context, _ *mcp.CallToolRequest, in RenewInput) (*mcp.CallToolResult, LeaseResult, error) {
	d, err := parseDur("timeout", in.Timeout)
	if err != nil {
		return nil, LeaseResult{}, err
	}
	co, err := t.c.Renew(ctx, in.TaskID, client.RenewRequest{Timeout: d})
	if err != nil {
		return nil, LeaseResult{}, toolError(err)
	}
	r := LeaseResult{Checkout: co, Message: fmt.Sprintf("Lease on task %s renewed until %s.", co.TaskID, stamp(co.ExpiresAt))}
	return text(r.Message), r, nil
}

func (t *tools) complete(ctx context.Context, _ *mcp.CallToolRequest, in TaskInput) (*mcp.CallToolResult, CompleteResult, error) {
	task, err := t.c.Complete(ctx, in.TaskID, client.CompleteRequest{})
	if err != nil {
		return nil, CompleteResult{}, toolError(err)
	}
	r := CompleteResult{Task: task, Message: fmt.Sprintf("Task %s is done and your lease has ended.", task.TaskID)}
	return text(r.Message), r, nil
}

func (t *tools) release(ctx context.Context, _ *mcp.CallToolRequest, in ReleaseInput) (*mcp.CallToolResult, ReleaseResult, error) {
	rel, err := t.c.Release(ctx, in.TaskID, client.ReleaseRequest{Reason: in.Reason})
	if err != nil {
		return nil, ReleaseResult{}, toolError(err)
	}
	r := ReleaseResult{Released: rel, Message: fmt.Sprintf("Task %s released after %ds; it is open for other agents again.", rel.TaskID, rel.HeldSeconds)}
	return text(r.Message), r, nil
}

func (t *tools) status(ctx context.Context, _ *mcp.CallToolRequest, in TaskInput) (*mcp.CallToolResult, StatusResult, error) {
	s, err := t.c.Status(ctx, in.TaskID)
	if err != nil {
		return nil, StatusResult{}, toolError(err)
	}
	r := StatusResult{LockStatus: s, Message: fmt.Sprintf("Task %s is not checked out.", in.TaskID)}
	if s.Locked && s.Checkout != nil {
		r.Message = fmt.Sprintf("Task %s is %s (%ds left).", in.TaskID, holderText(*s.Checkout), s.Checkout.RemainingSeconds)
	}
	return text(r.Message), r, nil
}

func (t *tools) list(ctx context.Context, _ *mcp.CallToolRequest, in ListInput) (*mcp.CallToolResult, ListResult, error) {
	cos, err := t.c.ListCheckouts(ctx, in.AgentID)
	if err != nil {
		return nil, ListResult{}, toolError(err)
	}
	if cos == nil {
		cos = []client.Checkout{}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d live checkout(s).", len(cos))
	for _, co := range cos {
		fmt.Fprintf(&b, "\n- %s: %s", co.TaskID, holderText(co))
	}
	r := ListResult{Checkouts: cos, Message: b.String()}
	return text(r.Message), r, nil
}

func (t *tools) heartbeat(ctx context.Context, _ *mcp.CallToolRequest, in HeartbeatInput) (*mcp.CallToolResult, HeartbeatResult, error) {
	d, err := parseDur("ttl", in.TTL)
	if err != nil {
		return nil, HeartbeatResult{}, err
	}
	h, err := t.c.Heartbeat(ctx, d)
	if err != nil {
		return nil, HeartbeatResult{}, toolError(err)
	}
	r := HeartbeatResult{Heartbeat: h, Message: fmt.Sprintf("Alive until %s: send the next heartbeat before then.", stamp(h.ExpiresAt))}
	return text(r.Message), r, nil
}
