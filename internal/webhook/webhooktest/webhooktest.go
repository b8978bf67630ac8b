// Package webhooktest is a real HTTP receiver of the service's webhooks for
// tests: it verifies each delivery's signature with the Go client's
// verifier, can fail on purpose for a while, and counts deliveries by event
// id.
package webhooktest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/checkout-dev/checkout/client"
)

// Receiver is a webhook endpoint.
type Receiver struct {
	URL    string
	Secret string

	srv *httptest.Server

	mu         sync.Mutex
	failStatus int           // answer this while failing (0: 503)
	failNext   int           // fail this many more deliveries
	failUntil  time.Time     // fail every delivery until then
	hang       time.Duration // while failing, wait this long first (a timeout)
	attempts   int
	rejected   int // deliveries whose signature did not verify
	byID       map[string]int
	bodies     map[string][]client.WebhookPayload
	order      []string // event ids as first accepted
}

// New starts a receiver that checks signatures against secret. Close it
// when done.
func New(secret string) *Receiver {
	r := &Receiver{Secret: secret, byID: map[string]int{}, bodies: map[string][]client.WebhookPayload{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	r.URL = r.srv.URL + "/hook"
	return r
}

// Close stops the receiver.
func (r *Receiver) Close() { r.srv.Close() }

// FailNext makes the next n deliveries fail with status (0: 503).
func (r *Receiver) FailNext(n, status int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failNext, r.failStatus = n, status
}

// FailFor makes every delivery fail with status (0: 503) for d; with hang,
// each waits that long before it answers, so that the sender times out.
func (r *Receiver) FailFor(d time.Duration, status int, hang time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failUntil, r.failStatus, r.hang = time.Now().Add(d), status, hang
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.attempts++
	if err := client.VerifyWebhook(r.Secret, req.Header.Get(client.WebhookSignatureHeader), body, time.Minute); err != nil {
		r.rejected++
		r.mu.Unlock()
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	failing := r.failNext > 0 || time.Now().Before(r.failUntil)
	if r.failNext > 0 {
		r.failNext--
	}
	status, hang := r.failStatus, r.hang
	r.mu.Unlock()
	if failing {
		if hang > 0 {
			select {
			case <-time.After(hang):
			case <-req.Context().Done():
			}
		}
		if status == 0 {
			status = http.StatusServiceUnavailable
		}
		w.WriteHeader(status)
		return
	}
	var p client.WebhookPayload
	if err := json.Unmarshal(body, &p); err != nil || p.ID == "" || p.ID != req.Header.Get(client.WebhookEventIDHeader) {
		r.mu.Lock()
		r.rejected++
		r.mu.Unlock()
		http.Error(w, "the body's id is not the event id header", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	if r.byID[p.ID] == 0 {
		r.order = append(r.order, p.ID)
	}
	r.byID[p.ID]++
	r.bodies[p.ID] = append(r.bodies[p.ID], p)
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// Delivered is how many times each event id was accepted.
func (r *Receiver) Delivered() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.byID))
	for k, v := range r.byID {
		out[k] = v
	}
	return out
}

// Payloads are the accepted bodies of one event id.
func (r *Receiver) Payloads(id string) []client.WebhookPayload {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]client.WebhookPayload(nil), r.bodies[id]...)
}

// Attempts counts every request, accepted or not; Rejected those whose
// signature or id did not check out.
func (r *Receiver) Attempts() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.attempts
}

// Rejected counts deliveries whose signature or id did not check out.
func (r *Receiver) Rejected() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rejected
}
