package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/checkout-dev/checkout/client"
	"github.com/checkout-dev/checkout/errcode"
	"github.com/checkout-dev/checkout/lease"
)

// The tools' handlers: each calls the API through the client and says what
// happened, and what to do next, in its result's message.

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func holderText(h client.Checkout) string {
	s := fmt.Sprintf("held by %s (%s) under run %s, fence %d, since %s until %s", h.AgentName, h.AgentID, h.RunID, h.Fence, stamp(h.LockedAt), stamp(h.ExpiresAt))
	if h.Reason != "" {
		s += fmt.Sprintf(", reason: %q", h.Reason)
	}
	return s
}

func (t *tools) hold(co client.Checkout) {
	t.mu.Lock()
	t.leases[co.TaskID] = held{co.RunID, co.Fence}
	t.self = co.AgentID
	t.mu.Unlock()
}

// holds reports whether co is the lease this session holds on its task.
func (t *tools) holds(co client.Checkout) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	l, ok := t.leases[co.TaskID]
	return ok && l.runID == co.RunID && l.fence == co.Fence
}

func (t *tools) drop(taskID string) {
	t.mu.Lock()
	delete(t.leases, taskID)
	t.mu.Unlock()
}

// end drops the lease this session held on a task, and remembers the one
// its release or completion named as runID and fence: a repeat names it
// again, and is answered as the first was.
func (t *tools) end(taskID, runID string, fence int64) {
	t.mu.Lock()
	delete(t.leases, taskID)
	if _, ok := t.ended[taskID]; !ok && len(t.ended) >= maxEnded {
		for k := range t.ended { // any one: a repeat comes soon after its ending
			delete(t.ended, k)
			break
		}
	}
	t.ended[taskID] = held{runID, fence}
	t.mu.Unlock()
}

// maxEnded bounds the endings a session remembers for repeats, so that a
// session that works through many tasks does not grow without end.
const maxEnded = 1024

