package httpapi

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
)

// A request whose client went away before its answer (a waiting claim
// cancelled) is no server fault: it is logged as 499 at info, not as a 500
// at error level, which would trip alerting on nothing.
func TestARequestItsClientClosedIsNotA500(t *testing.T) {
	t.Parallel()
	hs := newHarness(t)
	hs.svc.err = fmt.Errorf("claim: %w", context.Canceled)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequest("POST", "/api/claim", strings.NewReader(`{"wait":"5s"}`)).WithContext(ctx)
	req.Header.Set("Authorization", "Bearer ck_agent")
	rec := httptest.NewRecorder()
	hs.h.ServeHTTP(rec, req)
	if rec.Code != statusClientGone {
		t.Errorf("status %d, want %d", rec.Code, statusClientGone)
	}
	log := hs.logs.String()
	if strings.Contains(log, `"level":"ERROR"`) || !strings.Contains(log, `"status":499`) {
		t.Errorf("log %s: want the request at info, status 499", log)
	}
}
