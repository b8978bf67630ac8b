// Package mcpserver exposes the checkout service to LLM agents as a Model
// Context Protocol server. Its tools act as the agent whose API key the
// client carries: checkout_task, claim_task, renew_task, complete_task,
// release_task, fail_task, task_status, list_checkouts, list_tasks,
// list_queues, get_task, create_task, update_task, watch_task, read_inbox,
// ack_message and heartbeat.
//
// Every result carries structured content whose "ok", "code" and "message"
// say what happened, failures included: isError is set, ok is false, and
// code is the API's error code (task_not_found, not_holder, ...) or one of
// invalid_arguments, unreachable, undecided (a request sent whose answer
// was lost: it may have taken effect), not_a_checkout_server, cancelled (a call
// cancelled before it finished; over stdio, where the protocol asks that a
// cancelled request get no answer, it is not sent; one cancelled after its
// request was sent says, as undecided does, that it may have taken effect
// and what to call next) and error (a failure without a code of its own).
//
// A conflict is an answer, not a failure: checkout_task and claim_task
// return a normal result with "acquired": false and the holder, because
// being told "someone else has it, pick another task" is the expected
// outcome of a race that the agent should act on. So is a task that
// checkout_task cannot give now (code blocked, not_ready or
// status_mismatch).
//
// One server session is one agent run: its checkouts share one run id
// (each session of a server its own, and its own leases), so
// a repeated checkout_task of a task it already holds returns the same
// lease, and its renewals, releases and completions name the lease it took
// (a repeated release or completion names the lease that ended, and is
// answered as the first was).
// A session that finds its agent holding a task under another run (the
// process restarted) is told so, and adopts the lease with checkout_task
// adopt=true, or by giving its fence to renew_task, release_task or
// complete_task: the API's holder check is the agent plus the run id or
// fence given.
package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/checkout-dev/checkout/client"
	"github.com/checkout-dev/checkout/errcode"
	"github.com/checkout-dev/checkout/lease"
)

// Version is reported to MCP clients unless Options.Version says otherwise.
const Version = "1.1.0"

// Options configure a server.
type Options struct {
	// AgentID is the agent the tools act as, sent as agent_id: empty for the
	// key's own agent (an admin's key may name any agent).
	AgentID string
	// RunID is the run id of the server's sessions (default: a fresh one
	// for each session). Give one only to a server that serves one session
	// (as Serve does): sessions of one run id take each other's leases for
	// their own.
	RunID string
	// Version is reported to clients (default Version).
	Version string
}

// Serve runs the server over r and w (stdin and stdout) until the client
// disconnects or ctx is done.
//
// A request the client cancels (notifications/cancelled) gets no answer,
// as the MCP specification asks of the receiver: its handler stops, and
// the result the SDK would still write is dropped.
//
// A line longer than MaxLineLength is answered with an invalid request
// (-32600, id null) and skipped, without being held in memory; the session
// goes on. When r ends (the client closed stdin, or piped a script), the
// calls already received finish and are answered before Serve returns,
// for up to DrainTimeout. When ctx ends, Serve stops without answering,
// but first waits (for up to DrainTimeout) for a claim_task on its way to
// give back the task it took (client.ClaimOrGiveBack).
//
// When it returns, Serve has closed r and w when they are closers (as the
// SDK's own transports close theirs): nothing of it reads r after it.
func Serve(ctx context.Context, c *client.Client, r io.Reader, w io.Writer, opts ...Options) error {
	rc, ok := r.(io.ReadCloser)
	if !ok {
		rc = io.NopCloser(r)
	}
	wc, ok := w.(io.WriteCloser)
	if !ok {
		wc = nopWriteCloser{w}
	}
	st := &stdio{w: wc, pending: map[jsonrpc.ID]bool{}, cancelled: map[jsonrpc.ID]bool{}}
	pr, pw := io.Pipe()
	go func() {
		err := st.requestLines(rc, pw)
		if err == nil {
			st.drain(ctx, DrainTimeout)
		}
		pw.CloseWithError(err)
	}()
	srv, sh := newServer(c, opts...)
	sh.stop = ctx
	err := srv.Run(ctx, &mcp.IOTransport{Reader: pr, Writer: st})
	// The reader of r stops with the session: closed, r unblocks its
	// read, rather than leave it reading on after Serve has returned.
	_ = rc.Close()
	if ctx.Err() != nil {
		// Stopped (a SIGTERM): a claim cancelled with the session is
		// still giving back the task it took.
		sh.claiming.wait(DrainTimeout)
	}
	if err != nil && (errors.Is(err, io.EOF) || ctx.Err() != nil) {
		return nil
	}
	return err
}

