package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/checkout-dev/checkout/errcode"
	"github.com/checkout-dev/checkout/lease"
)

// What the AWS SDK returns when DynamoDB cannot be reached, as the store
// wraps it.
var unreachable = []error{
	fmt.Errorf("get task t: operation error DynamoDB: GetItem, exceeded maximum number of attempts, 3: %w",
		&smithyhttp.RequestSendError{Err: &url.Error{Op: "Post", URL: "http://127.0.0.1:8000/", Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}}),
	fmt.Errorf("checkout: %w", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}),
	fmt.Errorf("release: deserialization failed: %w", io.ErrUnexpectedEOF),
	fmt.Errorf("claim: %w", context.DeadlineExceeded),
	fmt.Errorf("renew: %w", &smithy.GenericAPIError{Code: "ThrottlingException", Message: "Rate of requests exceeds the allowed throughput."}),
	fmt.Errorf("renew: %w", &smithy.GenericAPIError{Code: "InternalServerError", Message: "Internal server error"}),
}

// An unreachable database is 503 unavailable with Retry-After on every
// route that uses it, with the contract's body and nothing of the cause;
// the cause is logged.
func TestUnreachableDatabaseIs503(t *testing.T) {
	t.Parallel()
	for i, cause := range unreachable {
		for _, rt := range Routes() {
			if rt.Path == "/healthz" || rt.Path == "/api/whoami" { // they read no table
				continue
			}
			path := strings.NewReplacer("{task_id}", "task-1", "{agent_id}", "agent-3", "{message_id}", "m-1").Replace(rt.Path)
			body := ""
			for _, c := range bodyRouteCases {
				if c.method == rt.Method && c.pattern == rt.Path {
					body = c.valid
				}
			}
			hs := newHarness(t)
			hs.svc.err = cause
			res := hs.do(rt.Method, path, "ck_admin", body).expect(t, 503, "unavailable")
			if res.header.Get("Retry-After") == "" {
				t.Errorf("%d %s %s: no Retry-After", i, rt.Method, path)
			}
			if strings.Contains(string(res.body), "127.0.0.1") || strings.Contains(string(res.body), "DynamoDB") {
				t.Errorf("%s %s: the cause leaked: %s", rt.Method, path, res.body)
			}
			if !strings.Contains(hs.logs.String(), `"status":503`) || !strings.Contains(hs.logs.String(), `"error":`) {
				t.Errorf("%s %s: the cause was not logged: %s", rt.Method, path, hs.logs)
			}
		}
	}
	// Authentication needs the database too.
	hs := newHarness(t, func(o *Options) { o.Auth = fakeAuth{err: fmt.Errorf("authenticate: %w", unreachable[0])} })
	hs.do("GET", "/api/tasks", "ck_agent", "").expect(t, 503, "unavailable")
	// Anything else is still a bug.
	for _, err := range []error{errBoom, &smithy.GenericAPIError{Code: "ValidationException"}, context.Canceled} {
		if Unavailable(err) {
			t.Errorf("%v is not unavailability", err)
		}
	}
	if !Unavailable(errors.Join(errors.New("retry quota exceeded"), unreachable[0])) {
		t.Error("the SDK's quota error hides the cause")
	}
}

// /healthz says what Options.Health says: 503 {"ok":false} with Retry-After
// while it fails, 200 {"ok":true} otherwise, and 200 without one.
func TestHealthzReportsTheDatabase(t *testing.T) {
	t.Parallel()
	var down error
	hs := newHarness(t, func(o *Options) { o.Health = func(context.Context) error { return down } })
	hs.do("GET", "/healthz", "", "").expect(t, 200, "")
	down = errors.New("dynalite exited")
	res := hs.do("GET", "/healthz", "", "").expect(t, 503, "")
	if string(res.body) != "{\"ok\":false}\n" || res.header.Get("Retry-After") == "" {
		t.Fatalf("%s %v", res.body, res.header)
	}
	down = nil
	hs.do("GET", "/healthz", "", "").expect(t, 200, "")
	newHarness(t).do("GET", "/healthz", "", "").expect(t, 200, "")
}

// Too many changes at once (lease.ErrBusy: the graph's lock held past the
// wait, or writes of one item that kept losing) is 503 unavailable, which
// the client retries after Retry-After, with a sentence that says so and
// not that the database is down; before, the lock's wait read as an
// unreachable database and the contention errors were 500s.
func TestBusyIs503WithItsOwnSentence(t *testing.T) {
	t.Parallel()
	for _, err := range []error{
		fmt.Errorf("update task t: lock the task graph: held by other changes for 20s: %w", lease.ErrBusy),
		fmt.Errorf("checkout t: %w", lease.ErrBusy),
	} {
		status, body, internal := errorResponse(err, "t", time.Now())
		if status != 503 || body.Code != errcode.Unavailable || internal {
			t.Errorf("%v: %d %s (internal %v), want 503 unavailable", err, status, body.Code, internal)
		}
		if !strings.Contains(body.Error, "too many changes") || strings.Contains(body.Error, "database") {
			t.Errorf("%v: %q, want a sentence about too many changes at once", err, body.Error)
		}
	}
}