// lease is how a renewal, release or completion names its lease: by the
// fence given (adopting a lease of an earlier run), by the lease this
// session took, by the lease it ended last, or by the session's run id.
// A fence given must be 1 or more, as the API and the CLI ask: fences
// start at 1, and 0 is no fence.
func (t *tools) lease(in LeaseInput) (runID string, fence int64, err error) {
	if in.Fence != nil {
		if *in.Fence < 1 {
			return "", 0, &argError{fmt.Sprintf("fence must be 1 or more, not %d: give the fence checkout_task or task_status showed, or leave it out for this session's lease", *in.Fence)}
		}
		return "", *in.Fence, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if l, ok := t.leases[in.TaskID]; ok {
		return l.runID, l.fence, nil
	}
	if l, ok := t.ended[in.TaskID]; ok {
		return l.runID, l.fence, nil
	}
	return t.runID, 0, nil
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

// grant is what an agent that just took a lease should know of its task:
// its title and, when the lease is not the task's first attempt, a
// sentence saying which attempt it is (retry), with the error the latest
// failed attempt was given back with (the task's last_error).
type grant struct {
	title, lastError, retry string
}

// taken reads, once, the task of a lease just granted as co: whether the
// lease is live, and what grant the agent should know. An agent whose
// heartbeats have run out is dead until its next one, and a lease it
// takes meanwhile is granted but not live: any agent may take the task at
// once (API.md), so it is no lease to work under; dead is then the answer
// that says so. The read is the task's lock (GET .../checkout) when the
// lease carries all the grant needs (a claim's title, on a first
// attempt), else the task itself, whose checkout is the same live lease.
// A task that cannot be read leaves the grant as it is, with the title
// the lease carries.
func (t *tools) taken(ctx context.Context, co client.Checkout) (g grant, dead *CheckoutResult) {
	g.title = co.Title
	var live *client.Checkout
	if co.Title != "" && co.Attempt <= 1 {
		s, err := t.c.Status(ctx, co.TaskID)
		if err != nil {
			return g, nil
		}
		live = s.Checkout
	} else {
		task, err := t.c.GetTask(ctx, co.TaskID)
		if err != nil {
			return g, nil
		}
		live, g.title = task.Checkout, task.Title
		if co.Attempt > 1 {
			g.lastError = task.LastError
			g.retry = fmt.Sprintf(" This is attempt %d of %d: the earlier ones did not complete it.", co.Attempt, task.MaxAttempts)
			if task.LastError != "" {
				g.retry += fmt.Sprintf(" The latest failed one was given back with this error (last_error): %q; take it into account.", task.LastError)
			}
		}
	}
	if live != nil && live.Fence == co.Fence {
		return g, nil
	}
	return grant{}, notLive(co, live)
}

func named(taskID, title string) string {
	if title == "" {
		return taskID
	}
	return fmt.Sprintf("%s (%q)", taskID, title)
}

// watchListFull is what a checkout with watch says when the server left
// the caller off the task's watch list: it was full, or could not take
// the watch just now.
var watchListFull = fmt.Sprintf("You asked to watch it, but its watch list is full (%d watchers) or could not take the watch just now, so you are NOT watching it: no message will come. ", lease.MaxWatchers)

func (t *tools) checkout(ctx context.Context, in CheckoutInput) (CheckoutResult, error) {
	d, err := parseDur("timeout", in.Timeout)
	if err != nil {
		return CheckoutResult{}, err
	}
	co, err := t.c.Checkout(ctx, in.TaskID, client.CheckoutRequest{Timeout: d, Reason: in.Reason, RunID: t.runID, Watch: in.Watch, AgentID: t.agentID})
	var ce *client.ConflictError
	var be *client.BlockedError
	if errors.As(err, &ce) && ce.SameAgent && t.holds(ce.Holder) {
		// The lease this session took by claim_task, under the claim's
		// own run id: the same lease, as checking out again answers.
		co, err = ce.Holder, nil
	}
	switch {
	case errors.As(err, &ce) && ce.SameAgent && in.Adopt:
		return t.adopt(ctx, ce.Holder, d)
	case errors.As(err, &ce) && ce.SameAgent:
		h := ce.Holder
		t.mu.Lock()
		t.self = h.AgentID
		t.mu.Unlock()
		r := CheckoutResult{TaskID: in.TaskID, HeldByYou: true, Outcome: Outcome{Holder: &h}, Watching: ce.Watching, Title: t.title(ctx, h)}
		r.Message = fmt.Sprintf("You (agent %s) already hold task %s under another run (run %s, fence %d, until %s), probably from before this session restarted. "+
			"If you were working on it, call checkout_task again with adopt=true to continue that lease here (or give fence=%d to renew_task, release_task or complete_task). "+
			"If another session of yours is working on it, leave it and pick another task.",
			h.AgentID, named(in.TaskID, r.Title), h.RunID, h.Fence, stamp(h.ExpiresAt), h.Fence)
		return r, nil
	case errors.As(err, &ce):
		h := ce.Holder
		retry := int64(ce.RetryAfter / time.Second)
		// Watching is what the server said: a full watch list (or a
		// watch that could not be placed) leaves the caller off it, watch
		// or not.
		r := CheckoutResult{TaskID: in.TaskID, Outcome: Outcome{Holder: &h}, Watching: ce.Watching, Title: t.title(ctx, h),
			RetryAfterSeconds: &retry, HolderHeartbeatExpiresAt: ce.HeartbeatExpiresAt}
		r.Message = fmt.Sprintf("Checkout DENIED: task %s is %s; it cannot end without its holder for another %ds. Do not work on it. ",
			named(in.TaskID, r.Title), holderText(h), retry)
		switch {
		case ce.Watching:
			r.Message += "You will get a message in read_inbox when it is released; meanwhile pick another task (claim_task)."
		case in.Watch:
			r.Message += watchListFull + "Pick another task (claim_task), and try again later."
		default:
			r.Message += "Pick another task (claim_task), or watch it (watch_task) and try again once read_inbox says it is free."
		}
		return r, nil
	case errors.As(err, &be):
		r := CheckoutResult{TaskID: in.TaskID, Outcome: denial(in.TaskID, err), Watching: be.Watching}
		switch {
		case be.Watching:
			r.Message += " You will get a message in read_inbox when it is unblocked."
		case in.Watch:
			r.Message += " " + strings.TrimSuffix(watchListFull, " ")
		}
		return r, nil
	case errors.Is(err, client.ErrNotReady), errors.Is(err, client.ErrStatusMismatch):
		// Like a conflict, a task nobody may take now is an answer: the
		// agent picks another task. The service places no watch on a
		// task waiting for its time (a watch waits for a freeing).
		// Nor on a done, cancelled or failed one: asked to, the answer
		// says so (watching stays false).
		r := CheckoutResult{TaskID: in.TaskID, Outcome: denial(in.TaskID, err)}
		switch {
		case !in.Watch:
		case errors.Is(err, client.ErrNotReady):
			r.Message += " You asked to watch it, but you are NOT watching it: a task waiting for its time is watched by nobody, so no message will come; check it out again then."
		default:
			r.Message += " You asked to watch it, but you are NOT watching it: a checkout watches only a task another agent holds or a blocked one, so no message will come " +
				"(watch_task would be told only once it is reopened with update_task status todo, taken and freed again)."
		}
		return r, nil
	case err != nil:
		return CheckoutResult{}, undecided(err, "The checkout of task "+in.TaskID,
			"you may hold it now. Call checkout_task again: under this session's run it answers with your lease if you got it, and takes the task if not. Do not work on the task until it answers acquired")
	}
	tk, dead := t.taken(ctx, co)
	if dead != nil {
		return *dead, nil
	}
	t.hold(co)
	r := CheckoutResult{Acquired: true, TaskID: co.TaskID, Checkout: &co, Title: tk.title, LastError: tk.lastError}
	retry := tk.retry
	r.Message = fmt.Sprintf("Checkout acquired: task %s is yours until %s (fence %d).%s Work on it, renew_task before then if you need longer, and complete_task when done.",
		named(co.TaskID, r.Title), stamp(co.ExpiresAt), co.Fence, retry)
	return r, nil
}

// adopt continues h, a lease of the agent's earlier run, in this session:
// a renewal by its fence proves it is the agent's and extends it.
func (t *tools) adopt(ctx context.Context, h client.Checkout, timeout time.Duration) (CheckoutResult, error) {
	co, err := t.c.Renew(ctx, h.TaskID, client.RenewRequest{Timeout: timeout, Fence: h.Fence, AgentID: t.agentID})
	if err != nil {
		// A renewal changes something: one whose answer was lost is
		// undecided, as renew_task's is.
		return CheckoutResult{}, undecided(t.leaseError(ctx, h.TaskID, h.Fence, err), "The adoption (a renewal by fence "+fmt.Sprint(h.Fence)+") of task "+h.TaskID,
			"call checkout_task again with adopt=true: adopting twice does no harm")
	}
	t.hold(co)
	r := CheckoutResult{Acquired: true, Adopted: true, TaskID: co.TaskID, Checkout: &co, Title: t.title(ctx, co)}
	r.Message = fmt.Sprintf("Adopted your earlier run's lease on task %s (run %s, fence %d): it is yours in this session until %s. Go on with the work, renew_task before then if you need longer, and complete_task when done.",
		named(co.TaskID, r.Title), co.RunID, co.Fence, stamp(co.ExpiresAt))
	return r, nil
}

func (t *tools) claim(ctx context.Context, in ClaimInput) (CheckoutResult, error) {
	t.claiming.add()
	defer t.claiming.done()
	if t.stop != nil {
		// Stopped with the server, the claim gives back what it took.
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(t.stop, cancel)()
	}
	d, err := parseDur("timeout", in.Timeout)
	if err != nil {
		return CheckoutResult{}, err
	}
	// Each claim has its own run id, derived from the session's: the API
	// answers a claim whose run already holds a lease with that lease. A
	// claim whose answer was lost may hold one: the next claim takes its
	// run id again, and so gets that lease rather than a second task.
	t.mu.Lock()
	var runID string
	if len(t.lostClaims) > 0 {
		runID = t.lostClaims[0]
	}
	again := runID != "" // under a lost claim's run
	if runID == "" {
		t.claims++
		runID = fmt.Sprintf("%s.c%d", t.runID, t.claims)
	}
	t.mu.Unlock()
	wait, err := parseWait(in.Wait)
	if err != nil {
		return CheckoutResult{}, err
	}
	if in.Queues != nil && len(in.Queues) == 0 {
		return CheckoutResult{}, &argError{"queues must name at least one queue; leave it out to claim from the default queue"}
	}
	// A claim the client cancels on its way is seen through, and the task
	// it took given back: behind API Gateway the server goes on with it
	// (waiting, then granting) for an agent that no longer expects it.
	co, err := t.c.ClaimOrGiveBack(ctx, client.ClaimRequest{Timeout: d, Reason: in.Reason, RunID: runID, AgentID: t.agentID, Queues: in.Queues, Wait: wait})
	// Answered (a 4xx included), the claim's outcome is known; without
	// an answer, or with a 5xx, it may hold a lease, as it may when a try
	// lost its answer and the client's retries were throttled (429), or
	// when the give-back of a cancelled one failed.
	var ae *client.APIError
	se := (*client.StoppedClaimError)(nil)
	stopped := errors.As(err, &se)
	t.mu.Lock()
	if err == nil || stopped && se.Held == nil || errors.As(err, &ae) && ae.Status < 500 && !errors.Is(err, client.ErrUndecided) {
		t.claimDecided(runID)
	} else {
		t.claimLost(runID)
	}
	t.mu.Unlock()
	switch {
	case stopped && se.GivenBack != nil:
		return CheckoutResult{}, &stated{Outcome{Code: codeCancelled, Message: fmt.Sprintf(
			"The claim was cancelled on its way; the server had already granted it task %s (fence %d), which was given back (released): you hold nothing from it.", se.GivenBack.TaskID, se.GivenBack.Fence)}}
	case stopped && se.Held != nil:
		return CheckoutResult{}, &stated{Outcome{Code: codeCancelled, Message: fmt.Sprintf(
			"The claim was cancelled on its way, and %v: it may have taken a task. Call claim_task again: it claims under the same run, so it answers with that lease if the claim took one, and claims a task if not. Do not work on any task until it answers.", se.Held)}}
	case stopped:
		return CheckoutResult{}, &stated{Outcome{Code: codeCancelled, Message: "The claim was cancelled on its way, and took no task: you hold nothing from it."}}
	}
	if errors.Is(err, client.ErrNoTaskAvailable) || errors.Is(err, client.ErrCheckedOut) {
		return CheckoutResult{Outcome: Outcome{Message: fmt.Sprintf(
			"No task is available in %s right now. Wait a while before calling claim_task again, watch a task (watch_task), or stop.", queuesText(in.Queues))}}, nil
	}
	if err != nil {
		return CheckoutResult{}, undecided(err, "The claim",
			"it may have taken a task. Call claim_task again: it claims under the same run, so it answers with that lease if the claim took one, and claims a task if not. Do not work on any task until it answers")
	}
	tk, dead := t.taken(ctx, co)
	if dead != nil && again && co.RemainingSeconds <= 0 {
		// The lost claim's lease, answered as it was when it ended (it
		// timed out, or was released or taken over, since): no grant.
		dead.Message = fmt.Sprintf("Not claimed: your earlier claim_task, whose answer was lost, took task %s (fence %d), and that lease has ended since (at %s): you hold nothing, do not work on it. Call claim_task again to take a task.",
			co.TaskID, co.Fence, stamp(co.ExpiresAt))
	}
	if dead != nil {
		return *dead, nil
	}
	if ctx.Err() != nil {
		// Cancelled (or stopped) once granted, while the task was read:
		// nobody will work under the lease, so it is given back, as one
		// cancelled on its way is.
		return CheckoutResult{}, t.giveBack(ctx, co, runID)
	}
	t.hold(co)
	r := CheckoutResult{Acquired: true, TaskID: co.TaskID, Checkout: &co, Title: tk.title, LastError: tk.lastError}
	retry := tk.retry
	r.Message = fmt.Sprintf("Claimed task %s (queue %s, priority %d): it is yours until %s (fence %d).%s Work on it, renew_task before then if you need longer, and complete_task when done.",
		named(co.TaskID, r.Title), co.Queue, co.Priority, stamp(co.ExpiresAt), co.Fence, retry)
	return r, nil
}

// claimLost notes runID as a claim's run that may hold a lease nobody
// was told of; t.mu is held.
func (t *tools) claimLost(runID string) {
	if slices.Contains(t.lostClaims, runID) {
		return
	}
	if len(t.lostClaims) >= maxEnded {
		t.lostClaims = t.lostClaims[1:]
	}
	t.lostClaims = append(t.lostClaims, runID)
}

// claimDecided notes that a claim under runID was answered: it holds no
// lease the agent was not told of. t.mu is held.
func (t *tools) claimDecided(runID string) {
	t.lostClaims = slices.DeleteFunc(t.lostClaims, func(r string) bool { return r == runID })
}

// giveBack releases co, the lease a claim of run runID was granted, when
// its call was cancelled (or its session stopped) before it answered, as
// client.ClaimOrGiveBack does for a claim cancelled on its way. When the
// release fails, the next claim_task claims under runID again, and so
// answers with that lease if it is still held.
func (t *tools) giveBack(ctx context.Context, co client.Checkout, runID string) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), client.ClaimStopGrace)
	defer cancel()
	_, err := t.c.Release(rctx, co.TaskID, client.ReleaseRequest{RunID: co.RunID, Fence: co.Fence, AgentID: t.agentID, Reason: "the claim was cancelled before its work began"})
	if err != nil && !errors.Is(err, client.ErrNotCheckedOut) && !errors.Is(err, client.ErrNotHolder) {
		t.mu.Lock()
		t.claimLost(runID)
		t.mu.Unlock()
		return &stated{Outcome{Code: codeCancelled, Message: fmt.Sprintf(
			"The claim was cancelled once the server had granted it task %s (fence %d), and its release failed: you may still hold it. Call claim_task again: it claims under the same run, so it answers with that lease if it is still yours. Do not work on any task until it answers.", co.TaskID, co.Fence)}}
	}
	return &stated{Outcome{Code: codeCancelled, Message: fmt.Sprintf(
		"The claim was cancelled once the server had granted it task %s (fence %d), which was given back (released): you hold nothing from it.", co.TaskID, co.Fence)}}
}