// inFlight counts calls in flight, so that a stopping server can wait
// for them.
type inFlight struct {
	mu sync.Mutex
	n  int
	// zero is closed when n drops to 0, and replaced when it rises.
	zero chan struct{}
}

func (f *inFlight) add() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		f.zero = make(chan struct{})
	}
	f.n++
}

func (f *inFlight) done() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n--; f.n == 0 {
		close(f.zero)
	}
}

// wait waits until no call is in flight, for at most d.
func (f *inFlight) wait(d time.Duration) {
	f.mu.Lock()
	zero := f.zero
	n := f.n
	f.mu.Unlock()
	if n == 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-zero:
	case <-t.C:
	}
}

// MaxLineLength is the longest line (one message or batch, without its
// newline) Serve reads from the client: far above any real request (a
// task's description and metadata are at most 8 KiB and 4 KiB), and small
// enough that no line can exhaust the process's memory.
const MaxLineLength = 4 << 20

// DrainTimeout bounds how long Serve waits, once the client's input has
// ended, for the calls already received to finish and be answered: longer
// than a claim_task's longest wait (lease.MaxClaimWait) and its request,
// and than a cancelled claim's give-back (client.ClaimOrGiveBack: the
// wait, client.ClaimStopGrace, then a release of at most as long).
var DrainTimeout = lease.MaxClaimWait + 2*client.ClaimStopGrace + 5*time.Second

// stdio stands between the client's lines and the SDK's transport: it
// answers the lines the SDK cannot take (requestLines), and keeps track of
// the requests passed on, so that the answer to one the client cancelled
// is dropped.
type stdio struct {
	mu sync.Mutex // guards the writes to w, and the maps
	w  io.WriteCloser
	// pending are the requests passed on to the SDK and not answered yet;
	// cancelled, those of them the client cancelled.
	pending, cancelled map[jsonrpc.ID]bool
}

