// Package webhook POSTs each notice of the change stream (lease.Notice) to
// one or more URLs, signed, retried, and dead-lettered when it cannot be
// delivered. It is a lease.Notifier: the stream function runs it, in AWS
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
// delivery to the dead-letter store with the reason. A URL that has just
// used up its retries is tried once per notice (no back-off) until it
// answers again, so a receiver that is down holds up the notices after it
// as little as it can. Notify returns only when each URL has delivered or
// dead-lettered: the local server calls it from a consumer of the change
// stream that publishes notices alone, so that its retries never delay
// watchers' messages or the feed; the AWS stream function calls it with
// the rest of a batch's consequences.
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
	// DeadLetters keeps what could not be delivered (nil: such a notice is
	// an error, so the stream delivers its batch again).
	DeadLetters DeadLetters
	Logger      *slog.Logger
	// Now is the clock of signatures (nil: time.Now).
	Now func() time.Time
}

// Notifier delivers notices to webhooks.
type Notifier struct {
	cfg Config

	mu   sync.Mutex
	down map[string]bool // URLs whose last delivery used up its retries
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
	return &Notifier{cfg: cfg, down: map[string]bool{}}, nil
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

func (w *Notifier) deliver(ctx context.Context, url string, n lease.Notice, body []byte) error {
	w.mu.Lock()
	down := w.down[url]
	w.mu.Unlock()
	deadline := time.Now().Add(w.cfg.MaxElapsed)
	wait := w.cfg.InitialBackoff
	attempts := 0
	var last error
	for {
		attempts++
		last = w.attempt(ctx, url, n.ID, body)
		if last == nil {
			if down {
				w.cfg.Logger.InfoContext(ctx, "webhook answers again", "url", url)
			}
			w.setDown(url, false)
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("webhook %s: %w", url, ctx.Err())
		}
		var p permanent
		if errors.As(last, &p) || down {
			break
		}
		// Full jitter on an exponential step.
		d := wait/2 + rand.N(wait/2+1)
		if time.Now().Add(d).After(deadline) {
			break
		}
		w.cfg.Logger.DebugContext(ctx, "webhook delivery failed; retrying", "url", url, "id", n.ID, "attempt", attempts, "error", last.Error())
		select {
		case <-ctx.Done():
			return fmt.Errorf("webhook %s: %w", url, ctx.Err())
		case <-time.After(d):
		}
		wait = min(wait*2, w.cfg.MaxBackoff)
	}
	var p permanent
	if !errors.As(last, &p) {
		w.setDown(url, true)
	}
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

func (w *Notifier) setDown(url string, down bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if down {
		w.down[url] = true
	} else {
		delete(w.down, url)
	}
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