// notLive is the answer to a grant co whose lease is not live: live is
// the task's live lease (another's, which took it over at once), or nil.
func notLive(co client.Checkout, live *client.Checkout) *CheckoutResult {
	r := CheckoutResult{TaskID: co.TaskID, Outcome: Outcome{Code: codeNotLive}}
	if live != nil {
		h := *live
		r.Holder = &h
		r.Message = fmt.Sprintf("Checkout DENIED: task %s was granted to you (fence %d), but another lease took it over at once: it is %s. Do not work on it; pick another task (claim_task).",
			co.TaskID, co.Fence, holderText(h))
		return &r
	}
	r.Message = fmt.Sprintf("Checkout NOT live: task %s was granted to you (fence %d), but it is not live: your agent (%s) is dead by heartbeat (its last heartbeat ran out, and a lease it takes before its next one keeps nobody off the task), or the lease has already ended. Do not work on it: call heartbeat, then take a task again.",
		co.TaskID, co.Fence, co.AgentID)
	return &r
}

// codeNotLive is the code of a grant that is not live (see notLive).
const codeNotLive = "not_live"

// queuesText is "queue default" or "queues backend, frontend".
func queuesText(queues []string) string {
	switch len(queues) {
	case 0:
		return "queue " + lease.DefaultQueue
	case 1:
		return "queue " + queues[0]
	}
	return "queues " + strings.Join(queues, ", ")
}

