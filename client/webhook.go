package client

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// Webhook headers: every delivery carries the notice's id, the same on
// every retry (drop repeats by it), and its signature.
const (
	WebhookEventIDHeader   = "X-Checkout-Event-Id"
	WebhookSignatureHeader = "X-Checkout-Signature"
)

// Errors of VerifyWebhook.
var (
	// ErrWebhookSignature: the header is missing or malformed, or no
	// signature in it matches the body under the secret.
	ErrWebhookSignature = errors.New("checkout webhook: signature does not match")
	// ErrWebhookStale: the signature matches but its time is further than
	// the tolerance from now (a replayed delivery).
	ErrWebhookStale = errors.New("checkout webhook: signature is too old or in the future")
)

// WebhookPayload is the body of a webhook delivery: the notice id (also in
// X-Checkout-Event-Id), its kind ("TaskAvailable", "LeaseEnded", "LeaseLost"
// or "TaskFailed", as EventBridge's detail-type) and the lease event. A
// TaskAvailable whose event type is "unblocked" is a task whose last
// blocker was completed; one whose event type is "cancel" is a task
// cancelled while it had a lease, which is not available.
type WebhookPayload struct {
	ID    string `json:"id"`
	Type  string `json:"type"`
	Event Event  `json:"event"`
	// NotBefore, on a TaskAvailable of a task that waits (the retry delay
	// after a failed release), is when it may be granted; nil when it is
	// claimable at once.
	NotBefore *time.Time `json:"not_before,omitempty"`
}

// VerifyWebhook checks a delivery's X-Checkout-Signature header,
// "t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">", against the raw
// request body (read it whole, before decoding) and the shared secret, and
// that t is within tolerance of now (tolerance <= 0: 5 minutes). Several v1
// entries may be given (one per secret, while secrets rotate); one match
// is enough. The comparison takes constant time.
func VerifyWebhook(secret, header string, body []byte, tolerance time.Duration) error {
	return verifyWebhook(secret, header, body, tolerance, time.Now())
}

func verifyWebhook(secret, header string, body []byte, tolerance time.Duration, now time.Time) error {
	if tolerance <= 0 {
		tolerance = 5 * time.Minute
	}
	var ts string
	var sigs [][]byte
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return ErrWebhookSignature
		}
		switch k {
		case "t":
			ts = v
		case "v1":
			if b, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	t, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 || secret == "" {
		return ErrWebhookSignature
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	want := m.Sum(nil)
	match := false
	for _, s := range sigs {
		match = hmac.Equal(s, want) || match
	}
	if !match {
		return ErrWebhookSignature
	}
	if d := now.Sub(time.Unix(t, 0)); d > tolerance || d < -tolerance {
		return ErrWebhookStale
	}
	return nil
}
