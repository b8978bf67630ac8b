package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// An empty id is refused before anything is sent, as invalid_id, as the
// server refuses any other id it cannot take.
func TestEmptyIDIsInvalid(t *testing.T) {
	t.Parallel()
	var sent atomic.Int32
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		sent.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(404)
		io.WriteString(w, `{"error":"no such path","code":"not_found"}`)
	}))
	defer s.Close()
	c := New(s.URL, "ck_x")
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"GetTask":       func() error { _, err := c.GetTask(ctx, ""); return err },
		"Checkout":      func() error { _, err := c.Checkout(ctx, "", CheckoutRequest{}); return err },
		"Renew":         func() error { _, err := c.Renew(ctx, "", RenewRequest{}); return err },
		"Release":       func() error { _, err := c.Release(ctx, "", ReleaseRequest{}); return err },
		"Fail":          func() error { _, err := c.Fail(ctx, "", "x", ReleaseRequest{}); return err },
		"Complete":      func() error { _, err := c.Complete(ctx, "", CompleteRequest{}); return err },
		"Status":        func() error { _, err := c.Status(ctx, ""); return err },
		"Watch":         func() error { return c.Watch(ctx, "") },
		"UpdateTask":    func() error { _, err := c.UpdateTask(ctx, "", UpdateTaskRequest{}); return err },
		"CancelTask":    func() error { _, err := c.CancelTask(ctx, ""); return err },
		"TrailPage":     func() error { _, err := c.TrailPage(ctx, "", TrailRequest{}); return err },
		"Events":        func() error { _, err := c.Events(ctx, ""); return err },
		"DeleteMessage": func() error { return c.DeleteMessage(ctx, "") },
		"RemoveAgent":   func() error { return c.RemoveAgent(ctx, "") },
		"WorkOn": func() error {
			return c.WorkOn(ctx, "", func(context.Context, *Lease) error { return nil }, NoHeartbeats())
		},
	} {
		err := call()
		var ae *APIError
		if !errors.Is(err, ErrInvalid) || errors.Is(err, ErrNotFound) || !errors.As(err, &ae) || ae.Code != "invalid_id" || !strings.Contains(err.Error(), `""`) {
			t.Errorf("%s: %v, want invalid_id", name, err)
		}
	}
	if n := sent.Load(); n != 0 {
		t.Fatalf("sent %d requests", n)
	}
}
