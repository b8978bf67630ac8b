package client

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/checkout-dev/checkout/deploy"
	"github.com/checkout-dev/checkout/errcode"
)

func taskPath(taskID, rest string) string {
	return "/api/tasks/" + url.PathEscape(taskID) + rest
}

// Health calls GET /healthz (no key needed): nil when the server is up;
// an *APIError matching ErrUnavailable while it cannot reach its database
// (503 {"ok": false}), or while a gateway in front of it answers a 429 or
// 5xx, once the client's retries are spent; and a *NotServerError when the
// base URL answers, but not as a checkout server.
func (c *Client) Health(ctx context.Context) error {
	var h struct {
		OK *bool `json:"ok"`
	}
	err := c.do(ctx, idempotent, http.MethodGet, "/healthz", nil, &h)
	var ae *APIError
	switch {
	case err == nil && (h.OK == nil || !*h.OK):
		return &NotServerError{URL: c.baseURL, Detail: "200 without {\"ok\": true}"}
	case errors.As(err, &ae) && (ae.Status == http.StatusTooManyRequests || ae.Status >= 500):
		return err
	case errors.As(err, &ae):
		return &NotServerError{URL: c.baseURL, Detail: fmt.Sprintf("%d %s", ae.Status, http.StatusText(ae.Status))}
	}
	return err
}

// Checkout takes a lease on a task. When another live lease holds it, the
// error is a *ConflictError naming the holder (errors.Is ErrCheckedOut).
// An empty req.RunID is replaced by a generated one, which retries reuse.
// When the answer was lost (the error matches ErrUndecided), the returned
// Checkout has only its TaskID and the RunID the request was sent under:
// a Checkout with that RunID answers with the lease, if one was taken.
func (c *Client) Checkout(ctx context.Context, taskID string, req CheckoutRequest) (Checkout, error) {
	if req.RunID == "" {
		req.RunID = NewRunID()
	}
	var err error
	if req.AgentID, err = c.actingAs(ctx, req.AgentID); err != nil {
		return Checkout{}, wrap("checkout", taskID, err)
	}
	var co Checkout
	err = c.do(ctx, idempotent, http.MethodPost, deploy.Expand(deploy.TaskCheckoutPath, taskID), req, &co)
	if errors.Is(err, ErrUndecided) {
		co = Checkout{TaskID: taskID, RunID: req.RunID}
	}
	return co, wrap("checkout", taskID, err)
}

// Claim takes a lease on the best open task of req.Queues: the highest
// priority, then the oldest. With none available the error
// matches ErrNoTaskAvailable. An empty req.RunID is generated as for
// Checkout, and, as for Checkout, a claim whose answer was lost
// (ErrUndecided) returns the RunID it was sent under, and only it: a
// Claim with that RunID answers with the lease it took, if it took one.
// A non-nil empty req.Queues is refused without sending anything (an
// *APIError invalid_request, matching ErrInvalid).
func (c *Client) Claim(ctx context.Context, req ClaimRequest) (Checkout, error) {
	if req.Queues != nil && len(req.Queues) == 0 {
		return Checkout{}, fmt.Errorf("claim: %w", noQueuesError())
	}
	if req.RunID == "" {
		req.RunID = NewRunID()
	}
	var err error
	if req.AgentID, err = c.actingAs(ctx, req.AgentID); err != nil {
		return Checkout{}, fmt.Errorf("claim: %w", err)
	}
	var co Checkout
	err = c.do(ctx, idempotent, http.MethodPost, "/api/claim", req, &co)
	if errors.Is(err, ErrUndecided) {
		co = Checkout{RunID: req.RunID}
	}
	if err != nil {
		return co, fmt.Errorf("claim: %w", err)
	}
	return co, nil
}

// Renew extends the caller's lease.
func (c *Client) Renew(ctx context.Context, taskID string, req RenewRequest) (Checkout, error) {
	var err error
	if req.AgentID, err = c.actingAs(ctx, req.AgentID); err != nil {
		return Checkout{}, wrap("renew", taskID, err)
	}
	var co Checkout
	err = c.do(ctx, idempotent, http.MethodPost, taskPath(taskID, "/renew"), req, &co)
	return co, wrap("renew", taskID, err)
}

