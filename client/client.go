// Package client is the Go client of the checkout HTTP API (version 1.1,
// the work graph included: blocked tasks, attempts and failed releases).
//
// A Client has a method per route, returns typed values and typed errors
// (a *ConflictError carries the holder of a task; sentinels such as
// ErrNoTaskAvailable match with errors.Is), and retries what is safe to
// retry with exponential backoff and full jitter, waiting at least what an
// answer's Retry-After asks. A 429 or 5xx, the server's or a gateway's in
// front of it, matches ErrUnavailable once the retries are spent.
// Checkouts and claims are
// made idempotent by a run id that the client generates when the caller
// gives none, so a retried checkout whose first answer was lost gets the same
// lease back instead of a conflict with itself.
//
// Most agents need one of two helpers: WorkOn, which holds a lease on one
// task for as long as a function runs, and ClaimLoop, which works through
// the pool of open tasks one at a time.
package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/checkout-dev/checkout/errcode"
)

// Client talks to one checkout server with one API key. It is safe for
// concurrent use.
type Client struct {
	baseURL string
	// urlErr, when not nil, is the error of every call: the base URL is
	// not one a request can go to.
	urlErr    error
	apiKey    string
	http      *http.Client
	retry     RetryPolicy
	userAgent string
	now       func() time.Time
	sleep     func(ctx context.Context, d time.Duration) error
	jitter    func(n int64) int64

	// beating counts the WorkOn and ClaimLoop calls heartbeating now, or
	// sending their first heartbeat (startHeartbeats).
	beatMu  sync.Mutex
	beating int

	// self is the key's own agent id once Whoami has told it (a key's
	// agent never changes): a lease request's AgentID naming it is left
	// out (selfID).
	selfMu sync.Mutex
	self   string
	// asking is held by the request asking Whoami for actingAs, so that
	// requests that need the answer at once ask it once between them.
	asking chan struct{}
}

// RetryPolicy bounds the retries of a request (a try that timed out is
// never tried again; see WithHTTPClient). The delay before retry n
// (1-based) is a random duration in [0, min(MaxDelay, BaseDelay*2^(n-1))),
// or the answer's Retry-After when that is longer. A request is not tried
// again when Retry-After passes MaxRetryAfter, or when the delay would
// end after the context's deadline: its error then is the last answer's
// (or, for the deadline, one matching both it and
// context.DeadlineExceeded).
type RetryPolicy struct {
	// MaxAttempts counts the first try; 1 disables retries.
	MaxAttempts int
	BaseDelay   time.Duration
	// MaxDelay bounds each delay; 0 sets no bound (the delays double
	// from BaseDelay, up to an hour).
	MaxDelay time.Duration
}

// DefaultRetryPolicy makes up to 4 attempts, waiting at most 0.1s, 0.2s and
// 0.4s (randomised) between them.
var DefaultRetryPolicy = RetryPolicy{MaxAttempts: 4, BaseDelay: 100 * time.Millisecond, MaxDelay: 2 * time.Second}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the HTTP client (default, and for nil: one with a
// 30s timeout). A try that its timeout ends is not tried again, whatever
// the retry policy: a server that let the whole timeout pass would make
// every further try wait as long.
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.http = h } }

// WithRetryPolicy sets the retry policy.
func WithRetryPolicy(p RetryPolicy) Option { return func(c *Client) { c.retry = p } }

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// WithClock sets the clock used to judge whether a lease has run out while
// its renewals fail (default time.Now).
func WithClock(now func() time.Time) Option { return func(c *Client) { c.now = now } }

// WithSleeper replaces how the client waits: between retries, between
// renewals and heartbeats, and while the pool is empty. sleep must return
// ctx.Err() when ctx is done first. Tests use it to control time.
func WithSleeper(sleep func(ctx context.Context, d time.Duration) error) Option {
	return func(c *Client) { c.sleep = sleep }
}

// New returns a client of the server at baseURL (for example
// "http://127.0.0.1:3100") using apiKey. When baseURL is not an absolute
// http:// or https:// URL with a host, every call of the client fails at
// once, sending nothing, with a *BaseURLError naming it (errors.Is
// ErrInvalidBaseURL).
func New(baseURL, apiKey string, opts ...Option) *Client {
	c := &Client{
		baseURL:   strings.TrimRight(baseURL, "/"),
		urlErr:    CheckBaseURL(baseURL),
		apiKey:    apiKey,
		http:      &http.Client{Timeout: 30 * time.Second},
		retry:     DefaultRetryPolicy,
		userAgent: "checkout-go-client/1",
		now:       time.Now,
		sleep:     sleepCtx,
		jitter:    func(n int64) int64 { return mrand.Int64N(n) },
		asking:    make(chan struct{}, 1),
	}
	for _, o := range opts {
		o(c)
	}
	if c.http == nil {
		c.http = &http.Client{Timeout: 30 * time.Second}
	}
	if c.retry.MaxAttempts < 1 {
		c.retry.MaxAttempts = 1
	}
	return c
}