func (t *tools) createTask(ctx context.Context, in CreateTaskInput) (TaskResult, error) {
	req := client.CreateTaskRequest{TaskID: in.TaskID, Title: in.Title, Description: in.Description, Queue: in.Queue, Priority: in.Priority, Metadata: rawObject(in.Metadata),
		BlockedBy: in.BlockedBy, MaxAttempts: in.MaxAttempts}
	var err error
	if req.RetryDelay, err = parseDelay(in.RetryDelay); err != nil {
		return TaskResult{}, err
	}
	if in.NotBefore != "" {
		nb, err := parseTime("not_before", in.NotBefore)
		if err != nil {
			return TaskResult{}, err
		}
		req.NotBefore = &nb
	}
	task, err := t.c.CreateTask(ctx, req)
	t.mu.Lock()
	lost := t.lostCreates[in.TaskID]
	delete(t.lostCreates, in.TaskID)
	if errors.Is(err, client.ErrUndecided) && in.TaskID != "" && len(t.lostCreates) < maxEnded {
		t.lostCreates[in.TaskID] = true
	}
	t.mu.Unlock()
	if errors.Is(err, client.ErrTaskExists) && in.TaskID != "" {
		if task, err = t.c.GetTask(ctx, in.TaskID); err == nil {
			msg := fmt.Sprintf("Task %s exists already (status %s); nothing was created.", task.TaskID, task.Status)
			if lost {
				msg = fmt.Sprintf("Task %s exists (status %s): your earlier create_task of it, whose answer was lost, created it (or someone else did); this call created nothing. Check its fields in the task.", task.TaskID, task.Status)
			}
			return TaskResult{Task: &task, Outcome: Outcome{Message: msg}}, nil
		}
	}
	if err != nil && in.TaskID != "" {
		return TaskResult{}, undecided(err, "The creation of task "+in.TaskID, "call get_task to see whether it exists before creating it again")
	}
	if err != nil {
		return TaskResult{}, undecided(err, "The new task", "call list_tasks to see whether it exists before creating it again (a task given a task_id cannot be created twice)")
	}
	msg := fmt.Sprintf("Task %s created in queue %s at priority %d.", task.TaskID, task.Queue, task.Priority)
	return TaskResult{Task: &task, Outcome: Outcome{Message: msg + waitsText(task)}}, nil
}