// Release ends the caller's lease (or, with Force, anyone's: admins only).
// A release that names its lease (RunID or Fence) is idempotent, so it is
// retried like a checkout: the server answers a repeat of a release it has
// made as released. One that names no lease is retried only when the server
// cannot have acted on it.
func (c *Client) Release(ctx context.Context, taskID string, req ReleaseRequest) (Released, error) {
	var err error
	if req.AgentID, err = c.actingAs(ctx, req.AgentID); err != nil {
		return Released{}, wrap("release", taskID, err)
	}
	var r Released
	err = c.do(ctx, retryNaming(req.RunID, req.Fence), http.MethodPost, taskPath(taskID, "/release"), req, &r)
	return r, wrap("release", taskID, err)
}

// Fail ends the caller's lease as a failed attempt: a release with outcome
// failed and errText (cut to MaxErrorLen bytes) as its error, which becomes
// the task's LastError. req names the lease as for Release (RunID, Fence,
// AgentID); its Outcome and Error are set here. The task is then todo
// again after its retry delay, or failed when it has used its MaxAttempts.
func (c *Client) Fail(ctx context.Context, taskID, errText string, req ReleaseRequest) (Released, error) {
	req.Outcome, req.Error = OutcomeFailed, truncate(errText, MaxErrorLen)
	var err error
	if req.AgentID, err = c.actingAs(ctx, req.AgentID); err != nil {
		return Released{}, wrap("fail", taskID, err)
	}
	var r Released
	err = c.do(ctx, retryNaming(req.RunID, req.Fence), http.MethodPost, taskPath(taskID, "/release"), req, &r)
	return r, wrap("fail", taskID, err)
}

// Complete ends the caller's lease and marks the task done. Like Release, it
// is retried freely when it names its lease.
func (c *Client) Complete(ctx context.Context, taskID string, req CompleteRequest) (Task, error) {
	var err error
	if req.AgentID, err = c.actingAs(ctx, req.AgentID); err != nil {
		return Task{}, wrap("complete", taskID, err)
	}
	var t Task
	err = c.do(ctx, retryNaming(req.RunID, req.Fence), http.MethodPost, taskPath(taskID, "/complete"), req, &t)
	return t, wrap("complete", taskID, err)
}

// retryNaming is the retry mode of a release or completion: idempotent when
// it names its lease.
func retryNaming(runID string, fence int64) retryMode {
	if runID != "" || fence != 0 {
		return idempotent
	}
	return once
}

// Status reports whether a task is locked, and by whom.
func (c *Client) Status(ctx context.Context, taskID string) (LockStatus, error) {
	var s LockStatus
	err := c.do(ctx, idempotent, http.MethodGet, deploy.Expand(deploy.TaskCheckoutPath, taskID), nil, &s)
	return s, wrap("status", taskID, err)
}

// ListCheckouts lists every live lease, or agentID's when it is not
// empty, oldest first: every page of GET /api/checkouts (one, unless the
// leases pass 5 MB of JSON). Under RecordResponse the answer recorded is
// the whole listing, as one page would give it.
func (c *Client) ListCheckouts(ctx context.Context, agentID string) ([]Checkout, error) {
	return allPages(ctx, "checkouts", func(ctx context.Context, cursor string) ([]Checkout, string, error) {
		p, err := c.CheckoutPage(ctx, agentID, 0, cursor)
		return p.Checkouts, p.NextCursor, err
	})
}

// CheckoutPage is one page of the listing of live leases, and the cursor
// of the next ("" after the last).
type CheckoutPage struct {
	Checkouts  []Checkout `json:"checkouts"`
	NextCursor string     `json:"next_cursor"`
}

// CheckoutPage returns the page of live leases (agentID's, when it is not
// empty) after cursor ("" for the first), of at most limit leases (1 to
// 1000; 0 for as many as fit in the server's answer). A cursor continues
// its own listing: give the same agentID with it, or "".
func (c *Client) CheckoutPage(ctx context.Context, agentID string, limit int, cursor string) (CheckoutPage, error) {
	q := url.Values{}
	if agentID != "" {
		q.Set("agent_id", agentID)
	}
	if limit != 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	path := "/api/checkouts"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var p CheckoutPage
	if err := c.do(ctx, idempotent, http.MethodGet, path, nil, &p); err != nil {
		return CheckoutPage{}, fmt.Errorf("list checkouts: %w", err)
	}
	if p.Checkouts == nil {
		p.Checkouts = []Checkout{}
	}
	return p, nil
}