// BaseURL is the server's URL as given to New.
func (c *Client) BaseURL() string { return c.baseURL }

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// NewRunID returns a fresh random run id ("run-" and 16 hex digits).
func NewRunID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "run-" + hex.EncodeToString(b[:])
}

// Response is the raw answer of a request, recorded by RecordResponse.
type Response struct {
	Status int
	Body   []byte
}

type recorderKey struct{}

// RecordResponse returns a context under which the client stores the last
// answer's status and raw JSON body (success or error) in r: the answer to
// the last try of the last request, none when that try got no answer.
// Command-line tools use it to print the server's JSON unchanged.
func RecordResponse(ctx context.Context, r *Response) context.Context {
	return context.WithValue(ctx, recorderKey{}, r)
}

// retryMode says which failures a request may be retried on.
type retryMode int

const (
	// idempotent requests are retried on network errors, 5xx and 429.
	idempotent retryMode = iota
	// once requests (whose repetition would answer differently, like a
	// release whose first answer was lost) are retried only when the server
	// cannot have acted: the connection was refused, or 429.
	once
)

// do sends one request, with retries, and decodes a 2xx answer into out
// (which may be nil).
func (c *Client) do(ctx context.Context, mode retryMode, method, path string, in, out any) error {
	if c.urlErr != nil {
		return c.urlErr
	}
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return fmt.Errorf("checkout: encode request: %w", err)
		}
	}
	if seg, ok := badSegment(path); ok {
		return invalidIDError(seg)
	}
	var lastErr error
	// undecided: an earlier try was sent and its answer lost (or a 5xx),
	// so the server may have acted on the request, whatever the later
	// tries meet (a server that went down refuses their connections).
	undecided := false
	// asked: /healthz was asked once whether the URL is a checkout
	// server's, after a 5xx without the API's code.
	asked := false
	for attempt := 1; ; attempt++ {
		// What is recorded is the last try's answer: a try that gets
		// none leaves none, not an earlier try's (a 429 or 5xx that
		// did nothing, printed as the request's answer).
		record(ctx, 0, nil)
		status, header, respBody, sent, err := c.send(ctx, method, path, body)
		sent = sent || undecided
		if err == nil && status < 300 {
			record(ctx, status, respBody)
			if out == nil || len(respBody) == 0 {
				return nil
			}
			if err := json.Unmarshal(respBody, out); err != nil {
				if nse := c.notServer(ctx); nse != nil {
					return nse
				}
				return fmt.Errorf("checkout: %s %s: decode answer: %w", method, path, err)
			}
			noteServerTime(out, header)
			return nil
		}
		retryable := false
		var retryAfter time.Duration
		if err != nil {
			if ctx.Err() != nil {
				if sent {
					return &sentStopped{ctxErr: ctx.Err()}
				}
				return ctx.Err()
			}
			lastErr = &UnreachableError{URL: c.baseURL, Err: err, Sent: sent}
			// A try that timed out is not tried again: the server (or
			// a proxy in front of it) let the HTTP client's whole
			// timeout pass, and each further try would wait as long
			// (with the defaults, four tries of 30 s: two minutes
			// without a word).
			retryable = (mode == idempotent && !timedOut(err)) || isConnRefused(err)
		} else {
			record(ctx, status, respBody)
			retryAfter = parseRetryAfter(header.Get("Retry-After"), time.Now())
			lastErr = decodeError(status, respBody)
			var ae *APIError
			if errors.As(lastErr, &ae) {
				ae.RetryAfter = retryAfter
			}
			if undecided && status == http.StatusTooManyRequests {
				// Throttled, this try says nothing of the earlier one
				// whose answer was lost.
				lastErr = &throttledAfterLost{last: lastErr}
			}
			overloaded := status == http.StatusTooManyRequests || status >= 500
			if !overloaded && ae != nil && path != "/healthz" && (ae.Code == "" || ae.Code == errcode.NotFound || ae.Code == errcode.MethodNotAllowed) {
				// Not the API's error form, or no such route: is this a
				// checkout server at all? A base URL with a wrong path
				// (http://host/api) reaches a checkout server that knows
				// none of the paths asked; taken at its word, a claim
				// would look like an empty queue for ever. (A plain
				// not_found is also a missing inbox message: /healthz
				// then answers as a checkout server and the answer
				// stands.) A 429 without a code is not asked about: it
				// is a gateway's or a proxy's in front of the server,
				// throttling, which a retry may get past.
				if nse := c.notServer(ctx); nse != nil {
					return nse
				}
			}
			if status >= 500 && ae != nil && ae.Code == "" && path != "/healthz" && !asked {
				// A 5xx without the API's code is a gateway's or a
				// proxy's in front of the server (a Lambda concurrency
				// limit, a restart), or the answer of a server that is
				// not a checkout server at all (a plain web server
				// answers a POST 501): once a call, /healthz tells
				// them apart. A gateway whose server is down answers
				// it with a 5xx too, which leaves this answer standing.
				asked = true
				if nse := c.notServer(ctx); nse != nil {
					return nse
				}
			}
			retryable = status == http.StatusTooManyRequests || (status >= 500 && mode == idempotent)
		}
		undecided = undecided || errors.Is(lastErr, ErrUndecided)
		if !retryable || attempt >= c.retry.MaxAttempts {
			return lastErr
		}
		if retryAfter > MaxRetryAfter {
			// The server asks for a longer pause than a call should
			// block for: the caller decides (APIError.RetryAfter).
			return lastErr
		}
		wait := max(c.backoff(attempt), retryAfter)
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) <= wait {
			// The retry would come after the deadline: give up now
			// rather than wait in vain.
			return &retryStopped{ctxErr: context.DeadlineExceeded, last: lastErr}
		}
		if err := c.sleep(ctx, wait); err != nil {
			return &retryStopped{ctxErr: err, last: lastErr}
		}
	}
}

