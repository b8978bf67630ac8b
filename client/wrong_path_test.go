package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/checkout-dev/checkout/errcode"
)

// A base URL with a wrong path reaches a checkout server that knows none of
// the paths asked. Its 404 not_found was taken as the answer: a claim read
// as "no task available" for ever, a checkout as "task not found". It is
// now a *NotServerError, as for any server that is not a checkout server;
// a missing inbox message, the one route whose miss is a plain not_found,
// still matches ErrMessageNotFound.
func TestAgainstServerAWrongPathIsNotAServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, admin := startServer(t, nil)
	a := agent(t, admin, "agent-a1b2", "researcher")
	if _, err := a.CreateTask(ctx, CreateTaskRequest{TaskID: "task-d4e5", Title: "Fix login bug"}); err != nil {
		t.Fatal(err)
	}
	key := a.apiKey
	wrong := New(srv.URL()+"/api", key)
	for name, call := range map[string]func() error{
		"claim":    func() error { _, err := wrong.Claim(ctx, ClaimRequest{}); return err },
		"checkout": func() error { _, err := wrong.Checkout(ctx, "task-d4e5", CheckoutRequest{}); return err },
		"list":     func() error { _, err := wrong.ListCheckouts(ctx, ""); return err },
		"inbox":    func() error { return wrong.DeleteMessage(ctx, "m-1") },
	} {
		err := call()
		var nse *NotServerError
		if !errors.As(err, &nse) || errors.Is(err, ErrNoTaskAvailable) || errors.Is(err, ErrNotFound) {
			t.Errorf("%s at %s/api: %v, want not a checkout server", name, srv.URL(), err)
		}
	}
	if err := a.DeleteMessage(ctx, "m-1"); !errors.Is(err, ErrMessageNotFound) {
		t.Errorf("a missing message at the right URL: %v, want ErrMessageNotFound", err)
	}
	if _, err := a.Checkout(ctx, "task-nope", CheckoutRequest{}); !errors.Is(err, ErrTaskNotFound) {
		t.Errorf("a missing task at the right URL: %v, want ErrTaskNotFound", err)
	}
}

// An id that is "." or ".." would be resolved away by the URL and reach
// another route (its 404 read as "no such path"); it is refused as any
// other malformed id is, 400 invalid_id, without a request.
func TestDotIDsAreRefusedWithoutARequest(t *testing.T) {
	t.Parallel()
	var requests atomic.Int64
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		http.NotFound(w, r)
	}))
	defer s.Close()
	c := New(s.URL, "ck_key-of-sixteen-chars")
	ctx := context.Background()
	for _, id := range []string{".", ".."} {
		for name, call := range map[string]func() error{
			"checkout": func() error { _, err := c.Checkout(ctx, id, CheckoutRequest{}); return err },
			"get":      func() error { _, err := c.GetTask(ctx, id); return err },
			"events":   func() error { _, err := c.Events(ctx, id); return err },
			"release":  func() error { _, err := c.Release(ctx, id, ReleaseRequest{}); return err },
		} {
			err := call()
			var ae *APIError
			if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Code != errcode.InvalidID || !strings.Contains(ae.Message, `"`+id+`"`) {
				t.Errorf("%s of %q: %v, want 400 invalid_id naming it", name, id, err)
			}
		}
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("%d requests sent for dot ids", n)
	}
}