// Watch asks for an inbox message when the task becomes available.
func (c *Client) Watch(ctx context.Context, taskID string) error {
	return wrap("watch", taskID, c.do(ctx, idempotent, http.MethodPost, taskPath(taskID, "/watch"), nil, nil))
}

// Inbox lists the caller's messages, oldest first.
func (c *Client) Inbox(ctx context.Context) ([]Message, error) {
	var r inboxAnswer
	if err := c.do(ctx, idempotent, http.MethodGet, "/api/inbox", nil, &r); err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	return r.Messages, nil
}

// inboxAnswer is the answer of GET /api/inbox.
type inboxAnswer struct {
	Messages []Message `json:"messages"`
}

// batchAnswer is the answer of POST /api/tasks/batch.
type batchAnswer struct {
	Results []BatchResult `json:"results"`
}

// DeleteMessage removes one inbox message. A message that does not exist
// (or was deleted already) matches ErrMessageNotFound: the server answers
// it with a plain 404 not_found.
func (c *Client) DeleteMessage(ctx context.Context, messageID string) error {
	err := c.do(ctx, once, http.MethodDelete, "/api/inbox/"+url.PathEscape(messageID), nil, nil)
	if ae := (*APIError)(nil); errors.As(err, &ae) && ae.Code == errcode.NotFound {
		ae.also = ErrMessageNotFound
	}
	if err != nil {
		return fmt.Errorf("delete message %s: %w", idText(messageID), err)
	}
	return nil
}

// Heartbeat tells the server the caller is alive for ttl (0: the server's
// default, 90s). After its first heartbeat an agent whose heartbeats stop is
// declared dead and loses its leases.
func (c *Client) Heartbeat(ctx context.Context, ttl time.Duration) (Heartbeat, error) {
	var h Heartbeat
	body := struct {
		TTL string `json:"ttl,omitempty"`
	}{durationString(ttl)}
	if err := c.do(ctx, idempotent, http.MethodPost, "/api/heartbeat", body, &h); err != nil {
		return h, fmt.Errorf("heartbeat: %w", err)
	}
	return h, nil
}

// Whoami answers whom the client's key belongs to. It costs the server no
// table read.
func (c *Client) Whoami(ctx context.Context) (Identity, error) {
	var id Identity
	if err := c.do(ctx, idempotent, http.MethodGet, "/api/whoami", nil, &id); err != nil {
		return id, fmt.Errorf("whoami: %w", err)
	}
	c.selfMu.Lock()
	c.self = id.AgentID
	c.selfMu.Unlock()
	return id, nil
}

// actingAs is the agent_id a lease request sends for agentID: "" for the
// key's own agent, since the server takes the field from admins only
// (403 forbidden from anyone else, even naming itself). The first request
// naming an agent asks the server whose key this is (Whoami); the answer
// is kept, and requests that need it meanwhile wait for it rather than ask
// again (one asks at a time; each asks while none has had an answer). A
// server that does not know GET /api/whoami (404: an earlier version,
// which took an agent naming itself) gets agentID as given. Any other
// failure of Whoami is the request's error (a *notSentError): sending
// agent_id all the same would have a non-admin's own request refused for
// good.
func (c *Client) actingAs(ctx context.Context, agentID string) (string, error) {
	if agentID == "" {
		return "", nil
	}
	self := c.selfID()
	if self == "" {
		select {
		case c.asking <- struct{}{}:
			defer func() { <-c.asking }()
		case <-ctx.Done():
			return "", &notSentError{fmt.Errorf("whoami: %w", ctx.Err())}
		}
		self = c.selfID()
	}
	if self == "" {
		id, err := c.Whoami(ctx)
		var ae *APIError
		switch {
		case errors.As(err, &ae) && ae.Status == http.StatusNotFound:
			return agentID, nil
		case err != nil:
			return "", &notSentError{unsentForm(ctx, err)}
		}
		self = id.AgentID
	}
	if agentID == self {
		return "", nil
	}
	return agentID, nil
}

// selfID is the key's own agent id, "" until Whoami has told it.
func (c *Client) selfID() string {
	c.selfMu.Lock()
	defer c.selfMu.Unlock()
	return c.self
}

// notSentError is the error of a request not sent because Whoami, asked
// first, failed. Nothing was sent, so it never matches ErrUndecided,
// whatever Whoami met; it matches all else Whoami's error matches
// (ErrUnavailable, ErrUnauthorized, context.Canceled, an *APIError).
type notSentError struct{ err error }