// waitsText says what a task waits for, if anything: " It waits for
// ... It can be taken from ..., not before." A not_before that has passed
// on the server's clock (the task keeps the not_before of its latest
// failed attempt) is no wait.
func waitsText(task client.Task) string {
	var s string
	if open := openBlockers(task.BlockedBy); len(open) > 0 {
		s += fmt.Sprintf(" It waits for %s: nobody can take it until they are done.", blockerText(open))
	}
	if task.NotBeforeAhead() && task.Status == client.StatusTodo {
		s += fmt.Sprintf(" It can be taken from %s, not before.", stamp(*task.NotBefore))
	}
	return s
}

// openBlockers are the blockers that are not done.
func openBlockers(bs []client.Blocker) []client.Blocker {
	var open []client.Blocker
	for _, b := range bs {
		if b.Status != client.StatusDone {
			open = append(open, b)
		}
	}
	return open
}

// blockerText is "task build (in_progress), task test (failed)".
func blockerText(bs []client.Blocker) string {
	parts := make([]string, len(bs))
	for i, b := range bs {
		parts[i] = fmt.Sprintf("task %s (%s)", b.TaskID, b.Status)
	}
	return strings.Join(parts, ", ")
}

// rawObject is m as JSON, or nil when absent.
func rawObject(m Metadata) json.RawMessage {
	if m == nil {
		return nil
	}
	b, _ := json.Marshal(m)
	return b
}