// noteServerTime sets the ServerTime of the tasks in out (a task, a page
// of them or a batch's results) or of the messages in an inbox to the
// answer's Date header, when it has one.
func noteServerTime(out any, header http.Header) {
	at, err := http.ParseTime(header.Get("Date"))
	if err != nil {
		return
	}
	switch v := out.(type) {
	case *Task:
		v.ServerTime = at
	case *TaskPage:
		for i := range v.Tasks {
			v.Tasks[i].ServerTime = at
		}
	case *batchAnswer:
		for i := range v.Results {
			v.Results[i].Task.ServerTime = at
		}
	case *inboxAnswer:
		for i := range v.Messages {
			v.Messages[i].ServerTime = at
		}
	}
}

// MaxRetryAfter is the longest Retry-After the client waits before it
// tries a request again. An answer asking for a longer pause is returned
// at once (its APIError.RetryAfter says how long).
const MaxRetryAfter = 30 * time.Second

// parseRetryAfter is the wait a Retry-After header asks for: whole seconds
// or an HTTP date; 0 when there is none or it cannot be read.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		return time.Duration(min(n, int64(24*time.Hour/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), 24*time.Hour)
	}
	return 0
}

// retryStopped is the error of a request whose retry the context ended
// (cancelled, or its deadline passed or would pass before the retry):
// it matches the context's error and, after it, the last answer's.
type retryStopped struct {
	ctxErr error // context.Canceled or context.DeadlineExceeded
	last   error
}

func (e *retryStopped) Error() string {
	return fmt.Sprintf("%v before the request could be tried again (last answer: %v)", e.ctxErr, e.last)
}

func (e *retryStopped) Unwrap() []error { return []error{e.ctxErr, e.last} }

// sentStopped is the error of a request that the context ended (cancelled,
// or its deadline passed) after the request was sent, before its answer
// came: the server may have acted on it. It matches the context's error
// and ErrUndecided.
type sentStopped struct {
	ctxErr error
}

func (e *sentStopped) Error() string {
	return fmt.Sprintf("%v after the request was sent, before its answer came: it may have taken effect", e.ctxErr)
}

func (e *sentStopped) Unwrap() error { return e.ctxErr }

// Is matches ErrUndecided.
func (e *sentStopped) Is(target error) bool { return target == ErrUndecided }

// throttledAfterLost is the error of a try throttled (429) after an
// earlier try of the same call was sent and its answer lost: the server
// may have acted on that one. It matches the 429's errors and
// ErrUndecided.
type throttledAfterLost struct {
	last error
}

func (e *throttledAfterLost) Error() string {
	return fmt.Sprintf("%v, after a try whose answer was lost: it may have taken effect", e.last)
}

func (e *throttledAfterLost) Unwrap() error { return e.last }

// Is matches ErrUndecided.
func (e *throttledAfterLost) Is(target error) bool { return target == ErrUndecided }

// maxBackoff bounds the delay between two tries of a policy without a
// MaxDelay.
const maxBackoff = time.Hour

