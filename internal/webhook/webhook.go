// Package webhook POSTs each notice of the change stream (lease.Notice) to
// one or more URLs, signed, retried, and dead-lettered when it cannot be
// delivered. It is a lease.Notifier: the notices function runs it, in AWS
// next to EventBridge and on the local server next to the log.
//
// A delivery is a POST with Content-Type application/json and the body
//
//	{"id":"task-d4e5:31:TaskAvailable","type":"TaskAvailable",
//	 "event":{"type":"timeout","task_id":"task-d4e5","agent_id":"agent-a1b2",
//	          "run_id":"run-7f3c","fence":12,"at":"2026-03-20T14:35:00.000Z",
//	          "held_seconds":1800,"by":"system","reason":""}}
//
// (type is the notice kind, EventBridge's detail-type; event is the API's
// Event) and the headers
//
//	X-Checkout-Event-Id:  the notice id, the same on every retry and the same
//	                      one EventBridge gets: drop repeats by it
//	X-Checkout-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">
//
// signed with the shared secret at each attempt (so t is the attempt's
// time). A 2xx answer delivers it. A 5xx, 408, 429, a timeout or a
// connection error is retried with exponential back-off (with jitter) for
// up to MaxElapsed; any other answer, or retries used up, sends the
// delivery to the dead-letter store with the reason.
//
// A URL that has used up a delivery's retries is down, and a circuit
// breaker keeps it from holding up the notices after it: while it is down,
// each later notice is dead-lettered at once, untried, except that one
// delivery every ProbeInterval (one, however many run at once) tries it
// once. The first that it answers closes the circuit, and deliveries go
// out as before.
//
// Notify never outlasts its context: when the context has a deadline (a
// Lambda invocation's), no attempt or back-off runs into the last
// DeadlineMargin of it, and a notice that cannot be tried in the time left
// is dead-lettered untried rather than let the invocation time out (which
// would hand the whole batch again and hold up what is published beside
// the webhooks, EventBridge included).
//
// Notify returns only when each URL has delivered or dead-lettered: the
// local server calls it from a consumer of the change stream that
// publishes notices alone, so that its retries never delay watchers'
// messages or the feed; the AWS notices function calls it after
// EventBridge for each notice of a batch, so a receiver that is down
// delays the batch's later EventBridge notices by MaxElapsed once and a
// probe now and then, and one that is slow never past the invocation's
// deadline less DeadlineMargin.
package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/checkout-dev/checkout/httpapi"
	"github.com/checkout-dev/checkout/lease"
)

// Headers of every delivery.
const (
	HeaderEventID   = "X-Checkout-Event-Id"
	HeaderSignature = "X-Checkout-Signature"
)

// Environment variables that configure webhooks, on the local server and
// in the stream function.
const (
	EnvURL    = "CHECKOUT_WEBHOOK_URL"    // one or more URLs, comma-separated
	EnvSecret = "CHECKOUT_WEBHOOK_SECRET" // the HMAC key
)

// Defaults.
const (
	DefaultMaxElapsed     = 30 * time.Second
	DefaultInitialBackoff = 250 * time.Millisecond
	DefaultMaxBackoff     = 5 * time.Second
	DefaultAttemptTimeout = 10 * time.Second
	DefaultProbeInterval  = 30 * time.Second
)

// Payload is the body of a delivery.
type Payload struct {
	ID    string            `json:"id"`
	Type  string            `json:"type"`
	Event httpapi.EventJSON `json:"event"`
	// NotBefore, on a TaskAvailable of a task that waits (a failed
	// release's retry delay), is when it may be granted.
	NotBefore *string `json:"not_before,omitempty"`
}

// Body is the JSON body delivered for n.
func Body(n lease.Notice) ([]byte, error) {
	return json.Marshal(Payload{ID: n.ID, Type: n.Kind, Event: httpapi.ToEventJSON(n.Event), NotBefore: httpapi.Stamp(n.NotBefore)})
}

// Sign is the X-Checkout-Signature value of body at t.
func Sign(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(MAC(secret, ts, body))
}

