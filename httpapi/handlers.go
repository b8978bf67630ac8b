package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/checkout-dev/checkout/errcode"
	"github.com/checkout-dev/checkout/lease"
)

func (s *server) healthz(w http.ResponseWriter, r *http.Request, _ lease.Principal) error {
	if s.opts.Health != nil {
		if err := s.opts.Health(r.Context()); err != nil {
			stateFrom(r.Context()).err = err
			w.Header().Set("Retry-After", RetryAfter)
			s.writeJSON(w, http.StatusServiceUnavailable, map[string]bool{"ok": false})
			return nil
		}
	}
	s.writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
	return nil
}

func (s *server) registerAgent(w http.ResponseWriter, r *http.Request, _ lease.Principal) error {
	var body struct {
		Name    string  `json:"name"`
		Admin   bool    `json:"admin"`
		AgentID *string `json:"agent_id"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	id, err := optionalID("agent_id", body.AgentID)
	if err != nil {
		return err
	}
	if err := s.checkNewAgentID(id); err != nil {
		return err
	}
	if err := lease.CheckName(body.Name); err != nil {
		return err
	}
	reg, err := s.svc.RegisterAgent(r.Context(), lease.RegisterParams{AgentID: id, Name: body.Name, Admin: body.Admin})
	if err != nil {
		return err
	}
	s.writeJSON(w, http.StatusCreated, registrationJSON{
		AgentID:   reg.AgentID,
		Name:      reg.Name,
		Admin:     reg.Admin,
		CreatedAt: stamp(reg.CreatedAt),
		APIKey:    reg.APIKey,
	})
	return nil
}

// checkNewAgentID refuses to register an agent that would pass for the
// service itself or for the built-in admin: "system", by which the audit
// trail names the service's own acts (lease.BySystem), in any case, is 400
// invalid_id; the built-in admin's id in any case is 409 agent_exists, as
// the id itself always was.
func (s *server) checkNewAgentID(id string) error {
	switch {
	case strings.EqualFold(id, lease.BySystem):
		return errorf(errcode.InvalidID, "agent_id %s is reserved: the audit trail names the service's own acts by %s", id, lease.BySystem)
	case strings.EqualFold(id, s.opts.AdminID):
		return errorf(errcode.AgentExists, "agent_id %s is taken: the built-in admin is %s, and ids that differ from it only in case are reserved", id, s.opts.AdminID)
	}
	return nil
}

func (s *server) listAgents(w http.ResponseWriter, r *http.Request, _ lease.Principal) error {
	q := r.URL.Query()
	params := lease.ListAgentsParams{Cursor: q.Get("cursor")}
	if v := q.Get("limit"); v != "" {
		var err error
		if params.Limit, err = limit(v); err != nil {
			return err
		}
	}
	if err := lease.CheckCursor(params.Cursor); err != nil {
		return err
	}
	page, err := s.svc.ListAgentsPage(r.Context(), params)
	if err != nil {
		return err
	}
	out := make([]agentJSON, 0, len(page.Agents))
	for _, a := range page.Agents {
		out = append(out, agentJSON{
			AgentID:         a.AgentID,
			Name:            a.Name,
			Admin:           a.Admin,
			LastHeartbeatAt: stampPtr(a.LastHeartbeatAt),
			Alive:           a.Alive,
		})
	}
	var next *string
	if page.NextCursor != "" {
		next = &page.NextCursor
	}
	s.writeJSON(w, http.StatusOK, map[string]any{"agents": out, "next_cursor": next})
	return nil
}

func (s *server) removeAgent(w http.ResponseWriter, r *http.Request, _ lease.Principal) error {
	id, err := pathID(r, "agent_id")
	if err != nil {
		return err
	}
	if id == s.opts.AdminID {
		return errorf(errcode.CannotRemoveAdmin, "agent %s is the built-in admin and cannot be removed", id)
	}
	err = s.svc.RemoveAgent(r.Context(), id)
	if s.opts.OnAgentRemoved != nil && !errors.Is(err, lease.ErrAgentNotFound) {
		// Also when the removal failed part way: it may have deleted the
		// key already, and a retry finds no agent to remove.
		s.opts.OnAgentRemoved(id)
	}
	if err != nil {
		return err
	}
	s.writeJSON(w, http.StatusOK, struct {
		AgentID string `json:"agent_id"`
		Removed bool   `json:"removed"`
	}{id, true})
	return nil
}

func (s *server) heartbeat(w http.ResponseWriter, r *http.Request, p lease.Principal) error {
	var body struct {
		TTL *string `json:"ttl"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	ttl, err := duration(body.TTL, lease.DefaultHeartbeatTTL, lease.TTLRange)
	if err != nil {
		return err
	}
	hb, err := s.svc.Heartbeat(r.Context(), p.AgentID, ttl)
	if err != nil {
		return err
	}
	s.writeJSON(w, http.StatusOK, struct {
		AgentID   string `json:"agent_id"`
		ExpiresAt string `json:"expires_at"`
	}{hb.AgentID, stamp(hb.ExpiresAt)})
	return nil
}

// whoami answers whose key the caller holds, from the key's look-up alone
// (no request to the tables): a client learns its own agent_id here, which
// a lease request must leave out unless the caller is an admin.
func (s *server) whoami(w http.ResponseWriter, r *http.Request, p lease.Principal) error {
	s.writeJSON(w, http.StatusOK, struct {
		AgentID string `json:"agent_id"`
		Name    string `json:"name"`
		Admin   bool   `json:"admin"`
	}{p.AgentID, p.Name, p.Admin})
	return nil
}

// taskBody is a task as create and batch take it.
type taskBody struct {
	TaskID      *string         `json:"task_id"`
	Title       string          `json:"title"`
	Description string          `json:"description"`
	Queue       *string         `json:"queue"`
	Priority    *int            `json:"priority"`
	Metadata    json.RawMessage `json:"metadata"`
	graphFields
}

// params is the task b gives, checked by lease's rules: a task_id or queue
// that is given must be valid, not just present. The work graph's fields
// are checked after the others.
func (b taskBody) params() (lease.CreateTaskParams, error) {
	id, err := optionalID("task_id", b.TaskID)
	if err != nil {
		return lease.CreateTaskParams{}, err
	}
	p := lease.CreateTaskParams{TaskID: id, Title: b.Title, Description: b.Description, Priority: b.Priority, Metadata: nullIsAbsent(b.Metadata)}
	if b.Queue != nil {
		p.Queue = *b.Queue
	}
	if err := lease.CheckTaskFields(&b.Title, &b.Description, b.Queue, b.Priority, p.Metadata); err != nil {
		return p, err
	}
	g, err := b.parse(id)
	if err != nil {
		return p, err
	}
	if g.blockedBy != nil {
		p.BlockedBy = *g.blockedBy
	}
	p.MaxAttempts, p.RetryDelay, p.NotBefore = g.maxAttempts, g.retryDelay, g.notBefore
	return p, nil
}

// nullIsAbsent treats a JSON null as an absent field, as every other field
// of a body is treated.
func nullIsAbsent(m json.RawMessage) json.RawMessage {
	if string(bytes.TrimSpace(m)) == "null" {
		return nil
	}
	return m
}

func (s *server) createTask(w http.ResponseWriter, r *http.Request, _ lease.Principal) error {
	var body taskBody
	if err := decode(r, &body); err != nil {
		return err
	}
	p, err := body.params()
	if err != nil {
		return err
	}
	t, err := s.svc.CreateTask(r.Context(), p)
	if err != nil {
		return err
	}
	s.writeJSON(w, http.StatusCreated, toTask(t, s.now()))
	return nil
}

func (s *server) createTasks(w http.ResponseWriter, r *http.Request, _ lease.Principal) error {
	var body struct {
		Tasks []*taskBody `json:"tasks"` // a pointer, so that a null task is told from {}
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	if err := lease.CheckBatchSize(len(body.Tasks)); err != nil {
		return err
	}
	ps := make([]lease.CreateTaskParams, len(body.Tasks))
	for i, b := range body.Tasks {
		if b == nil {
			return errorf(errcode.InvalidJSON, "tasks[%d] must be a task object, not null", i)
		}
		p, err := b.params()
		if err != nil {
			return lease.InBatch(i, err)
		}
		ps[i] = p
	}
	res, err := s.svc.CreateTasks(r.Context(), ps)
	if err != nil {
		return err
	}
	// A result's blocks holds at most lease.MaxBatchBlocks ids; more_blocks
	// (only when true) says its task blocks more, which GET shows.
	type resultJSON struct {
		TaskID     string             `json:"task_id"`
		Outcome    lease.BatchOutcome `json:"outcome"`
		Task       taskJSON           `json:"task"`
		MoreBlocks bool               `json:"more_blocks,omitempty"`
	}
	now := s.now()
	out := make([]resultJSON, 0, len(res))
	for _, r := range res {
		out = append(out, resultJSON{TaskID: r.TaskID, Outcome: r.Outcome, Task: toTask(r.Task, now), MoreBlocks: r.MoreBlocks})
	}
	s.writeJSON(w, http.StatusOK, map[string]any{"results": out})
	return nil
}

func (s *server) updateTask(w http.ResponseWriter, r *http.Request, p lease.Principal) error {
	id, err := pathID(r, "task_id")
	if err != nil {
		return err
	}
	var body struct {
		Title       *string         `json:"title"`
		Description *string         `json:"description"`
		Metadata    json.RawMessage `json:"metadata"`
		Queue       *string         `json:"queue"`
		Priority    *int            `json:"priority"`
		Status      *lease.Status   `json:"status"`
		graphFields
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	if err := lease.CheckTaskFields(body.Title, body.Description, body.Queue, body.Priority, nullIsAbsent(body.Metadata)); err != nil {
		return err
	}
	g, err := body.parse(id)
	if err != nil {
		return err
	}
	admin := p.Admin
	if admin && body.Status != nil && *body.Status == lease.StatusCancelled {
		// An admin's cancel may end another agent's lease, an admin's
		// power: whoever holds the task, the key is checked first (a
		// cancel by a key no longer an admin's is an agent's).
		if admin, err = s.isAdmin(r, p); err != nil {
			return err
		}
	}
	params := lease.UpdateTaskParams{
		TaskID: id, AgentID: p.AgentID, Admin: admin,
		Title: body.Title, Description: body.Description, Metadata: nullIsAbsent(body.Metadata),
		Queue: body.Queue, Priority: body.Priority, Status: body.Status,
		BlockedBy: g.blockedBy, MaxAttempts: g.maxAttempts, RetryDelay: g.retryDelay,
		SetNotBefore: g.setNotBefore, NotBefore: g.notBefore,
	}
	if params.IfVersion, err = ifMatch(r.Header); err != nil {
		return err
	}
	t, err := s.svc.UpdateTask(r.Context(), params)
	if err != nil {
		return err
	}
	s.writeJSON(w, http.StatusOK, toTask(t, s.now()))
	return nil
}

func (s *server) listTasks(w http.ResponseWriter, r *http.Request, _ lease.Principal) error {
	q := r.URL.Query()
	params := lease.ListTasksParams{Limit: lease.DefaultListLimit, Cursor: q.Get("cursor"), Queue: q.Get("queue")}
	if v := q.Get("status"); v != "" {
		params.Status = lease.Status(v)
		if err := lease.CheckListStatus(params.Status); err != nil {
			return err
		}
	}
	if v := q.Get("limit"); v != "" {
		var err error
		if params.Limit, err = limit(v); err != nil {
			return err
		}
	}
	if err := lease.CheckCursor(params.Cursor); err != nil {
		return err
	}
	page, err := s.svc.ListTasks(r.Context(), params)
	if err != nil {
		return err
	}
	now := s.now()
	tasks := make([]taskJSON, 0, len(page.Tasks))
	for _, t := range page.Tasks {
		tasks = append(tasks, toTask(t, now))
	}
	var next *string
	if page.NextCursor != "" {
		next = &page.NextCursor
	}
	s.writeJSON(w, http.StatusOK, struct {
		Tasks      []taskJSON `json:"tasks"`
		NextCursor *string    `json:"next_cursor"`
	}{tasks, next})
	return nil
}

func (s *server) getTask(w http.ResponseWriter, r *http.Request, _ lease.Principal) error {
	id, err := pathID(r, "task_id")
	if err != nil {
		return err
	}
	t, err := s.svc.GetTask(r.Context(), id)
	if err != nil {
		return err
	}
	s.writeJSON(w, http.StatusOK, toTask(t, s.now()))
	return nil
}

// actor is who a lease request of r is for: the caller, or the agent named
// in the body. Only an admin may name an agent (mayActFor), itself or
// another (stillAdmin), whose name is looked up so that its lease shows it
// (an unknown agent is 404 agent_not_found).
func (s *server) actor(r *http.Request, p lease.Principal, agentID *string) (id, name string, err error) {
	if agentID == nil {
		return p.AgentID, p.Name, nil
	}
	if err := mayActFor(p, agentID); err != nil {
		return "", "", err
	}
	if err := lease.CheckID("agent_id", *agentID); err != nil {
		return "", "", err
	}
	if *agentID == p.AgentID {
		return p.AgentID, p.Name, nil
	}
	if err := s.stillAdmin(r, p, errActForOther(p, *agentID)); err != nil {
		return "", "", err
	}
	a, err := s.svc.GetAgent(r.Context(), *agentID)
	if err != nil {
		return "", "", err
	}
	return a.AgentID, a.Name, nil
}

// mayActFor refuses agent_id from a non-admin, even naming itself: API.md
// makes the field admin-only, and a client that knows its own id leaves
// it out (GET /api/whoami tells it).
func mayActFor(p lease.Principal, agentID *string) error {
	if agentID == nil || p.Admin {
		return nil
	}
	if *agentID == p.AgentID {
		return errForbidden(fmt.Sprintf("agent_id is for an admin acting for an agent: leave it out to act as yourself (%s)", p.AgentID))
	}
	return errForbidden(errActForOther(p, *agentID))
}

func errActForOther(p lease.Principal, agentID string) string {
	return fmt.Sprintf("only an admin may act for another agent: agent_id names %s, and the caller is %s", agentID, p.AgentID)
}

// grantBody is what the bodies of a checkout and a claim share.
type grantBody struct {
	Timeout *string `json:"timeout"`
	Reason  string  `json:"reason"`
	RunID   *string `json:"run_id"`
	AgentID *string `json:"agent_id"`
}

// grant is a checked grantBody: whom the lease is for, and on what terms.
type grant struct {
	agentID, agentName, runID string
	timeout                   time.Duration
}

// by is who asks for g's lease when it is not its holder (an admin acting
// for another agent, whom the checkout event names), else "".
func (g grant) by(p lease.Principal) string {
	if p.AgentID == g.agentID {
		return ""
	}
	return p.AgentID
}

// check checks b by lease's rules (an agent_id naming another agent, admins
// only, first, then the timeout, the run id, whatever extra checks, and the
// reason) and then resolves whom the grant is for.
func (s *server) check(r *http.Request, p lease.Principal, b grantBody, extra func() error) (grant, error) {
	var g grant
	if err := mayActFor(p, b.AgentID); err != nil {
		return g, err
	}
	var err error
	if g.timeout, err = duration(b.Timeout, lease.DefaultTimeout, lease.TimeoutRange); err != nil {
		return g, err
	}
	if g.runID, err = optionalID("run_id", b.RunID); err != nil {
		return g, err
	}
	if extra != nil {
		if err := extra(); err != nil {
			return g, err
		}
	}
	if err := lease.CheckReason(b.Reason); err != nil {
		return g, err
	}
	g.agentID, g.agentName, err = s.actor(r, p, b.AgentID)
	return g, err
}

func (s *server) checkout(w http.ResponseWriter, r *http.Request, p lease.Principal) error {
	taskID, err := pathID(r, "task_id")
	if err != nil {
		return err
	}
	var body struct {
		grantBody
		ExpectedStatuses []lease.Status `json:"expected_statuses"`
		Watch            bool           `json:"watch"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	g, err := s.check(r, p, body.grantBody, func() error {
		return lease.CheckExpectedStatuses(body.ExpectedStatuses)
	})
	if err != nil {
		return err
	}
	c, err := s.svc.Checkout(r.Context(), lease.CheckoutParams{
		TaskID:           taskID,
		AgentID:          g.agentID,
		AgentName:        g.agentName,
		RunID:            g.runID,
		Timeout:          g.timeout,
		Reason:           body.Reason,
		ExpectedStatuses: body.ExpectedStatuses,
		Watch:            body.Watch,
		CreateIfMissing:  s.opts.AutoCreateTasks,
		By:               g.by(p),
	})
	if err != nil {
		return conflictFor(err, g.agentID)
	}
	s.writeJSON(w, http.StatusOK, toCheckout(c, s.now()))
	return nil
}

func (s *server) lockStatus(w http.ResponseWriter, r *http.Request, _ lease.Principal) error {
	id, err := pathID(r, "task_id")
	if err != nil {
		return err
	}
	c, err := s.svc.LockStatus(r.Context(), id)
	if err != nil {
		return err
	}
	s.writeJSON(w, http.StatusOK, struct {
		TaskID   string        `json:"task_id"`
		Locked   bool          `json:"locked"`
		Checkout *checkoutJSON `json:"checkout"`
	}{id, c != nil, toCheckoutPtr(c, s.now())})
	return nil
}

// holderBody is the body shared by renew, release and complete. AgentID
// names the holder the request acts as: the caller itself, or for an admin
// any agent.
type holderBody struct {
	RunID   *string `json:"run_id"`
	Fence   *int64  `json:"fence"` // a pointer, so that 0 is told from absent
	AgentID *string `json:"agent_id"`
}

// holder is a checked holderBody: the agent the request acts as, and the
// lease it names (an empty run id and a 0 fence name none).
type holder struct {
	agentID, runID string
	fence          int64
}

// by is who makes h's request when it is not the holder it acts as (an
// admin acting for another agent, whom the event names), else "".
func (h holder) by(p lease.Principal) string {
	if p.AgentID == h.agentID {
		return ""
	}
	return p.AgentID
}

// checkHolder checks b by lease's rules and resolves the agent the request
// acts as.
func (s *server) checkHolder(r *http.Request, p lease.Principal, b holderBody) (holder, error) {
	var h holder
	if err := mayActFor(p, b.AgentID); err != nil {
		return h, err
	}
	var err error
	if h.fence, err = fence(b.Fence); err != nil {
		return h, err
	}
	if h.runID, err = optionalID("run_id", b.RunID); err != nil {
		return h, err
	}
	h.agentID, _, err = s.actor(r, p, b.AgentID)
	return h, err
}

func (s *server) renew(w http.ResponseWriter, r *http.Request, p lease.Principal) error {
	taskID, err := pathID(r, "task_id")
	if err != nil {
		return err
	}
	var body struct {
		holderBody
		Timeout *string `json:"timeout"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	timeout, err := duration(body.Timeout, 0, lease.TimeoutRange)
	if err != nil {
		return err
	}
	h, err := s.checkHolder(r, p, body.holderBody)
	if err != nil {
		return err
	}
	c, err := s.svc.Renew(r.Context(), lease.RenewParams{TaskID: taskID, AgentID: h.agentID, RunID: h.runID, Fence: h.fence, Timeout: timeout, By: h.by(p)})
	if err != nil {
		return err
	}
	s.writeJSON(w, http.StatusOK, toCheckout(c, s.now()))
	return nil
}

func (s *server) release(w http.ResponseWriter, r *http.Request, p lease.Principal) error {
	taskID, err := pathID(r, "task_id")
	if err != nil {
		return err
	}
	var body struct {
		holderBody
		Force   bool                  `json:"force"`
		Reason  string                `json:"reason"`
		Outcome *lease.ReleaseOutcome `json:"outcome"`
		Error   string                `json:"error"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	const forceAdminOnly = "only an admin may force a release"
	if body.Force && !p.Admin {
		return errForbidden(forceAdminOnly)
	}
	if err := lease.CheckReason(body.Reason); err != nil {
		return err
	}
	outcome, err := releaseOutcome(body.Outcome, body.Error)
	if err != nil {
		return err
	}
	h, err := s.checkHolder(r, p, body.holderBody)
	if err != nil {
		return err
	}
	if body.Force {
		if err := s.stillAdmin(r, p, forceAdminOnly); err != nil {
			return err
		}
		// A force release acts as no holder: it is the admin's own act,
		// and the trail records it as the caller's, whatever agent_id
		// names (else it could name a non-admin as the one who forced).
		h.agentID = p.AgentID
	}
	rel, err := s.svc.Release(r.Context(), lease.ReleaseParams{
		TaskID: taskID, AgentID: h.agentID, RunID: h.runID, Fence: h.fence, Force: body.Force, Reason: body.Reason,
		Outcome: outcome, Error: body.Error, By: h.by(p),
	})
	if err != nil {
		return err
	}
	s.writeJSON(w, http.StatusOK, releasedJSON{TaskID: rel.TaskID, ReleasedBy: rel.ReleasedBy, HeldSeconds: seconds(rel.Held)})
	return nil
}

func (s *server) complete(w http.ResponseWriter, r *http.Request, p lease.Principal) error {
	taskID, err := pathID(r, "task_id")
	if err != nil {
		return err
	}
	var body holderBody
	if err := decode(r, &body); err != nil {
		return err
	}
	h, err := s.checkHolder(r, p, body)
	if err != nil {
		return err
	}
	t, err := s.svc.Complete(r.Context(), lease.CompleteParams{TaskID: taskID, AgentID: h.agentID, RunID: h.runID, Fence: h.fence, By: h.by(p)})
	if err != nil {
		return err
	}
	s.writeJSON(w, http.StatusOK, toTask(t, s.now()))
	return nil
}

func (s *server) watch(w http.ResponseWriter, r *http.Request, p lease.Principal) error {
	id, err := pathID(r, "task_id")
	if err != nil {
		return err
	}
	if err := decode(r, &struct{}{}); err != nil {
		return err
	}
	if err := s.svc.Watch(r.Context(), id, p.AgentID); err != nil {
		return err
	}
	s.writeJSON(w, http.StatusOK, map[string]bool{"watching": true})
	return nil
}

func (s *server) listCheckouts(w http.ResponseWriter, r *http.Request, _ lease.Principal) error {
	q := r.URL.Query()
	params := lease.ListCheckoutsParams{AgentID: q.Get("agent_id"), Cursor: q.Get("cursor")}
	if params.AgentID != "" {
		if err := lease.CheckID("agent_id", params.AgentID); err != nil {
			return err
		}
	}
	if v := q.Get("limit"); v != "" {
		var err error
		if params.Limit, err = limit(v); err != nil {
			return err
		}
	}
	if err := lease.CheckCursor(params.Cursor); err != nil {
		return err
	}
	page, err := s.svc.ListCheckoutsPage(r.Context(), params)
	if err != nil {
		return err
	}
	var next *string
	if page.NextCursor != "" {
		next = &page.NextCursor
	}
	s.writeJSON(w, http.StatusOK, map[string]any{"checkouts": toCheckouts(page.Checkouts, s.now()), "next_cursor": next})
	return nil
}

func (s *server) inbox(w http.ResponseWriter, r *http.Request, p lease.Principal) error {
	msgs, err := s.svc.Inbox(r.Context(), p.AgentID)
	if err != nil {
		return err
	}
	out := make([]messageJSON, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, toMessage(m))
	}
	s.writeJSON(w, http.StatusOK, map[string]any{"messages": out})
	return nil
}

// maxMessageIDLen bounds the opaque message id; longer ones name no message.
const maxMessageIDLen = 512

func (s *server) deleteMessage(w http.ResponseWriter, r *http.Request, p lease.Principal) error {
	id := r.PathValue("message_id")
	if id == "" || len(id) > maxMessageIDLen {
		return lease.ErrMessageNotFound
	}
	if err := s.svc.DeleteMessage(r.Context(), p.AgentID, id); err != nil {
		return err
	}
	s.writeJSON(w, http.StatusOK, struct {
		MessageID string `json:"message_id"`
		Deleted   bool   `json:"deleted"`
	}{id, true})
	return nil
}

func (s *server) claim(w http.ResponseWriter, r *http.Request, p lease.Principal) error {
	var body struct {
		grantBody
		Queues []string `json:"queues"`
		Wait   *string  `json:"wait"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	var wait time.Duration
	g, err := s.check(r, p, body.grantBody, func() (err error) {
		if wait, err = duration(body.Wait, 0, lease.WaitRange); err != nil {
			return err
		}
		return lease.CheckClaimQueues(body.Queues)
	})
	if err != nil {
		return err
	}
	c, err := s.svc.Claim(r.Context(), lease.ClaimParams{
		AgentID: g.agentID, AgentName: g.agentName, RunID: g.runID, Timeout: g.timeout, Reason: body.Reason,
		Queues: body.Queues, Wait: wait, By: g.by(p),
	})
	if err != nil {
		return err
	}
	s.writeJSON(w, http.StatusOK, toClaim(c, s.now()))
	return nil
}