func (e *notSentError) Error() string { return e.err.Error() + " (the request was not sent)" }

// Is matches what Whoami's error matches, but ErrUndecided.
func (e *notSentError) Is(target error) bool {
	return target != ErrUndecided && errors.Is(e.err, target)
}

// unsentForm is Whoami's error without what says its request was sent
// (the request this error is for was not).
func unsentForm(ctx context.Context, err error) error {
	var ue *UnreachableError
	var ae *APIError
	switch {
	case ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		return fmt.Errorf("whoami: %w", ctx.Err())
	case errors.As(err, &ue) && ue.Sent:
		u := *ue
		u.Sent = false
		return fmt.Errorf("whoami: %w", &u)
	case errors.As(err, &ae):
		return fmt.Errorf("whoami: %w", ae)
	}
	return err
}

// As finds in Whoami's error.
func (e *notSentError) As(target any) bool { return errors.As(e.err, target) }

// CreateTask creates a task: in status todo, or blocked when one of
// req.BlockedBy is not done. A BlockedBy naming an unknown task matches
// ErrInvalidDependency; one that would close a cycle, ErrDependencyCycle.
func (c *Client) CreateTask(ctx context.Context, req CreateTaskRequest) (Task, error) {
	var t Task
	if err := c.do(ctx, once, http.MethodPost, "/api/tasks", req, &t); err != nil {
		return t, fmt.Errorf("create task: %w", err)
	}
	return t, nil
}

// CreateTasks creates up to 25 tasks in one request. Each result is
// "created" or "exists" (with the existing task). A batch whose tasks all
// have ids is retried safely, since a retry is answered with the same
// tasks.
func (c *Client) CreateTasks(ctx context.Context, tasks []CreateTaskRequest) ([]BatchResult, error) {
	mode := idempotent
	for _, t := range tasks {
		if t.TaskID == "" {
			mode = once
		}
	}
	var out batchAnswer
	if err := c.do(ctx, mode, http.MethodPost, "/api/tasks/batch", map[string]any{"tasks": tasks}, &out); err != nil {
		return nil, fmt.Errorf("create tasks: %w", err)
	}
	return out.Results, nil
}

// UpdateTask changes a task's fields or status (PATCH). Changing
// BlockedBy sets a todo or blocked task's status to match (blocked while a
// blocker is not done); on a task in another status it matches
// ErrInvalidTransition.
func (c *Client) UpdateTask(ctx context.Context, taskID string, req UpdateTaskRequest) (Task, error) {
	var t Task
	if req.IfVersion != 0 {
		ctx = context.WithValue(ctx, ifMatchKey{}, strconv.FormatInt(req.IfVersion, 10))
	}
	err := c.do(ctx, once, http.MethodPatch, taskPath(taskID, ""), req, &t)
	return t, wrap("update task", taskID, err)
}

// CancelTask cancels a task (PATCH status cancelled); a live lease on it
// must be the caller's, unless the caller is an admin.
func (c *Client) CancelTask(ctx context.Context, taskID string) (Task, error) {
	return c.UpdateTask(ctx, taskID, UpdateTaskRequest{Status: "cancelled"})
}

// ifMatchKey carries an If-Match header value to send.
type ifMatchKey struct{}

// GetTask returns one task.
func (c *Client) GetTask(ctx context.Context, taskID string) (Task, error) {
	var t Task
	err := c.do(ctx, idempotent, http.MethodGet, taskPath(taskID, ""), nil, &t)
	return t, wrap("get task", taskID, err)
}

// ListTasks returns one page of tasks. A page may hold fewer tasks than
// asked, even none, and still have a NextCursor: FillTaskPage reads on.
func (c *Client) ListTasks(ctx context.Context, req ListTasksRequest) (TaskPage, error) {
	q := url.Values{}
	if req.Status != "" {
		q.Set("status", req.Status)
	}
	if req.Queue != "" {
		q.Set("queue", req.Queue)
	}
	if req.Limit != 0 {
		q.Set("limit", strconv.Itoa(req.Limit))
	}
	if req.Cursor != "" {
		q.Set("cursor", req.Cursor)
	}
	path := "/api/tasks"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var p TaskPage
	if err := c.do(ctx, idempotent, http.MethodGet, path, nil, &p); err != nil {
		return p, fmt.Errorf("list tasks: %w", err)
	}
	return p, nil
}

// defaultListLimit is the server's page size of a task listing given no
// limit.
const defaultListLimit = 100