// MAC is HMAC-SHA256 of "<ts>.<body>" keyed by secret.
func MAC(secret, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// DeadLetter is a delivery that failed for good.
type DeadLetter struct {
	URL      string          `json:"url"`
	EventID  string          `json:"event_id"`
	Type     string          `json:"type"`
	Body     json.RawMessage `json:"body"`
	Attempts int             `json:"attempts"`
	Error    string          `json:"error"`
	FailedAt time.Time       `json:"failed_at"`
}

// DeadLetters keeps deliveries that failed for good. An error from Put
// fails the notice, and so the stream batch, which is then delivered again.
type DeadLetters interface {
	Put(ctx context.Context, d DeadLetter) error
}

// Config configures New.
type Config struct {
	URLs   []string
	Secret string
	// Client makes the requests (nil: a client without a timeout of its
	// own; each attempt has AttemptTimeout). Redirects are never followed,
	// whatever the client's CheckRedirect.
	Client         *http.Client
	MaxElapsed     time.Duration // default DefaultMaxElapsed
	InitialBackoff time.Duration // default DefaultInitialBackoff
	MaxBackoff     time.Duration // default DefaultMaxBackoff
	AttemptTimeout time.Duration // default DefaultAttemptTimeout
	// ProbeInterval is how often a URL that is down is tried again, by a
	// single attempt of one delivery; the deliveries in between are
	// dead-lettered untried (default DefaultProbeInterval).
	ProbeInterval time.Duration
	// DeadlineMargin is the part of the context's deadline that deliveries
	// leave to the caller: no attempt or back-off runs into it, and a
	// delivery that finds only the margin left is dead-lettered untried.
	// It must cover what the caller still does after the last delivery
	// (the other notices' EventBridge calls, the dead letters' writes).
	// Without a deadline on the context it does nothing.
	DeadlineMargin time.Duration
	// DeadLetters keeps what could not be delivered (nil: such a notice is
	// an error, so the stream delivers its batch again).
	DeadLetters DeadLetters
	Logger      *slog.Logger
	// Now is the clock of signatures, of the dead letters' failed_at and
	// of ProbeInterval (nil: time.Now). Back-off, attempts and the
	// context's deadline run on the real clock.
	Now func() time.Time
}

// Notifier delivers notices to webhooks.
type Notifier struct {
	cfg Config

	mu   sync.Mutex
	down map[string]*circuit // URLs that are down: the circuit is open
}

// circuit is the breaker of a URL that is down.
type circuit struct {
	since     time.Time // when a delivery used up its retries
	nextProbe time.Time // when one delivery may try it again
	probing   bool      // a delivery is trying it now
	cause     string    // why it went down, or why the last probe failed
}

var _ lease.Notifier = (*Notifier)(nil)

// ParseURLs splits a comma-separated list of URLs and checks each is an
// http or https URL.
func ParseURLs(s string) ([]string, error) {
	var out []string
	for _, u := range strings.Split(s, ",") {
		u = strings.TrimSpace(u)
		if u == "" {
			continue
		}
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return nil, fmt.Errorf("webhook URL %q: want http:// or https://", u)
		}
		out = append(out, u)
	}
	return out, nil
}