// requestLines copies the newline-delimited messages of r to w, and
// answers a line that is not one itself, as JSON-RPC asks: a line that is
// not JSON with a parse error (-32700), JSON that is no JSON-RPC message
// (not an object or a batch, an object without "jsonrpc": "2.0", a
// response with neither result nor error, an empty batch, a batch with
// such an element) with an invalid request (-32600), and so a batch once
// the session's protocol version has none (2025-06-18 and later), all with
// id null. The SDK's reader would end the session at each, or ignore it.
// It returns nil at r's end.
func (st *stdio) requestLines(r io.Reader, w io.Writer) error {
	br := bufio.NewReaderSize(r, 64<<10)
	batches := true // until an initialize names a version without them
	for {
		line, tooLong, err := readLine(br, MaxLineLength)
		if msg := bytes.TrimSpace(line); len(msg) > 0 || tooLong {
			var werr error
			msgs, reject := refusal(msg, &batches)
			if tooLong {
				reject = lineTooLong
			}
			if reject != "" {
				werr = st.writeRaw([]byte(reject + "\n"))
			} else {
				st.passing(msgs)
				_, werr = w.Write(append(msg, '\n'))
			}
			if werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// lineTooLong answers a line longer than MaxLineLength.
var lineTooLong = `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request: the line is longer than ` +
	strconv.Itoa(MaxLineLength>>20) + ` MiB, the most a message may be; it was skipped"}}`

// readLine reads one line of br, without its newline: its bytes, or none
// and tooLong when it is longer than max, in which case the rest of it is
// read and dropped as it comes, never held whole.
func readLine(br *bufio.Reader, max int) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(bytes.TrimRight(chunk, "\r\n")) > max {
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return line, tooLong, err
	}
}

// drain waits, once the client's input has ended, until every request
// passed on has been answered, for at most timeout (or until ctx is done).
func (st *stdio) drain(ctx context.Context, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		st.mu.Lock()
		n := len(st.pending)
		st.mu.Unlock()
		if n == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// passing notes the messages of a line passed on to the SDK: its requests
// are pending until answered, and a cancellation marks a pending request's
// answer to be dropped.
func (st *stdio) passing(msgs []jsonrpc.Message) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, m := range msgs {
		req, ok := m.(*jsonrpc.Request)
		switch {
		case !ok:
		case req.ID.IsValid():
			st.pending[req.ID] = true
		case req.Method == "notifications/cancelled":
			var p struct {
				RequestID any `json:"requestId"`
			}
			if json.Unmarshal(req.Params, &p) != nil {
				continue
			}
			if id, err := jsonrpc.MakeID(p.RequestID); err == nil && st.pending[id] {
				st.cancelled[id] = true
			}
		}
	}
}

// Write writes one message of the SDK's (it writes one a call), less the
// answers to requests the client cancelled.
func (st *stdio) Write(p []byte) (int, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := st.answered(p)
	if out == nil {
		return len(p), nil
	}
	if _, err := st.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// answered notes the answers in p, a message or batch of them with its
// newline, and returns p without those to cancelled requests: nil when
// nothing is left to write.
func (st *stdio) answered(p []byte) []byte {
	msg := bytes.TrimSpace(p)
	if len(msg) == 0 {
		return p
	}
	if msg[0] != '[' {
		if st.dropped(msg) {
			return nil
		}
		return p
	}
	var elems []json.RawMessage
	if json.Unmarshal(msg, &elems) != nil {
		return p
	}
	kept := elems[:0]
	for _, e := range elems {
		if !st.dropped(e) {
			kept = append(kept, e)
		}
	}
	switch {
	case len(kept) == len(elems):
		return p
	case len(kept) == 0:
		return nil
	}
	b, err := json.Marshal(kept)
	if err != nil {
		return p
	}
	return append(b, '\n')
}

// dropped notes b, one message, answered when it is a response, and says
// whether it answers a request the client cancelled (not to be written).
func (st *stdio) dropped(b []byte) bool {
	m, err := jsonrpc.DecodeMessage(b)
	resp, ok := m.(*jsonrpc.Response)
	if err != nil || !ok {
		return false
	}
	delete(st.pending, resp.ID)
	if !st.cancelled[resp.ID] {
		return false
	}
	delete(st.cancelled, resp.ID)
	return true
}

// writeRaw writes an answer of requestLines's own.
func (st *stdio) writeRaw(p []byte) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	_, err := st.w.Write(p)
	return err
}

func (st *stdio) Close() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.w.Close()
}

// refusal is the error answer to a line the SDK cannot take, or "" and
// the line's messages for a line to pass on. batches says whether the
// session may send batches; an initialize request sets it from the
// protocol version it asks for.
func refusal(msg []byte, batches *bool) ([]jsonrpc.Message, string) {
	const (
		parseError     = `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error: the line is not JSON"}}`
		notObject      = `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request: a message is a JSON object"}}`
		notMessage     = `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request: a message is a JSON-RPC 2.0 request, notification or response"}}`
		noOutcome      = `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request: a message without a method is a response, with either result or error"}}`
		emptyBatch     = `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request: an empty batch"}}`
		batchesRefused = `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request: this protocol version has no batches: send one message a line"}}`
		idTwice        = `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request: a batch names one request id twice"}}`
	)
	if !json.Valid(msg) {
		return nil, parseError
	}
	var elems []json.RawMessage
	switch msg[0] {
	case '{':
		elems = []json.RawMessage{msg}
	case '[':
		if json.Unmarshal(msg, &elems) != nil || len(elems) == 0 {
			return nil, emptyBatch
		}
		if !*batches {
			return nil, batchesRefused
		}
	default:
		return nil, notObject
	}
	ids := map[any]bool{}
	var msgs []jsonrpc.Message
	for _, e := range elems {
		m, err := jsonrpc.DecodeMessage(e)
		if err != nil {
			return nil, notMessage
		}
		if _, ok := m.(*jsonrpc.Response); ok {
			// The SDK takes a response with neither result nor error (or
			// both) for one, and ignores it unanswered.
			var keys map[string]json.RawMessage
			_ = json.Unmarshal(e, &keys)
			_, hasResult := keys["result"]
			_, hasError := keys["error"]
			if hasResult == hasError {
				return nil, noOutcome
			}
		}
		if req, ok := m.(*jsonrpc.Request); ok && req.ID.IsValid() {
			if ids[req.ID.Raw()] {
				return nil, idTwice
			}
			ids[req.ID.Raw()] = true
		}
		if req, ok := m.(*jsonrpc.Request); ok && req.Method == "initialize" {
			var p struct {
				ProtocolVersion string `json:"protocolVersion"`
			}
			_ = json.Unmarshal(req.Params, &p)
			// The SDK answers a version it does not know with its latest,
			// which has no batches either.
			*batches = p.ProtocolVersion == "2024-11-05" || p.ProtocolVersion == "2025-03-26"
		}
		msgs = append(msgs, m)
	}
	return msgs, ""
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// held is a lease this session took or adopted, or ended.
type held struct {
	runID string
	fence int64
}

// shared is what the sessions of one server share.
type shared struct {
	// claiming counts the claim_task calls in flight, and stop, when not
	// nil, ends them (Serve's ctx: the SDK's calls outlive it).
	claiming inFlight
	stop     context.Context
}

// tools is the state of one session: one agent run.
type tools struct {
	*shared
	c       *client.Client
	agentID string // as configured; "" for the key's own
	runID   string

	mu     sync.Mutex
	leases map[string]held // task id -> the lease this session holds
	// ended is, by task id, the lease this session's latest release or
	// completion named: repeating it names the same lease.
	ended  map[string]held
	claims int
	// lostClaims are the run ids of the claims whose answers were lost,
	// oldest first: the next claim is sent under the first again, and a
	// run leaves the list only once a claim under it is answered (not
	// when another claim in flight at the same time is).
	lostClaims []string
	// lostCreates are the task ids of creations whose answer was lost: a
	// creation of one again that finds it says it may be the lost one's.
	lostCreates map[string]bool
	// self is the agent the tools act as, once known: configured, or shown
	// by a lease of this session or of its agent's earlier run.
	self string
}

// sessions gives each session of a server its own tools: its own run id
// (unless Options.RunID gives one), leases and lost requests.
type sessions struct {
	*shared
	c              *client.Client
	agentID, runID string // as configured
	mu             sync.Mutex
	of             map[*mcp.ServerSession]*tools
	none           *tools // a call without a session (none the SDK makes)
}

func (s *sessions) newTools() *tools {
	runID := s.runID
	if runID == "" {
		runID = client.NewRunID()
	}
	return &tools{shared: s.shared, c: s.c, agentID: s.agentID, runID: runID, leases: map[string]held{}, ended: map[string]held{}, lostCreates: map[string]bool{}, self: s.agentID}
}

// tools is the session ss's state, made at its first call and forgotten
// when it ends.
func (s *sessions) tools(ss *mcp.ServerSession) *tools {
	if ss == nil {
		return s.none
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.of[ss]; t != nil {
		return t
	}
	t := s.newTools()
	s.of[ss] = t
	go func() {
		_ = ss.Wait()
		s.mu.Lock()
		delete(s.of, ss)
		s.mu.Unlock()
	}()
	return t
}

// New returns the MCP server with its tools, acting through c. Each
// session it serves is an agent run of its own: its own run id (unless
// Options.RunID gives one), leases and lost requests.
func New(c *client.Client, opts ...Options) *mcp.Server {
	s, _ := newServer(c, opts...)
	return s
}

func newServer(c *client.Client, opts ...Options) (*mcp.Server, *shared) {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.Version == "" {
		o.Version = Version
	}
	t := &sessions{shared: &shared{}, c: c, agentID: o.AgentID, runID: o.RunID, of: map[*mcp.ServerSession]*tools{}}
	t.none = t.newTools()
	s := mcp.NewServer(&mcp.Implementation{Name: "checkout", Title: "Task checkout", Version: o.Version}, &mcp.ServerOptions{
		Instructions: limitsText.Replace(instructions),
	})
	no := false
	write := func(idem bool) *mcp.ToolAnnotations {
		return &mcp.ToolAnnotations{DestructiveHint: &no, IdempotentHint: idem, OpenWorldHint: &no}
	}
	read := &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no}
	addTool(s, t, &mcp.Tool{Name: "checkout_task", Title: "Check a task out", Description: descCheckout, Annotations: write(true)}, (*tools).checkout)
	addTool(s, t, &mcp.Tool{Name: "claim_task", Title: "Claim the next open task", Description: descClaim, Annotations: write(false)}, (*tools).claim)
	addTool(s, t, &mcp.Tool{Name: "renew_task", Title: "Renew your lease", Description: descRenew, Annotations: write(true)}, (*tools).renew)
	addTool(s, t, &mcp.Tool{Name: "complete_task", Title: "Complete a task", Description: descComplete, Annotations: write(false)}, (*tools).complete)
	addTool(s, t, &mcp.Tool{Name: "release_task", Title: "Release a task", Description: descRelease, Annotations: write(false)}, (*tools).release)
	addTool(s, t, &mcp.Tool{Name: "fail_task", Title: "Give a task back as failed", Description: descFail, Annotations: write(false)}, (*tools).fail)
	addTool(s, t, &mcp.Tool{Name: "task_status", Title: "Who holds a task", Description: descStatus, Annotations: read}, (*tools).status)
	addTool(s, t, &mcp.Tool{Name: "list_checkouts", Title: "List live checkouts", Description: descListCheckouts, Annotations: read}, (*tools).listCheckouts)
	addTool(s, t, &mcp.Tool{Name: "list_tasks", Title: "List tasks", Description: descListTasks, Annotations: read}, (*tools).listTasks)
	addTool(s, t, &mcp.Tool{Name: "list_queues", Title: "List queues", Description: descListQueues, Annotations: read}, (*tools).listQueues)
	addTool(s, t, &mcp.Tool{Name: "get_task", Title: "Show a task", Description: descGetTask, Annotations: read}, (*tools).getTask)
	addTool(s, t, &mcp.Tool{Name: "create_task", Title: "Create a task", Description: descCreateTask, Annotations: write(false)}, (*tools).createTask)
	addTool(s, t, &mcp.Tool{Name: "update_task", Title: "Change or cancel a task", Description: descUpdateTask, Annotations: write(false)}, (*tools).updateTask)
	addTool(s, t, &mcp.Tool{Name: "watch_task", Title: "Watch a task", Description: descWatch, Annotations: write(true)}, (*tools).watch)
	addTool(s, t, &mcp.Tool{Name: "read_inbox", Title: "Read your inbox", Description: descInbox, Annotations: read}, (*tools).inbox)
	addTool(s, t, &mcp.Tool{Name: "ack_message", Title: "Acknowledge an inbox message", Description: descAck, Annotations: write(true)}, (*tools).ack)
	addTool(s, t, &mcp.Tool{Name: "heartbeat", Title: "Say you are alive", Description: descHeartbeat, Annotations: write(true)}, (*tools).heartbeat)
	return s, t.shared
}

// outcomer is every result type (through its Outcome).
type outcomer interface{ outcome() *Outcome }

// addTool registers h with schemas inferred from In and Out, and does what
// mcp.AddTool does, except that every failure, bad arguments included, is
// a result whose structured content has ok=false, code and message.
func addTool[In, Out any, PO interface {
	*Out
	outcomer
}](s *mcp.Server, sess *sessions, t *mcp.Tool, h func(*tools, context.Context, In) (Out, error)) {
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
	describe(in)
	describe(out)
	t.Description = limitsText.Replace(t.Description)
	t.InputSchema, t.OutputSchema = in, out
	s.AddTool(t, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args In
		raw := req.Params.Arguments
		if len(raw) == 0 || string(raw) == "null" {
			raw = json.RawMessage("{}")
		}
		// A null argument is one left out, for every tool; 5.0 is 5.
		raw = normalize(in, raw)
		if msg := checkArgs(t.Name, in, raw); msg != "" {
			return failure(Outcome{Code: codeInvalidArguments, Message: "invalid arguments: " + msg}), nil
		}
		// checkArgs has refused what the schema and the decoding would; these
		// stay as a backstop, in words that name no Go type.
		var generic any
		if json.Unmarshal(raw, &generic) != nil || resolved.Validate(generic) != nil || json.Unmarshal(raw, &args) != nil {
			return failure(Outcome{Code: codeInvalidArguments, Message: "invalid arguments: they do not fit the tool's input schema"}), nil
		}
		res, err := h(sess.tools(req.Session), ctx, args)
		if err != nil && ctx.Err() != nil {
			// The client cancelled the call (over stdio its answer is
			// dropped, as the protocol asks), or the session ended. A
			// request already sent may have taken effect: its undecided
			// outcome says what to call next.
			o := Outcome{Code: codeCancelled, Message: "the call was cancelled before it finished: whatever it had not done yet was not done"}
			switch st := (*stated)(nil); {
			case !errors.As(err, &st):
			case st.o.Code == codeUndecided:
				o.Message = "the call was cancelled after its request was sent. " + st.o.Message
			case st.o.Code == codeCancelled:
				// It says what became of what it had begun.
				o.Message = st.o.Message
			}
			return failure(o), nil
		}
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
		b, _ = json.Marshal(Outcome{Code: errcode.Internal, Message: "the result could not be encoded"})
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, StructuredContent: json.RawMessage(b), IsError: isError}
}