// FillTaskPage reads a task listing from req.Cursor on, page after page,
// until it holds req.Limit tasks (0: the server's default, 100), the
// listing ends, or it has read maxReads pages (at least one): a page may
// hold fewer tasks than asked, even none, and still have a next_cursor,
// since each page's reads are bounded. Each read asks for the tasks still
// wanted, so the answer holds at most req.Limit; its NextCursor goes on
// after its last task (nil at the listing's end). Under RecordResponse the
// answer recorded is the pages read, as one page would give them.
func (c *Client) FillTaskPage(ctx context.Context, req ListTasksRequest, maxReads int) (TaskPage, error) {
	outer, _ := ctx.Value(recorderKey{}).(*Response)
	var rec Response
	if outer != nil {
		ctx = RecordResponse(ctx, &rec)
	}
	want := cmp.Or(req.Limit, defaultListLimit)
	whole := TaskPage{Tasks: []Task{}}
	raw := []json.RawMessage{}
	for reads := 1; ; reads++ {
		req.Limit = want - len(whole.Tasks)
		p, err := c.ListTasks(ctx, req)
		if outer != nil {
			*outer = rec
		}
		if err != nil {
			return whole, err
		}
		whole.Tasks = append(whole.Tasks, p.Tasks...)
		whole.NextCursor = p.NextCursor
		if outer != nil {
			var body struct {
				Tasks []json.RawMessage `json:"tasks"`
			}
			if err := json.Unmarshal(rec.Body, &body); err != nil {
				return whole, fmt.Errorf("list tasks: %w", err)
			}
			raw = append(raw, body.Tasks...)
		}
		if p.NextCursor != nil && len(whole.Tasks) < want && reads < maxReads {
			req.Cursor = *p.NextCursor
			continue
		}
		if outer != nil && reads > 1 {
			// More than one page: recorded as the one answer they make.
			outer.Body, err = json.Marshal(struct {
				Tasks      []json.RawMessage `json:"tasks"`
				NextCursor *string           `json:"next_cursor"`
			}{raw, whole.NextCursor})
		}
		return whole, err
	}
}

// CreateAgent registers an agent (admins only). The answer holds its API
// key, which the server never shows again.
func (c *Client) CreateAgent(ctx context.Context, req CreateAgentRequest) (Registration, error) {
	var r Registration
	if err := c.do(ctx, once, http.MethodPost, "/api/agents", req, &r); err != nil {
		return r, fmt.Errorf("create agent: %w", err)
	}
	return r, nil
}

// ListAgents lists every registered agent (admins only), by id, reading
// every page of the listing (AgentPage reads one).
func (c *Client) ListAgents(ctx context.Context) ([]Agent, error) {
	return allPages(ctx, "agents", func(ctx context.Context, cursor string) ([]Agent, string, error) {
		p, err := c.AgentPage(ctx, 0, cursor)
		return p.Agents, p.NextCursor, err
	})
}

// AgentPage is one page of the agent listing, and the cursor of the next
// ("" after the last).
type AgentPage struct {
	Agents     []Agent `json:"agents"`
	NextCursor string  `json:"next_cursor"`
}

// AgentPage returns the page of registered agents (admins only) after
// cursor ("" for the first), of at most limit agents (1 to 1000; 0 for
// as many as fit in the server's answer).
func (c *Client) AgentPage(ctx context.Context, limit int, cursor string) (AgentPage, error) {
	q := url.Values{}
	if limit != 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	path := "/api/agents"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var p AgentPage
	if err := c.do(ctx, idempotent, http.MethodGet, path, nil, &p); err != nil {
		return AgentPage{}, fmt.Errorf("list agents: %w", err)
	}
	if p.Agents == nil {
		p.Agents = []Agent{}
	}
	return p, nil
}

// RemoveAgent deletes an agent (admins only); its leases end at once.
func (c *Client) RemoveAgent(ctx context.Context, agentID string) error {
	err := c.do(ctx, once, http.MethodDelete, "/api/agents/"+url.PathEscape(agentID), nil, nil)
	if err != nil {
		return fmt.Errorf("remove agent %s: %w", idText(agentID), err)
	}
	return nil
}

func wrap(op, taskID string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s %s: %w", op, idText(taskID), err)
}

// idText is id as an error message names it: "" for an empty one, which
// would otherwise leave no trace.
func idText(id string) string {
	if id == "" {
		return `""`
	}
	return id
}