// backoff is the full-jitter delay before retry number attempt.
func (c *Client) backoff(attempt int) time.Duration {
	d := c.retry.BaseDelay
	// A MaxDelay of 0 sets no bound: the delays still double (up to
	// maxBackoff, which keeps them from overflowing).
	for i := 1; i < attempt && d > 0 && d < maxBackoff && (c.retry.MaxDelay <= 0 || d < c.retry.MaxDelay); i++ {
		d *= 2
	}
	d = min(d, maxBackoff)
	if c.retry.MaxDelay > 0 && d > c.retry.MaxDelay {
		d = c.retry.MaxDelay
	}
	if d <= 0 {
		return 0
	}
	return time.Duration(c.jitter(int64(d)))
}

// unrecorded is ctx without the Response of RecordResponse: the context
// of requests the client sends in the background (renewals, heartbeats),
// which are not the caller's and must not write its Response from
// another goroutine.
func unrecorded(ctx context.Context) context.Context {
	return context.WithValue(ctx, recorderKey{}, nil)
}

func record(ctx context.Context, status int, body []byte) {
	if r, ok := ctx.Value(recorderKey{}).(*Response); ok {
		r.Status, r.Body = status, body
	}
}

// send makes one request. sent reports, for a request that got no answer,
// whether it was written whole to a connection: the server may then have
// acted on it.
func (c *Client) send(ctx context.Context, method, path string, body []byte) (status int, header http.Header, answer []byte, sent bool, err error) {
	var wrote atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(w httptrace.WroteRequestInfo) {
		if w.Err == nil {
			wrote.Store(true)
		}
	}})
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.baseURL+path, rd)
	if err != nil {
		return 0, nil, nil, false, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	req.Header.Set("User-Agent", c.userAgent)
	if v, ok := ctx.Value(ifMatchKey{}).(string); ok {
		req.Header.Set("If-Match", v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, nil, wrote.Load(), err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return 0, nil, nil, true, err
	}
	return resp.StatusCode, resp.Header, b, true, nil
}

// badSegment is the first segment of path (before its query), after the
// leading one, that no id can be: "" (an empty id), "." or "..". URLs
// resolve dot segments away and an empty segment names no resource, so
// the request would reach another route (or none).
func badSegment(path string) (string, bool) {
	p, _, _ := strings.Cut(path, "?")
	for _, seg := range strings.Split(strings.TrimPrefix(p, "/"), "/") {
		if seg == "" || seg == "." || seg == ".." {
			return seg, true
		}
	}
	return "", false
}

// invalidIDError refuses an id that cannot name anything without sending
// anything, as the server refuses any other malformed id: 400 invalid_id.
func invalidIDError(seg string) error {
	msg := fmt.Sprintf("id %q is not valid: an id is 1 to 128 letters, digits, '.', '_', ':' or '-', starting with a letter or digit", seg)
	body, _ := json.Marshal(map[string]string{"error": msg, "code": errcode.InvalidID})
	return &APIError{Status: http.StatusBadRequest, Code: errcode.InvalidID, Message: msg, Body: body}
}

// noQueuesError refuses a claim whose list of queues names none, without
// sending it, as the server refuses one: 400 invalid_request. (Sent as it
// is, the empty list would be left out of the body, and the claim would
// take a task of the default queue.)
func noQueuesError() error {
	const msg = "queues must name at least one queue; leave Queues nil to claim from the server's default queue"
	body, _ := json.Marshal(map[string]string{"error": msg, "code": errcode.InvalidRequest})
	return &APIError{Status: http.StatusBadRequest, Code: errcode.InvalidRequest, Message: msg, Body: body}
}

// notServer asks GET /healthz whether the base URL is a checkout server, and
// returns a *NotServerError when it does not answer as one: 200 {"ok": true}
// or 503 {"ok": false}. It returns nil when it does, or when the question
// got no answer (the request's own error says more then): no response, or
// a 429 or 5xx (a gateway throttling, or a proxy whose server is down).
func (c *Client) notServer(ctx context.Context) error {
	status, _, body, _, err := c.send(ctx, http.MethodGet, "/healthz", nil)
	if err != nil || status == http.StatusTooManyRequests || status >= 500 {
		return nil
	}
	var h struct {
		OK *bool `json:"ok"`
	}
	if json.Unmarshal(body, &h) == nil && h.OK != nil && status == http.StatusOK && *h.OK {
		return nil
	}
	detail := fmt.Sprintf("%d %s", status, http.StatusText(status))
	if status == http.StatusOK {
		detail = "200 without {\"ok\": true}"
	}
	return &NotServerError{URL: c.baseURL, Detail: detail}
}

// timedOut reports whether a try got no answer in time: the HTTP client's
// timeout, or the connection's.
func timedOut(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func isConnRefused(err error) bool {
	var ue *UnreachableError
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return strings.Contains(reason(err), "connection refused")
}