// New returns a Notifier for cfg.
func New(cfg Config) (*Notifier, error) {
	if len(cfg.URLs) == 0 {
		return nil, errors.New("webhook: no URL")
	}
	if cfg.Secret == "" {
		return nil, fmt.Errorf("webhook: %s is required with %s", EnvSecret, EnvURL)
	}
	// A redirect is an answer, not 2xx, and final: following it would
	// let the Location's answer decide the delivery (a GET there without
	// the body, say), and send the signed notice to whatever host it
	// names.
	client := http.Client{}
	if cfg.Client != nil {
		client = *cfg.Client
	}
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	cfg.Client = &client
	if cfg.MaxElapsed <= 0 {
		cfg.MaxElapsed = DefaultMaxElapsed
	}
	if cfg.InitialBackoff <= 0 {
		cfg.InitialBackoff = DefaultInitialBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	if cfg.AttemptTimeout <= 0 {
		cfg.AttemptTimeout = DefaultAttemptTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ProbeInterval <= 0 {
		cfg.ProbeInterval = DefaultProbeInterval
	}
	return &Notifier{cfg: cfg, down: map[string]*circuit{}}, nil
}

// Notify delivers n to every URL at once and returns when each has been
// delivered or dead-lettered.
func (w *Notifier) Notify(ctx context.Context, n lease.Notice) error {
	body, err := Body(n)
	if err != nil {
		return err
	}
	errs := make([]error, len(w.cfg.URLs))
	var wg sync.WaitGroup
	for i, u := range w.cfg.URLs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = w.deliver(ctx, u, n, body)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// permanent is a failure that a retry cannot mend.
type permanent struct{ error }

// Admission of a delivery by a URL's circuit.
type admission int

const (
	admitted admission = iota // the URL is up: try, and retry
	probe                     // the URL is down and due a probe: try once
	skipped                   // the URL is down: dead-letter untried
)

// admit says how a delivery to url may go, and takes the probe when one
// is due, so that concurrent deliveries probe a URL that is down once.
func (w *Notifier) admit(url string) (admission, *circuit) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.down[url]
	if c == nil {
		return admitted, nil
	}
	now := w.cfg.Now()
	if c.probing || now.Before(c.nextProbe) {
		cp := *c
		return skipped, &cp
	}
	c.probing = true
	c.nextProbe = now.Add(w.cfg.ProbeInterval)
	return probe, nil
}

// open marks url down after a delivery used up its retries, or a probe
// failed, with the reason; the next probe is one interval away.
func (w *Notifier) open(url string, cause error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.cfg.Now()
	c := w.down[url]
	if c == nil {
		c = &circuit{since: now}
		w.down[url] = c
		w.cfg.Logger.Warn("webhook down: later notices go to the dead letters untried until a probe gets an answer",
			"url", url, "error", cause.Error(), "probe_interval", w.cfg.ProbeInterval.String())
	}
	c.probing = false
	c.nextProbe = now.Add(w.cfg.ProbeInterval)
	c.cause = cause.Error()
}

// close marks url up: it answered. It reports whether it was down.
func (w *Notifier) close(url string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, was := w.down[url]
	delete(w.down, url)
	return was
}

// isDown reports whether url is down, so that a delivery in its retries
// stops once another has found it down.
func (w *Notifier) isDown(url string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.down[url] != nil
}

// endProbe gives back a probe that ended without an answer either way
// (its context ended): the next is due at the time the probe set.
func (w *Notifier) endProbe(url string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c := w.down[url]; c != nil {
		c.probing = false
	}
}

// errNoTime is why a delivery stops when the context's deadline, less
// DeadlineMargin, leaves no time for another attempt.
var errNoTime = errors.New("no time left before the deadline")

func (w *Notifier) deliver(ctx context.Context, url string, n lease.Notice, body []byte) error {
	// try is ctx less the margin: attempts and back-off end with it,
	// and the dead letter is written with what is left of ctx.
	try, cancel := ctx, context.CancelFunc(func() {})
	if dl, ok := ctx.Deadline(); ok {
		try, cancel = context.WithDeadline(ctx, dl.Add(-w.cfg.DeadlineMargin))
	}
	defer cancel()
	if try.Err() != nil && ctx.Err() == nil {
		return w.deadLetter(ctx, url, n, body, 0, fmt.Errorf("not tried: %w", errNoTime))
	}
	how, c := w.admit(url)
	if how == skipped {
		return w.skip(ctx, try, url, n, body, fmt.Errorf("not tried: down since %s (%s); next try at %s",
			c.since.UTC().Format(time.RFC3339), c.cause, c.nextProbe.UTC().Format(time.RFC3339)))
	}
	deadline := time.Now().Add(w.cfg.MaxElapsed)
	wait := w.cfg.InitialBackoff
	attempts := 0
	var last error
	for {
		if try.Err() != nil && ctx.Err() == nil {
			// Out of time: not the receiver's doing, so it is not marked down.
			if how == probe {
				w.endProbe(url)
			}
			if attempts == 0 {
				return w.deadLetter(ctx, url, n, body, 0, fmt.Errorf("not tried: %w", errNoTime))
			}
			return w.deadLetter(ctx, url, n, body, attempts, fmt.Errorf("%w (last: %w)", errNoTime, last))
		}
		attempts++
		last = w.attempt(try, url, n.ID, body)
		if last == nil {
			if w.close(url) {
				w.cfg.Logger.InfoContext(ctx, "webhook answers again", "url", url)
			}
			return nil
		}
		if ctx.Err() != nil {
			if how == probe {
				w.endProbe(url)
			}
			return fmt.Errorf("webhook %s: %w", url, ctx.Err())
		}
		if try.Err() != nil {
			continue // out of time, said above
		}
		var p permanent
		if errors.As(last, &p) {
			// An answer, if a refusal: the receiver is up.
			w.close(url)
			break
		}
		if how == probe {
			w.open(url, last)
			break
		}
		if w.isDown(url) {
			break // another delivery used up its retries meanwhile
		}
		// Full jitter on an exponential step.
		d := wait/2 + rand.N(wait/2+1)
		if time.Now().Add(d).After(deadline) {
			w.open(url, last)
			break
		}
		w.cfg.Logger.DebugContext(ctx, "webhook delivery failed; retrying", "url", url, "id", n.ID, "attempt", attempts, "error", last.Error())
		select {
		case <-try.Done():
		case <-time.After(d):
		}
		wait = min(wait*2, w.cfg.MaxBackoff)
	}
	return w.deadLetter(ctx, url, n, body, attempts, last)
}

// skip dead-letters a delivery to a URL that is down, untried. When the
// dead letter cannot be written either, the notice fails and its caller
// hands it again, so it holds up the notices after it whatever happens:
// the delivery is then tried once after all, which costs no more than the
// wait it has, and lets a receiver that is back take it.
func (w *Notifier) skip(ctx, try context.Context, url string, n lease.Notice, body []byte, why error) error {
	if w.cfg.DeadLetters == nil {
		return w.deadLetter(ctx, url, n, body, 0, why)
	}
	err := w.cfg.DeadLetters.Put(ctx, DeadLetter{
		URL: url, EventID: n.ID, Type: n.Kind, Body: body,
		Error: why.Error(), FailedAt: w.cfg.Now().UTC(),
	})
	if err == nil {
		w.cfg.Logger.WarnContext(ctx, "webhook delivery failed; dead-lettered", "url", url, "id", n.ID, "attempts", 0, "error", why.Error())
		return nil
	}
	last := w.attempt(try, url, n.ID, body)
	if last == nil {
		if w.close(url) {
			w.cfg.Logger.InfoContext(ctx, "webhook answers again", "url", url)
		}
		return nil
	}
	w.cfg.Logger.ErrorContext(ctx, "webhook delivery failed; the dead letter could not be written", "url", url, "id", n.ID,
		"attempts", 1, "error", last.Error(), "dead_letter_error", err.Error())
	return fmt.Errorf("webhook %s: %s: not delivered (%w), and the dead letter not written: %w", url, n.ID, last, err)
}

// deadLetter keeps a delivery that failed for good, or was not tried, in
// the dead-letter store; without one, it is the notice's error.
func (w *Notifier) deadLetter(ctx context.Context, url string, n lease.Notice, body []byte, attempts int, last error) error {
	if w.cfg.DeadLetters == nil {
		w.cfg.Logger.WarnContext(ctx, "webhook delivery failed", "url", url, "id", n.ID, "attempts", attempts, "error", last.Error())
		return fmt.Errorf("webhook %s: %s: %w", url, n.ID, last)
	}
	err := w.cfg.DeadLetters.Put(ctx, DeadLetter{
		URL: url, EventID: n.ID, Type: n.Kind, Body: body, Attempts: attempts,
		Error: last.Error(), FailedAt: w.cfg.Now().UTC(),
	})
	if err != nil {
		// Said as such: the notice is neither delivered nor kept, and
		// fails, so that it is handed again.
		w.cfg.Logger.ErrorContext(ctx, "webhook delivery failed; the dead letter could not be written", "url", url, "id", n.ID,
			"attempts", attempts, "error", last.Error(), "dead_letter_error", err.Error())
		return fmt.Errorf("webhook %s: %s: not delivered (%w), and the dead letter not written: %w", url, n.ID, last, err)
	}
	w.cfg.Logger.WarnContext(ctx, "webhook delivery failed; dead-lettered", "url", url, "id", n.ID, "attempts", attempts, "error", last.Error())
	return nil
}

// attempt makes one delivery: nil for a 2xx, permanent for an answer a
// retry cannot change.
func (w *Notifier) attempt(ctx context.Context, url, id string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.AttemptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return permanent{err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "checkout-webhook/1")
	req.Header.Set(HeaderEventID, id)
	req.Header.Set(HeaderSignature, Sign(w.cfg.Secret, w.cfg.Now(), body))
	resp, err := w.cfg.Client.Do(req)
	if err != nil {
		return err // a timeout or a connection that failed: retried
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return nil
	case resp.StatusCode >= 500, resp.StatusCode == http.StatusRequestTimeout, resp.StatusCode == http.StatusTooManyRequests:
		return fmt.Errorf("answered %s", resp.Status)
	}
	return permanent{fmt.Errorf("answered %s", resp.Status)}
}

// Multi is a notifier that tells each of ns in turn; all are told even
// when one fails, and the errors are joined.
func Multi(ns ...lease.Notifier) lease.Notifier { return multi(ns) }

type multi []lease.Notifier

func (m multi) Notify(ctx context.Context, n lease.Notice) error {
	var errs []error
	for _, x := range m {
		if x != nil {
			errs = append(errs, x.Notify(ctx, n))
		}
	}
	return errors.Join(errs...)
}