func (t *tools) updateTask(ctx context.Context, in UpdateTaskInput) (TaskResult, error) {
	if in.Title == nil && in.Description == nil && in.Queue == nil && in.Priority == nil && in.Metadata == nil && in.Status == "" &&
		in.BlockedBy == nil && in.MaxAttempts == nil && in.RetryDelay == "" && in.NotBefore == nil {
		return TaskResult{}, &argError{"nothing to change: give title, description, queue, priority, metadata, status, blocked_by, max_attempts, retry_delay or not_before"}
	}
	// A version given is a condition: 0 (which no task has) would be
	// none, and the change made whatever the task's version.
	var ifVersion int64
	if in.Version != nil {
		if ifVersion = *in.Version; ifVersion < 1 {
			return TaskResult{}, &argError{fmt.Sprintf("version must be 1 or more, not %d: give the version get_task showed, or leave it out to change the task whatever its version", ifVersion)}
		}
	}
	req := client.UpdateTaskRequest{Title: in.Title, Description: in.Description, Queue: in.Queue, Priority: in.Priority,
		Metadata: rawObject(in.Metadata), Status: in.Status, IfVersion: ifVersion, BlockedBy: in.BlockedBy, MaxAttempts: in.MaxAttempts}
	var err error
	if req.RetryDelay, err = parseDelay(in.RetryDelay); err != nil {
		return TaskResult{}, err
	}
	switch {
	case in.NotBefore == nil:
	case *in.NotBefore == "":
		req.ClearNotBefore = true
	default:
		nb, err := parseTime("not_before", *in.NotBefore)
		if err != nil {
			return TaskResult{}, err
		}
		req.NotBefore = &nb
	}
	task, err := t.c.UpdateTask(ctx, in.TaskID, req)
	var ne *client.NotHolderError
	switch {
	case errors.As(err, &ne) && ne.Holder.AgentID != "":
		// Only cancelling a task another agent holds is refused so: the
		// holder check is by agent alone.
		return TaskResult{}, anotherAgent(ne.Holder)
	case errors.Is(err, client.ErrVersionMismatch):
		return TaskResult{}, &stated{Outcome{Code: errcode.VersionMismatch, Message: fmt.Sprintf(
			"task %s has changed since version %d, the version you gave: read it again (get_task) and give its current version", in.TaskID, ifVersion)}}
	case err != nil:
		return TaskResult{}, undecided(err, "The change of task "+in.TaskID, "call get_task to see whether it was made before sending it again")
	}
	if in.Status == "cancelled" {
		t.drop(in.TaskID)
	}
	return TaskResult{Task: &task, Outcome: Outcome{Message: fmt.Sprintf("Task %s is now %s (queue %s, priority %d, version %d).", task.TaskID, task.Status, task.Queue, task.Priority, task.Version) + waitsText(task)}}, nil
}

func (t *tools) renew(ctx context.Context, in RenewInput) (LeaseResult, error) {
	d, err := parseDur("timeout", in.Timeout)
	if err != nil {
		return LeaseResult{}, err
	}
	runID, fence, err := t.lease(in.LeaseInput)
	if err != nil {
		return LeaseResult{}, err
	}
	co, err := t.c.Renew(ctx, in.TaskID, client.RenewRequest{Timeout: d, RunID: runID, Fence: fence, AgentID: t.agentID})
	if err != nil {
		return LeaseResult{}, undecided(t.leaseError(ctx, in.TaskID, fence, err), "The renewal of task "+in.TaskID, "call renew_task again: renewing twice does no harm")
	}
	t.hold(co)
	return LeaseResult{Checkout: &co, Outcome: Outcome{Message: fmt.Sprintf("Lease on task %s renewed until %s (fence %d).", co.TaskID, stamp(co.ExpiresAt), co.Fence)}}, nil
}

// sameLease says why a release or completion whose answer was lost may
// be sent again: it names its lease.
const sameLease = ": it names the same lease, so if the first took effect it is answered as the first was"

func (t *tools) complete(ctx context.Context, in LeaseInput) (CompleteResult, error) {
	runID, fence, err := t.lease(in)
	if err != nil {
		return CompleteResult{}, err
	}
	task, err := t.c.Complete(ctx, in.TaskID, client.CompleteRequest{RunID: runID, Fence: fence, AgentID: t.agentID})
	if err != nil {
		return CompleteResult{}, undecided(t.leaseError(ctx, in.TaskID, fence, err), "The completion of task "+in.TaskID, "call complete_task again"+sameLease)
	}
	t.end(in.TaskID, runID, fence)
	return CompleteResult{Task: &task, Outcome: Outcome{Message: fmt.Sprintf("Task %s is done and your lease has ended. Pick your next task (claim_task).", task.TaskID)}}, nil
}

func (t *tools) release(ctx context.Context, in ReleaseInput) (ReleaseResult, error) {
	runID, fence, err := t.lease(in.LeaseInput)
	if err != nil {
		return ReleaseResult{}, err
	}
	rel, err := t.c.Release(ctx, in.TaskID, client.ReleaseRequest{Reason: in.Reason, RunID: runID, Fence: fence, AgentID: t.agentID})
	if err != nil {
		return ReleaseResult{}, undecided(t.leaseError(ctx, in.TaskID, fence, err), "The release of task "+in.TaskID, "call release_task again"+sameLease)
	}
	t.end(in.TaskID, runID, fence)
	return ReleaseResult{Released: &rel, Outcome: Outcome{Message: fmt.Sprintf("Task %s released after %ds: your lease on it has ended and it was left open for other agents. Do not work on it any more.", rel.TaskID, rel.HeldSeconds)}}, nil
}

