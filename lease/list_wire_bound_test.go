package lease_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/httpapi"
	"github.com/checkout-dev/checkout/lease"
)

// A listing page's bound of a task counted its holder's name at 2 bytes a
// byte, though a name is free text, which the answer may escape at 6 bytes
// a byte (7 in API Gateway's envelope): only the allowance for the fixed
// fields kept a page of such tasks under pageBytes. Whatever a task's
// holder is named, its bound grows at least as much as its answer does.
func TestATasksBoundCountsItsHoldersNameAsFreeText(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	h := httpapi.New(e.store, httpapi.Options{})
	answer := func(id string) int {
		req := httptest.NewRequest(http.MethodGet, "/api/tasks/"+id, nil)
		req = req.WithContext(httpapi.ContextWithPrincipal(req.Context(), lease.Principal{AgentID: "a", Name: "a"}))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", id, rec.Code, rec.Body.String())
		}
		return lambdaBodySize(t, rec.Body.Bytes())
	}
	bound := func(id, name string) (int, int) {
		e.create(t, lease.CreateTaskParams{TaskID: id})
		must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: id, AgentID: "a-" + id, AgentName: name, RunID: "run-" + id, Timeout: time.Hour}))
		return lease.TaskWireBound(e.get(t, id)), answer(id)
	}
	plainBound, plainAnswer := bound("plain", "n")
	escapedBound, escapedAnswer := bound("esc-1", "n"+strings.Repeat("<", lease.MaxNameLen-1)) // \u003c: 6 bytes a byte
	if grew, answered := escapedBound-plainBound, escapedAnswer-plainAnswer; grew < answered {
		t.Fatalf("a holder's name of %d escaped bytes grew the task's bound by %d, its answer by %d", lease.MaxNameLen-1, grew, answered)
	}
}