// A named claim whose lease could not be recorded as its run's
// (lease.ErrGrantNotKept: the receipt's write kept failing) is 503
// unavailable with Retry-After, whatever the write's failure, with a
// sentence that says the lease was not kept and that a retry with the
// same run id finds it; the cause is logged, not sent. Before, it was 503
// with the unreachable database's sentence only when the failure was a
// network one, and otherwise a 500 internal, which a client does not
// retry.
func TestClaimWhoseLeaseWasNotKeptIs503(t *testing.T) {
	t.Parallel()
	for _, cause := range []error{unreachable[0], errBoom, &smithy.GenericAPIError{Code: "ValidationException", Message: "item size exceeded"}} {
		hs := newHarness(t)
		hs.svc.err = fmt.Errorf("claim run-1: task-1 was granted (fence 3) but %w: %w", lease.ErrGrantNotKept, cause)
		res := hs.do("POST", "/api/claim", "ck_agent", `{"run_id":"run-1"}`).expect(t, 503, "unavailable")
		if res.header.Get("Retry-After") == "" {
			t.Errorf("%v: no Retry-After", cause)
		}
		msg, _ := res.json["error"].(string)
		if !strings.Contains(msg, "not kept") || !strings.Contains(msg, "same run_id") || strings.Contains(msg, "database") {
			t.Errorf("%v: %q, want a sentence that says the lease was not kept and a retry with the same run_id finds it", cause, msg)
		}
		if strings.Contains(string(res.body), "10.0.0.7") || strings.Contains(string(res.body), "ValidationException") || strings.Contains(string(res.body), "127.0.0.1") {
			t.Errorf("%v: the cause leaked: %s", cause, res.body)
		}
		if !strings.Contains(hs.logs.String(), `"status":503`) || !strings.Contains(hs.logs.String(), "was granted") {
			t.Errorf("%v: the cause was not logged: %s", cause, hs.logs)
		}
	}
}

// A change of blocked_by refused by the task's status says which field
// and why: it used to say that a cancelled task "cannot become blocked",
// even for blocked_by [] which would block nothing.
func TestABlockedByTransitionNamesTheField(t *testing.T) {
	t.Parallel()
	err := &lease.TransitionError{TaskID: "d", From: lease.StatusCancelled, To: lease.StatusBlocked, Field: "blocked_by"}
	status, body, _ := errorResponse(err, "d", time.Now())
	want := "task d is cancelled: blocked_by may change only while it is todo or blocked (reopen it first)"
	if status != 409 || body.Code != errcode.InvalidTransition || body.Error != want {
		t.Errorf("%d %s %q, want 409 invalid_transition %q", status, body.Code, body.Error, want)
	}
}

// A table the database does not have (ResourceNotFoundException: the
// tables were deleted, or a DynamoDB-compatible server was restarted
// empty) is 503 unavailable with Retry-After, on every route and in
// authentication, with a sentence that says the tables are missing and
// nothing of the cause; the cause is logged. Before, it was a 500
// internal, which a client does not retry.
func TestMissingTableIs503(t *testing.T) {
	t.Parallel()
	cause := fmt.Errorf("get task t: operation error DynamoDB: GetItem, https response error StatusCode: 400, RequestID: r-1, %w",
		&types.ResourceNotFoundException{Message: aws.String("Requested resource not found: Table: checkout-tasks2 not found")})
	for _, rt := range Routes() {
		if rt.Path == "/healthz" || rt.Path == "/api/whoami" { // they read no table
			continue
		}
		path := strings.NewReplacer("{task_id}", "task-1", "{agent_id}", "agent-3", "{message_id}", "m-1").Replace(rt.Path)
		body := ""
		for _, c := range bodyRouteCases {
			if c.method == rt.Method && c.pattern == rt.Path {
				body = c.valid
			}
		}
		hs := newHarness(t)
		hs.svc.err = cause
		res := hs.do(rt.Method, path, "ck_admin", body).expect(t, 503, "unavailable")
		if res.header.Get("Retry-After") == "" {
			t.Errorf("%s %s: no Retry-After", rt.Method, path)
		}
		if msg, _ := res.json["error"].(string); !strings.Contains(msg, "tables") {
			t.Errorf("%s %s: %q, want a sentence that says the tables are missing", rt.Method, path, msg)
		}
		if strings.Contains(string(res.body), "checkout-tasks2") || strings.Contains(string(res.body), "ResourceNotFound") {
			t.Errorf("%s %s: the cause leaked: %s", rt.Method, path, res.body)
		}
		if !strings.Contains(hs.logs.String(), `"status":503`) || !strings.Contains(hs.logs.String(), "checkout-tasks2 not found") {
			t.Errorf("%s %s: the cause was not logged: %s", rt.Method, path, hs.logs)
		}
	}
	hs := newHarness(t, func(o *Options) { o.Auth = fakeAuth{err: fmt.Errorf("authenticate: %w", cause)} })
	hs.do("GET", "/api/tasks", "ck_agent", "").expect(t, 503, "unavailable")
	if !TablesMissing(cause) || TablesMissing(unreachable[0]) || TablesMissing(errBoom) {
		t.Error("TablesMissing")
	}
}