func (t *tools) fail(ctx context.Context, in FailInput) (FailResult, error) {
	runID, fence, err := t.lease(in.LeaseInput)
	if err != nil {
		return FailResult{}, err
	}
	rel, err := t.c.Fail(ctx, in.TaskID, in.Error, client.ReleaseRequest{RunID: runID, Fence: fence, AgentID: t.agentID})
	if err != nil {
		return FailResult{}, undecided(t.leaseError(ctx, in.TaskID, fence, err), "The failed attempt's release of task "+in.TaskID, "call fail_task again"+sameLease)
	}
	t.end(in.TaskID, runID, fence)
	r := FailResult{Released: &rel}
	r.Message = fmt.Sprintf("Task %s given back as a failed attempt after %ds; do not work on it any more.", rel.TaskID, rel.HeldSeconds)
	task, err := t.c.GetTask(ctx, in.TaskID)
	if err != nil {
		return r, nil // the failure is recorded; what follows is only news
	}
	r.Task = &task
	switch {
	case task.Status == client.StatusFailed:
		r.Message += fmt.Sprintf(" It has used its %d attempts and is now failed: nobody will be given it again unless it is reopened (update_task status todo).", task.MaxAttempts)
	case task.NotBeforeAhead():
		r.Message += fmt.Sprintf(" Attempt %d of %d failed; it can be taken again from %s.", task.Attempts, task.MaxAttempts, stamp(*task.NotBefore))
	case task.MaxAttempts > 0:
		r.Message += fmt.Sprintf(" Attempt %d of %d failed; it is open again.", task.Attempts, task.MaxAttempts)
	}
	r.Message += " Pick your next task (claim_task)."
	return r, nil
}

func (t *tools) status(ctx context.Context, in TaskInput) (StatusResult, error) {
	s, err := t.c.Status(ctx, in.TaskID)
	if err != nil {
		return StatusResult{}, err
	}
	r := StatusResult{TaskID: s.TaskID, Locked: s.Locked, Checkout: s.Checkout}
	r.Message = fmt.Sprintf("Task %s is not checked out: take it with checkout_task.", in.TaskID)
	if !s.Locked {
		// Not held is not always free: say what it waits for.
		if task, err := t.c.GetTask(ctx, in.TaskID); err == nil {
			switch {
			case task.Status == client.StatusTodo && !task.NotBeforeAhead():
			case task.Status == client.StatusTodo, task.Status == client.StatusBlocked:
				r.Message = fmt.Sprintf("Task %s is not checked out; it is %s.", in.TaskID, task.Status) + waitsText(task)
			default:
				r.Message = fmt.Sprintf("Task %s is not checked out: it is %s, so nobody can take it.", in.TaskID, task.Status)
			}
		}
	}
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

// listReads is how many pages of the task listing list_tasks reads at most
// in one call to fill the page asked for.
const listReads = 10

func (t *tools) listTasks(ctx context.Context, in ListTasksInput) (ListTasksResult, error) {
	limit, err := limitOf(in.Limit)
	if err != nil {
		return ListTasksResult{}, err
	}
	// A page may come short, even empty, with a cursor: read on, within
	// this call, to fill the page asked for.
	p, err := t.c.FillTaskPage(ctx, client.ListTasksRequest{Status: in.Status, Queue: in.Queue, Limit: limit, Cursor: in.Cursor}, listReads)
	if err != nil {
		return ListTasksResult{}, err
	}
	r := ListTasksResult{Tasks: p.Tasks}
	var b strings.Builder
	if len(p.Tasks) == 0 && p.NextCursor != nil {
		fmt.Fprintf(&b, "No tasks in the %d pages read; the listing goes on.", listReads)
	} else {
		fmt.Fprintf(&b, "%d task(s) on this page.", len(p.Tasks))
	}
	for _, task := range p.Tasks {
		fmt.Fprintf(&b, "\n- %s [%s, %s, priority %d]", task.TaskID, task.Status, task.Queue, task.Priority)
		if task.Title != "" {
			fmt.Fprintf(&b, " %q", task.Title)
		}
		if task.Checkout != nil {
			fmt.Fprintf(&b, ", held by %s until %s", task.Checkout.AgentID, stamp(task.Checkout.ExpiresAt))
		}
		if open := openBlockers(task.BlockedBy); len(open) > 0 {
			fmt.Fprintf(&b, ", waits for %s", blockerText(open))
		} else if task.Status == client.StatusBlocked {
			b.WriteString(", blockers all done: todo within about a second")
		}
		if task.NotBeforeAhead() && task.Status == client.StatusTodo {
			fmt.Fprintf(&b, ", not before %s", stamp(*task.NotBefore))
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
	case task.Status == client.StatusTodo && task.NotBeforeAhead():
		msg += fmt.Sprintf(" It is open from %s: take it with checkout_task then.", stamp(*task.NotBefore))
	case task.Status == client.StatusTodo:
		msg += " It is open: take it with checkout_task."
	case task.Status == client.StatusBlocked && len(openBlockers(task.BlockedBy)) > 0:
		msg += fmt.Sprintf(" It waits for %s: nobody can take it until they are done.", blockerText(openBlockers(task.BlockedBy)))
	case task.Status == client.StatusBlocked:
		// The last blocker is done; the change stream makes it todo.
		msg += " Its blockers are all done: it becomes todo within about a second; take it with checkout_task then."
	case task.Status == client.StatusFailed:
		msg += fmt.Sprintf(" It used its %d attempts; update_task with status todo reopens it.", task.MaxAttempts)
	}
	if task.MaxAttempts > 0 && task.Attempts > 0 {
		msg += fmt.Sprintf(" Attempts: %d of %d.", task.Attempts, task.MaxAttempts)
	}
	if task.LastError != "" {
		msg += fmt.Sprintf(" Last error: %q.", task.LastError)
	}
	if len(task.Blocks) > 0 {
		msg += fmt.Sprintf(" Tasks waiting for it: %s.", strings.Join(task.Blocks, ", "))
	}
	return TaskResult{Task: &task, Outcome: Outcome{Message: msg}}, nil
}

func (t *tools) watch(ctx context.Context, in TaskInput) (WatchResult, error) {
	if err := t.c.Watch(ctx, in.TaskID); err != nil {
		return WatchResult{}, undecided(err, "The watch of task "+in.TaskID, "call watch_task again: watching twice does no harm")
	}
	// When the message comes depends on the task's state: read it (best
	// effort; without it the message is the general one).
	msg := fmt.Sprintf("Watching task %s: one message will arrive in read_inbox when it becomes available. Work on something else meanwhile, then try checkout_task.", in.TaskID)
	if task, err := t.c.GetTask(ctx, in.TaskID); err == nil {
		switch {
		case task.Status == client.StatusInProgress:
		case task.Status == client.StatusTodo && task.Checkout == nil && task.NotBeforeAhead():
			msg = fmt.Sprintf("Watching task %s: nobody holds it, but it cannot be taken before %s. The message in read_inbox comes only when it is next freed, not when this wait ends: try checkout_task after that time.", in.TaskID, stamp(*task.NotBefore))
		case task.Status == client.StatusTodo && task.Checkout == nil:
			msg = fmt.Sprintf("Watching task %s: it is free now, so take it with checkout_task. The message in read_inbox comes only when it is next freed (taken by someone and given back).", in.TaskID)
		case task.Status == client.StatusBlocked:
			msg = fmt.Sprintf("Watching task %s: it is blocked; one message will arrive in read_inbox when it is unblocked. Work on something else meanwhile, then try checkout_task.", in.TaskID)
		case task.Status == client.StatusDone || task.Status == client.StatusCancelled || task.Status == client.StatusFailed:
			msg = fmt.Sprintf("Watching task %s: it is %s, so no message comes unless it is reopened, taken and freed again. Do not wait for it; pick another task (claim_task).", in.TaskID, task.Status)
		}
	}
	return WatchResult{TaskID: in.TaskID, Watching: true, Outcome: Outcome{Message: msg}}, nil
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
	fmt.Fprintf(&b, "%d message(s). For each task_available, try checkout_task on the task (another agent may take it first); "+
		"for each lease_lost, stop working on that task (your lease on it ended). Then ack_message the message_id.", r.Total)
	for _, m := range msgs {
		if m.Type == client.MessageLeaseLost {
			fmt.Fprintf(&b, "\n- %s: you lost your lease on task %s (fence %d, %s) at %s: stop working on it", m.MessageID, m.TaskID, m.Fence, m.Reason, stamp(m.At))
			continue
		}
		if m.Reason == string(lease.EventFailed) {
			// Told as a freeing, but the task is failed, not free.
			fmt.Fprintf(&b, "\n- %s: task %s failed at %s (it used its attempts): nobody can take it unless it is reopened (update_task status todo)", m.MessageID, m.TaskID, stamp(m.At))
			continue
		}
		fmt.Fprintf(&b, "\n- %s: task %s became available (%s) at %s", m.MessageID, m.TaskID, m.Reason, stamp(m.At))
		if m.NotBeforeAhead() {
			fmt.Fprintf(&b, "; it may be taken from %s (until then checkout_task answers not_ready)", stamp(*m.NotBefore))
		}
	}
	r.Message = b.String()
	return r, nil
}

func (t *tools) ack(ctx context.Context, in AckInput) (AckResult, error) {
	if in.MessageID == "" || strings.ContainsAny(in.MessageID, "/?#%") {
		return AckResult{}, &argError{fmt.Sprintf("invalid message_id %q: give a message_id as read_inbox lists it", in.MessageID)}
	}
	if err := t.c.DeleteMessage(ctx, in.MessageID); err != nil {
		return AckResult{}, undecided(err, "The deletion of message "+in.MessageID, "call read_inbox to see whether it is still there")
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
		return HeartbeatResult{}, undecided(err, "The heartbeat", "call heartbeat again")
	}
	return HeartbeatResult{AgentID: h.AgentID, ExpiresAt: &h.ExpiresAt, Outcome: Outcome{Message: fmt.Sprintf("Alive until %s: send the next heartbeat before then.", stamp(h.ExpiresAt))}}, nil
}
