package httpapi

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// The work graph's fields of create, batch, PATCH and release reach the
// store as given; absent and null fields are nil, except not_before on
// PATCH, where null clears the time.
func TestWorkGraphFieldsReachTheService(t *testing.T) {
	t.Parallel()
	nb := time.Date(2026, 3, 21, 9, 0, 0, 0, time.UTC)

	t.Run("create", func(t *testing.T) {
		hs := newHarness(t)
		hs.do("POST", "/api/tasks", "ck_agent", `{"task_id":"t2","blocked_by":["t0","t1"],"max_attempts":7,"retry_delay":"90s","not_before":"2026-03-21T10:00:00+01:00"}`).expect(t, 201, "")
		p := hs.svc.last.(lease.CreateTaskParams)
		if fmt.Sprint(p.BlockedBy) != "[t0 t1]" || p.MaxAttempts == nil || *p.MaxAttempts != 7 ||
			p.RetryDelay == nil || *p.RetryDelay != 90*time.Second || p.NotBefore == nil || !p.NotBefore.Equal(nb) || p.NotBefore.Location() != time.UTC {
			t.Fatalf("create params %+v", p)
		}
		hs.do("POST", "/api/tasks", "ck_agent", `{"blocked_by":null,"max_attempts":null,"retry_delay":null,"not_before":null}`).expect(t, 201, "")
		p = hs.svc.last.(lease.CreateTaskParams)
		if p.BlockedBy != nil || p.MaxAttempts != nil || p.RetryDelay != nil || p.NotBefore != nil {
			t.Fatalf("nulls are absent fields: %+v", p)
		}
		hs.do("POST", "/api/tasks", "ck_agent", `{"retry_delay":"0s","max_attempts":1,"blocked_by":[]}`).expect(t, 201, "")
		p = hs.svc.last.(lease.CreateTaskParams)
		if *p.RetryDelay != 0 || *p.MaxAttempts != 1 || len(p.BlockedBy) != 0 {
			t.Fatalf("bounds: %+v", p)
		}
	})

	t.Run("batch", func(t *testing.T) {
		hs := newHarness(t)
		hs.do("POST", "/api/tasks/batch", "ck_agent", `{"tasks":[{"task_id":"a"},{"task_id":"b","blocked_by":["a"],"max_attempts":100,"retry_delay":"1h","not_before":"2026-03-21T09:00:00Z"}]}`).expect(t, 200, "")
		ps := hs.svc.last.([]lease.CreateTaskParams)
		if ps[0].BlockedBy != nil || ps[0].MaxAttempts != nil {
			t.Fatalf("first task: %+v", ps[0])
		}
		if b := ps[1]; fmt.Sprint(b.BlockedBy) != "[a]" || *b.MaxAttempts != 100 || *b.RetryDelay != time.Hour || !b.NotBefore.Equal(nb) {
			t.Fatalf("second task: %+v", b)
		}
	})

	t.Run("patch", func(t *testing.T) {
		hs := newHarness(t)
		hs.do("PATCH", "/api/tasks/t1", "ck_agent", `{"title":"x"}`).expect(t, 200, "")
		u := hs.svc.last.(lease.UpdateTaskParams)
		if u.BlockedBy != nil || u.MaxAttempts != nil || u.RetryDelay != nil || u.SetNotBefore || u.NotBefore != nil {
			t.Fatalf("absent fields change nothing: %+v", u)
		}
		hs.do("PATCH", "/api/tasks/t1", "ck_agent", `{"blocked_by":[],"not_before":null}`).expect(t, 200, "")
		u = hs.svc.last.(lease.UpdateTaskParams)
		if u.BlockedBy == nil || len(*u.BlockedBy) != 0 || !u.SetNotBefore || u.NotBefore != nil {
			t.Fatalf("[] clears the blockers, null clears not_before: %+v", u)
		}
		hs.do("PATCH", "/api/tasks/t1", "ck_agent", `{"blocked_by":["t0"],"max_attempts":2,"retry_delay":"2m","not_before":"2026-03-21T09:00:00.000Z"}`).expect(t, 200, "")
		u = hs.svc.last.(lease.UpdateTaskParams)
		if u.BlockedBy == nil || fmt.Sprint(*u.BlockedBy) != "[t0]" || *u.MaxAttempts != 2 || *u.RetryDelay != 2*time.Minute || !u.SetNotBefore || !u.NotBefore.Equal(nb) {
			t.Fatalf("patch params %+v", u)
		}
		hs.do("PATCH", "/api/tasks/t1", "ck_agent", `{"blocked_by":null}`).expect(t, 200, "")
		if u = hs.svc.last.(lease.UpdateTaskParams); u.BlockedBy != nil {
			t.Fatalf("null blocked_by leaves the blockers: %+v", u)
		}
	})

	t.Run("release", func(t *testing.T) {
		hs := newHarness(t)
		hs.do("POST", "/api/tasks/task-1/release", "ck_agent", `{}`).expect(t, 200, "")
		if r := hs.svc.last.(lease.ReleaseParams); r.Outcome != lease.OutcomeNone || r.Error != "" {
			t.Fatalf("plain release: %+v", r)
		}
		hs.do("POST", "/api/tasks/task-1/release", "ck_agent", `{"outcome":"done"}`).expect(t, 200, "")
		if r := hs.svc.last.(lease.ReleaseParams); r.Outcome != lease.OutcomeDone {
			t.Fatalf("outcome done: %+v", r)
		}
		msg := strings.Repeat("é", lease.MaxErrorLen/2)
		hs.do("POST", "/api/tasks/task-1/release", "ck_agent", `{"outcome":"failed","error":"`+msg+`","fence":3}`).expect(t, 200, "")
		if r := hs.svc.last.(lease.ReleaseParams); r.Outcome != lease.OutcomeFailed || r.Error != msg || r.Fence != 3 {
			t.Fatalf("outcome failed: %+v", r)
		}
		hs.do("POST", "/api/tasks/task-1/release", "ck_agent", `{"outcome":null,"error":null}`).expect(t, 200, "")
		if r := hs.svc.last.(lease.ReleaseParams); r.Outcome != lease.OutcomeNone || r.Error != "" {
			t.Fatalf("nulls: %+v", r)
		}
	})

	t.Run("list by the new statuses", func(t *testing.T) {
		hs := newHarness(t)
		for _, st := range []lease.Status{lease.StatusBlocked, lease.StatusFailed} {
			hs.do("GET", "/api/tasks?status="+string(st), "ck_agent", "").expect(t, 200, "")
			if p := hs.svc.last.(lease.ListTasksParams); p.Status != st {
				t.Fatalf("list params %+v", p)
			}
		}
	})
}

// Bad values of the work graph's fields are refused with a clear 4xx
// before the store is called.
func TestWorkGraphBadInput(t *testing.T) {
	t.Parallel()
	ids := make([]string, lease.MaxBlockers+1)
	for i := range ids {
		ids[i] = fmt.Sprintf(`"t%d"`, i)
	}
	tooMany := "[" + strings.Join(ids, ",") + "]"
	twenty := "[" + strings.Join(ids[:lease.MaxBlockers], ",") + "]"
	// 21 entries naming 20 tasks: the bound counts tasks, as the store
	// does once it has merged the repeat.
	twentyOnceTwice := "[" + strings.Join(append(ids[:lease.MaxBlockers:lease.MaxBlockers], ids[0]), ",") + "]"
	longErr := strings.Repeat("e", lease.MaxErrorLen+1)
	cases := []struct {
		name, method, path, body string
		status                   int
		code, says               string // says: a substring of the sentence
	}{
		{"blocked_by a string", "POST", "/api/tasks", `{"blocked_by":"t0"}`, 400, "invalid_json", "blocked_by"},
		{"blocked_by numbers", "POST", "/api/tasks", `{"blocked_by":[1]}`, 400, "invalid_json", ""},
		{"blocked_by objects", "POST", "/api/tasks", `{"blocked_by":[{"task_id":"t0"}]}`, 400, "invalid_json", ""},
		{"blocked_by bad id", "POST", "/api/tasks", `{"blocked_by":["a b"]}`, 400, "invalid_id", "blocked_by"},
		{"blocked_by empty id", "POST", "/api/tasks", `{"blocked_by":[""]}`, 400, "invalid_id", "blocked_by"},
		{"blocked_by too many", "POST", "/api/tasks", `{"blocked_by":` + tooMany + `}`, 400, "invalid_dependency", "at most 20"},
		{"blocked_by itself", "POST", "/api/tasks", `{"task_id":"t3","blocked_by":["t1","t3"]}`, 400, "invalid_dependency", "itself"},
		{"max_attempts zero", "POST", "/api/tasks", `{"max_attempts":0}`, 400, "invalid_request", "max_attempts must be an integer from 1 to 100"},
		{"max_attempts big", "POST", "/api/tasks", `{"max_attempts":101}`, 400, "invalid_request", "max_attempts"},
		{"max_attempts negative", "POST", "/api/tasks", `{"max_attempts":-1}`, 400, "invalid_request", "max_attempts"},
		{"max_attempts string", "POST", "/api/tasks", `{"max_attempts":"5"}`, 400, "invalid_json", "max_attempts must be an integer"},
		{"max_attempts float", "POST", "/api/tasks", `{"max_attempts":1.5}`, 400, "invalid_json", "max_attempts"},
		{"retry_delay unparsable", "POST", "/api/tasks", `{"retry_delay":"soon"}`, 400, "invalid_timeout", "retry_delay must be a duration"},
		{"retry_delay empty", "POST", "/api/tasks", `{"retry_delay":""}`, 400, "invalid_timeout", "retry_delay"},
		{"retry_delay negative", "POST", "/api/tasks", `{"retry_delay":"-1s"}`, 400, "invalid_timeout", "from 0s to 1h"},
		{"retry_delay too long", "POST", "/api/tasks", `{"retry_delay":"1h0m1s"}`, 400, "invalid_timeout", "retry_delay"},
		{"retry_delay number", "POST", "/api/tasks", `{"retry_delay":10}`, 400, "invalid_json", "retry_delay must be a string"},
		{"not_before not a time", "POST", "/api/tasks", `{"not_before":"tomorrow"}`, 400, "invalid_request", "not_before must be an RFC 3339 time"},
		{"not_before a date", "POST", "/api/tasks", `{"not_before":"2026-03-21"}`, 400, "invalid_request", "not_before"},
		{"not_before no zone", "POST", "/api/tasks", `{"not_before":"2026-03-21T09:00:00"}`, 400, "invalid_request", "not_before"},
		{"not_before a number", "POST", "/api/tasks", `{"not_before":1774083600}`, 400, "invalid_json", "not_before must be a string"},
		{"not_before an object", "POST", "/api/tasks", `{"not_before":{"at":"x"}}`, 400, "invalid_json", "not_before"},
		{"not_before unknown field first", "POST", "/api/tasks", `{"not_before":"2026-03-21T09:00:00Z","notBefore":null}`, 400, "invalid_json", "unknown field"},

		{"batch names the task", "POST", "/api/tasks/batch", `{"tasks":[{"task_id":"a"},{"task_id":"b","max_attempts":0}]}`, 400, "invalid_request", "tasks[1]: max_attempts"},
		{"batch retry_delay", "POST", "/api/tasks/batch", `{"tasks":[{"retry_delay":"2h"}]}`, 400, "invalid_timeout", "tasks[0]: retry_delay"},
		{"batch itself", "POST", "/api/tasks/batch", `{"tasks":[{"task_id":"b","blocked_by":["b"]}]}`, 400, "invalid_dependency", "tasks[0]"},
		{"batch not_before", "POST", "/api/tasks/batch", `{"tasks":[{"not_before":"later"}]}`, 400, "invalid_request", "tasks[0]: not_before"},
		{"batch wrong type", "POST", "/api/tasks/batch", `{"tasks":[{"blocked_by":"a"}]}`, 400, "invalid_json", "blocked_by"},

		{"patch blocked_by itself", "PATCH", "/api/tasks/t1", `{"blocked_by":["t1"]}`, 400, "invalid_dependency", "itself (t1)"},
		{"patch blocked_by too many", "PATCH", "/api/tasks/t1", `{"blocked_by":` + tooMany + `}`, 400, "invalid_dependency", ""},
		{"patch blocked_by bad id", "PATCH", "/api/tasks/t1", `{"blocked_by":["-x"]}`, 400, "invalid_id", ""},
		{"patch max_attempts", "PATCH", "/api/tasks/t1", `{"max_attempts":1000}`, 400, "invalid_request", "max_attempts"},
		{"patch retry_delay", "PATCH", "/api/tasks/t1", `{"retry_delay":"5 minutes"}`, 400, "invalid_timeout", "retry_delay"},
		{"patch not_before", "PATCH", "/api/tasks/t1", `{"not_before":"2026-13-01T00:00:00Z"}`, 400, "invalid_request", "not_before"},
		{"patch not_before bool", "PATCH", "/api/tasks/t1", `{"not_before":false}`, 400, "invalid_json", "not_before"},

		{"outcome unknown", "POST", "/api/tasks/task-1/release", `{"outcome":"maybe"}`, 400, "invalid_request", "outcome must be done or failed"},
		{"outcome empty", "POST", "/api/tasks/task-1/release", `{"outcome":""}`, 400, "invalid_request", "outcome"},
		{"outcome case", "POST", "/api/tasks/task-1/release", `{"outcome":"FAILED"}`, 400, "invalid_request", "outcome"},
		{"outcome number", "POST", "/api/tasks/task-1/release", `{"outcome":1}`, 400, "invalid_json", "outcome must be a string"},
		{"error without outcome", "POST", "/api/tasks/task-1/release", `{"error":"boom"}`, 400, "invalid_request", "only with outcome failed"},
		{"error with outcome done", "POST", "/api/tasks/task-1/release", `{"outcome":"done","error":"boom"}`, 400, "invalid_request", "only with outcome failed"},
		{"error too long", "POST", "/api/tasks/task-1/release", `{"outcome":"failed","error":"` + longErr + `"}`, 400, "invalid_request", "at most 2048 bytes"},
		{"error not text", "POST", "/api/tasks/task-1/release", `{"outcome":"failed","error":["boom"]}`, 400, "invalid_json", "error"},
		{"force still admin only", "POST", "/api/tasks/task-1/release", `{"force":true,"outcome":"failed"}`, 403, "forbidden", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			hs := newHarness(t)
			res := hs.do(c.method, c.path, "ck_agent", c.body).expect(t, c.status, c.code)
			if msg, _ := res.json["error"].(string); !strings.Contains(msg, c.says) {
				t.Errorf("error %q does not say %q", msg, c.says)
			}
			if len(hs.svc.calls) != 0 {
				t.Fatalf("store called on bad input: %v", hs.svc.calls)
			}
		})
	}
	// The bounds themselves are good.
	for _, body := range []string{`{"blocked_by":` + twenty + `}`, `{"blocked_by":` + twentyOnceTwice + `}`, `{"max_attempts":1}`, `{"max_attempts":100}`, `{"retry_delay":"0s"}`, `{"retry_delay":"60m"}`, `{"not_before":"2000-01-01T00:00:00Z"}`} {
		newHarness(t).do("POST", "/api/tasks", "ck_agent", body).expect(t, 201, "")
	}
	newHarness(t).do("POST", "/api/tasks/task-1/release", "ck_agent", `{"outcome":"failed","error":"`+longErr[1:]+`"}`).expect(t, 200, "")
}

// A task shows the work graph's fields always: [] for no blockers, null
// for no not_before or last_error; a lease shows its attempt; a release
// event carries outcome and error (null when the release gave none), and
// no other event does.
func TestWorkGraphJSONShapes(t *testing.T) {
	t.Parallel()
	t.Run("a task without a graph", func(t *testing.T) {
		hs := newHarness(t)
		hs.svc.task = func(id string) lease.Task {
			return lease.Task{TaskID: id, Queue: "default", Priority: 5, Version: 1, Status: lease.StatusTodo, CreatedAt: t0, MaxAttempts: 5, RetryDelay: 10 * time.Second}
		}
		res := hs.do("GET", "/api/tasks/t1", "ck_agent", "").expect(t, 200, "")
		want := `"checkout":null,"blocked_by":[],"blocks":[],"max_attempts":5,"attempts":0,"retry_delay_seconds":10,"not_before":null,"last_error":null}`
		if !strings.HasSuffix(strings.TrimSpace(string(res.body)), want) {
			t.Fatalf("body %s\nwant it to end with %s", res.body, want)
		}
		// The sample task of the other tests has no max_attempts at all,
		// as a task written before the work graph: the default shows.
		res = hs.do("POST", "/api/tasks", "ck_agent", `{"task_id":"t2"}`).expect(t, 201, "")
		if res.json["max_attempts"] != float64(lease.DefaultMaxAttempts) || res.json["retry_delay_seconds"] != 0.0 {
			t.Fatalf("defaults: %s", res.body)
		}
	})

	t.Run("a task in the graph", func(t *testing.T) {
		hs := newHarness(t)
		nb := t0.Add(90 * time.Second)
		hs.svc.task = func(id string) lease.Task {
			c := sampleCheckout(id, "agent-1")
			c.Attempt = 3
			started := t0
			return lease.Task{
				TaskID: id, Queue: "default", Priority: 5, Version: 9, Status: lease.StatusInProgress, CreatedAt: t0, StartedAt: &started, Checkout: &c,
				BlockedBy:   []lease.Blocker{{TaskID: "a", Status: lease.StatusDone}, {TaskID: "b", Status: lease.StatusDone}},
				Blocks:      []string{"c", "d"},
				Attempts:    3,
				MaxAttempts: 4,
				RetryDelay:  90*time.Second + 900*time.Millisecond,
				NotBefore:   &nb,
				LastError:   "exit status 1",
			}
		}
		res := hs.do("GET", "/api/tasks/t1", "ck_agent", "").expect(t, 200, "")
		for _, want := range []string{
			`"reason":"","attempt":3},`,
			`"blocked_by":[{"task_id":"a","status":"done"},{"task_id":"b","status":"done"}],"blocks":["c","d"]`,
			`"max_attempts":4,"attempts":3,"retry_delay_seconds":90,"not_before":"2026-03-20T14:36:30.123Z","last_error":"exit status 1"}`,
		} {
			if !strings.Contains(string(res.body), want) {
				t.Errorf("body %s\nwant it to contain %s", res.body, want)
			}
		}
	})

	t.Run("every lease shows its attempt", func(t *testing.T) {
		hs := newHarness(t)
		hs.svc.checkout = func(p lease.CheckoutParams) (lease.Checkout, error) {
			c := sampleCheckout(p.TaskID, p.AgentID)
			c.Attempt = 2
			return c, nil
		}
		res := hs.do("POST", "/api/tasks/task-1/checkout", "ck_agent", "").expect(t, 200, "")
		if res.json["attempt"] != 2.0 {
			t.Errorf("checkout: %s", res.body)
		}
		for _, r := range []struct{ method, path, want string }{
			{"POST", "/api/claim", `"attempt":0,"title":`},
			{"POST", "/api/tasks/task-1/renew", `"attempt":0}`},
			{"GET", "/api/checkouts", `"attempt":0}`},
			{"GET", "/api/tasks/task-1/checkout", `"attempt":0}`},
		} {
			res := hs.do(r.method, r.path, "ck_agent", "").expect(t, 200, "")
			if !strings.Contains(string(res.body), r.want) {
				t.Errorf("%s %s: %s\nwant it to contain %s", r.method, r.path, res.body, r.want)
			}
		}
		holder := sampleCheckout("task-1", "agent-2")
		holder.Attempt = 4
		hs.svc.checkout = nil
		hs.svc.err = &lease.ConflictError{Holder: holder}
		res = hs.do("POST", "/api/tasks/task-1/checkout", "ck_agent", "").expect(t, 409, "checked_out")
		if h := res.json["holder"].(map[string]any); h["attempt"] != 4.0 {
			t.Errorf("checked_out holder: %s", res.body)
		}
		hs.svc.err = &lease.NotHolderError{Holder: holder}
		res = hs.do("POST", "/api/tasks/task-1/renew", "ck_agent", "").expect(t, 403, "not_holder")
		if h := res.json["holder"].(map[string]any); h["attempt"] != 4.0 {
			t.Errorf("not_holder holder: %s", res.body)
		}
	})

	t.Run("events", func(t *testing.T) {
		hs := newHarness(t)
		held := 40 * time.Second
		hs.svc.trail = []lease.Event{
			{Type: lease.EventCheckout, TaskID: "t1", AgentID: "agent-1", RunID: "r1", Fence: 1, At: t0, By: "agent-1"},
			{Type: lease.EventRelease, TaskID: "t1", AgentID: "agent-1", RunID: "r1", Fence: 1, At: t0.Add(held), Held: &held, By: "agent-1", Outcome: lease.OutcomeFailed, Error: "exit status 1"},
			{Type: lease.EventCheckout, TaskID: "t1", AgentID: "agent-1", RunID: "r2", Fence: 2, At: t0.Add(time.Minute), By: "agent-1"},
			{Type: lease.EventRelease, TaskID: "t1", AgentID: "agent-1", RunID: "r2", Fence: 2, At: t0.Add(2 * time.Minute), Held: &held, By: "agent-1", Outcome: lease.OutcomeDone},
			{Type: lease.EventTimeout, TaskID: "t1", AgentID: "agent-1", RunID: "r3", Fence: 3, At: t0.Add(3 * time.Minute), Held: &held, By: lease.BySystem},
			{Type: lease.EventFailed, TaskID: "t1", AgentID: "agent-1", RunID: "r3", Fence: 3, At: t0.Add(3 * time.Minute), By: lease.BySystem, Reason: "timeout"},
			{Type: lease.EventUnblocked, TaskID: "t1", At: t0.Add(4 * time.Minute), By: lease.BySystem},
		}
		res := hs.do("GET", "/api/tasks/t1/events", "ck_agent", "").expect(t, 200, "")
		evs := res.json["events"].([]any)
		ev := func(i int) map[string]any { return evs[i].(map[string]any) }
		if e := ev(1); e["outcome"] != "failed" || e["error"] != "exit status 1" {
			t.Errorf("failed release: %v", e)
		}
		if e := ev(3); e["outcome"] != "done" {
			t.Errorf("done release: %v", e)
		} else if errText, ok := e["error"]; !ok || errText != nil {
			t.Errorf("done release: error %v (present %v), want null", errText, ok)
		}
		for _, i := range []int{0, 2, 4, 5, 6} {
			for _, k := range []string{"outcome", "error"} {
				if _, ok := ev(i)[k]; ok {
					t.Errorf("event %d (%v) carries %s", i, ev(i)["type"], k)
				}
			}
		}
		if e := ev(5); e["type"] != "failed" || e["reason"] != "timeout" {
			t.Errorf("failed event: %v", e)
		}
		if e := ev(6); e["type"] != "unblocked" || e["by"] != "system" {
			t.Errorf("unblocked event: %v", e)
		}
	})
}

// A checkout of a blocked task is 409 blocked with the blockers that are
// not done; one before its not_before is 409 not_ready with the time.
// Neither has a Retry-After: only a conflict with a holder knows when.
func TestBlockedAndNotReadyAnswers(t *testing.T) {
	t.Parallel()
	hs := newHarness(t)
	hs.svc.err = fmt.Errorf("checkout: %w", &lease.BlockedError{TaskID: "task-1", BlockedBy: []lease.Blocker{
		{TaskID: "build", Status: lease.StatusInProgress}, {TaskID: "lint", Status: lease.StatusFailed},
	}})
	res := hs.do("POST", "/api/tasks/task-1/checkout", "ck_agent", "").expect(t, 409, "blocked")
	want := `{"error":"task task-1 is blocked by build (in_progress), lint (failed)","code":"blocked","blocked_by":[{"task_id":"build","status":"in_progress"},{"task_id":"lint","status":"failed"}]}`
	if strings.TrimSpace(string(res.body)) != want {
		t.Errorf("blocked:\n got %s\nwant %s", res.body, want)
	}
	if h := res.header.Get("Retry-After"); h != "" {
		t.Errorf("Retry-After %q on blocked", h)
	}

	// Many blockers: the sentence names a few, the list has them all.
	var many []lease.Blocker
	for i := range 5 {
		many = append(many, lease.Blocker{TaskID: fmt.Sprintf("b%d", i), Status: lease.StatusTodo})
	}
	hs.svc.err = &lease.BlockedError{TaskID: "task-1", BlockedBy: many}
	res = hs.do("POST", "/api/tasks/task-1/checkout", "ck_agent", "").expect(t, 409, "blocked")
	if msg := res.json["error"].(string); !strings.HasSuffix(msg, "b2 (todo), and 2 more") || len(res.json["blocked_by"].([]any)) != 5 {
		t.Errorf("many blockers: %s", res.body)
	}
	// Blocked by none: its blockers are all done, and the task is about
	// to be unblocked (the change stream's delay); the sentence says so
	// rather than naming no blocker.
	hs.svc.err = &lease.BlockedError{TaskID: "task-1"}
	res = hs.do("POST", "/api/tasks/task-1/checkout", "ck_agent", "").expect(t, 409, "blocked")
	if msg := res.json["error"].(string); !strings.Contains(msg, "blockers are all done") || len(res.json["blocked_by"].([]any)) != 0 {
		t.Errorf("blocked by none: %s", res.body)
	}
	// ... and says when to come back: in a second.
	if h := res.header.Get("Retry-After"); h != "1" {
		t.Errorf("Retry-After %q on blocked by none, want 1", h)
	}
	// A bare ErrBlocked still answers with a list.
	hs.svc.err = lease.ErrBlocked
	res = hs.do("POST", "/api/tasks/task-1/checkout", "ck_agent", "").expect(t, 409, "blocked")
	if !strings.Contains(string(res.body), `"blocked_by":[]`) {
		t.Errorf("bare ErrBlocked: %s", res.body)
	}

	nb := time.Date(2026, 3, 20, 15, 0, 5, 987654321, time.FixedZone("CET", 3600))
	hs.svc.err = &lease.NotReadyError{TaskID: "task-1", NotBefore: nb}
	res = hs.do("POST", "/api/tasks/task-1/checkout", "ck_agent", "").expect(t, 409, "not_ready")
	want = `{"error":"task task-1 may not be checked out before 2026-03-20T14:00:05.987Z","code":"not_ready","not_before":"2026-03-20T14:00:05.987Z"}`
	if strings.TrimSpace(string(res.body)) != want {
		t.Errorf("not_ready:\n got %s\nwant %s", res.body, want)
	}
	// Retry-After says when to come back: at once (1 s) for a not_before
	// the server's clock has passed, else the seconds to it, rounded up.
	if h := res.header.Get("Retry-After"); h != "1" {
		t.Errorf("Retry-After %q on not_ready of a passed not_before, want 1", h)
	}
	hs.svc.err = &lease.NotReadyError{TaskID: "task-1", NotBefore: t0.Add(10*time.Minute + 42800*time.Millisecond)}
	res = hs.do("POST", "/api/tasks/task-1/checkout", "ck_agent", "").expect(t, 409, "not_ready")
	if h := res.header.Get("Retry-After"); h != "43" {
		t.Errorf("Retry-After %q on not_ready 42.3 s ahead, want 43", h)
	}
}

// The store's refusals of a dependency come through as 400s with their
// own codes on create, batch and PATCH, and a blocked_by on a task of
// another status as 409 invalid_transition.
func TestDependencyErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, method, path, body string
		err                      error
		status                   int
		code                     string
	}{
		{"create unknown blocker", "POST", "/api/tasks", `{"blocked_by":["ghost"]}`,
			&lease.ValidationError{Field: "blocked_by", Code: lease.CodeInvalidDependency, Message: "blocked_by names ghost, which does not exist"}, 400, "invalid_dependency"},
		{"batch cycle", "POST", "/api/tasks/batch", `{"tasks":[{"task_id":"a","blocked_by":["b"]}]}`,
			&lease.ValidationError{Field: "tasks[0].blocked_by", Code: lease.CodeDependencyCycle, Message: "tasks[0]: blocked_by would close a cycle: a, b, a"}, 400, "dependency_cycle"},
		{"patch cycle", "PATCH", "/api/tasks/a", `{"blocked_by":["b"]}`,
			fmt.Errorf("update: %w", &lease.ValidationError{Field: "blocked_by", Code: lease.CodeDependencyCycle, Message: "blocked_by would close a cycle: a, b, a"}), 400, "dependency_cycle"},
		{"patch unknown blocker", "PATCH", "/api/tasks/a", `{"blocked_by":["ghost"]}`,
			&lease.ValidationError{Field: "blocked_by", Code: lease.CodeInvalidDependency, Message: "blocked_by names ghost, which does not exist"}, 400, "invalid_dependency"},
		{"patch blockers of a task in progress", "PATCH", "/api/tasks/a", `{"blocked_by":["b"]}`,
			&lease.TransitionError{TaskID: "a", From: lease.StatusInProgress, To: lease.StatusBlocked}, 409, "invalid_transition"},
		{"reopen a failed task refused", "PATCH", "/api/tasks/a", `{"status":"cancelled"}`,
			&lease.TransitionError{TaskID: "a", From: lease.StatusFailed, To: lease.StatusCancelled}, 409, "invalid_transition"},
		{"checkout of a failed task", "POST", "/api/tasks/a/checkout", ``,
			&lease.StatusMismatchError{TaskID: "a", Status: lease.StatusFailed}, 409, "status_mismatch"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			hs := newHarness(t)
			hs.svc.err = c.err
			res := hs.do(c.method, c.path, "ck_agent", c.body).expect(t, c.status, c.code)
			var ve *lease.ValidationError
			if errors.As(c.err, &ve) && res.json["error"] != ve.Message {
				t.Errorf("sentence %q, want the store's %q", res.json["error"], ve.Message)
			}
		})
	}
}

// A PATCH that clears not_before is a compare-and-set like any other when
// it carries If-Match.
func TestNotBeforeOnPatchWithIfMatch(t *testing.T) {
	t.Parallel()
	hs := newHarness(t)
	req := httptest.NewRequest("PATCH", "/api/tasks/t1", strings.NewReader(`{"not_before":null,"max_attempts":3}`))
	req.Header.Set("Authorization", "Bearer ck_agent")
	req.Header.Set("If-Match", `"4"`)
	hs.send(req).expect(t, 200, "")
	u := hs.svc.last.(lease.UpdateTaskParams)
	if u.IfVersion != 4 || !u.SetNotBefore || u.NotBefore != nil || *u.MaxAttempts != 3 {
		t.Fatalf("patch params %+v", u)
	}
}

// A value of the wrong type is named by its place in the request as the
// API spells it: never by the server's own names for the parts of a body.
func TestTypeErrorsNameTheJSONField(t *testing.T) {
	t.Parallel()
	cases := []struct{ method, path, body, want string }{
		{"POST", "/api/tasks", `{"blocked_by":"t1"}`, "field blocked_by must be an array of strings"},
		{"POST", "/api/tasks", `{"max_attempts":"x"}`, "field max_attempts must be an integer"},
		{"POST", "/api/tasks", `{"retry_delay":10}`, "field retry_delay must be a string"},
		{"PATCH", "/api/tasks/task-1", `{"not_before":5}`, "field not_before must be a string"},
		{"POST", "/api/tasks/batch", `{"tasks":[{"max_attempts":"x"}]}`, "field tasks[0].max_attempts must be an integer"},
		{"POST", "/api/tasks/batch", `{"tasks":[{"task_id":"a"}, {"priority":"x"}]}`, "field tasks[1].priority must be an integer"},
		{"POST", "/api/tasks/batch", `{"tasks":[{},{"title":"[{\"x\":1}]"},{"blocked_by":"a"}]}`, "field tasks[2].blocked_by must be an array of strings"},
		{"POST", "/api/tasks/batch", `{"tasks":[{"priority":5.0},{"max_attempts":2e0},{"title":7}]}`, "field tasks[2].title must be a string"},
		{"POST", "/api/tasks/batch", `{"tasks":[{"blocked_by":["a",5]}]}`, "field tasks[0].blocked_by[1] must be a string"},
		{"POST", "/api/tasks/batch", `{"tasks":[{"task_id":"a"},{"task_id":"b","not_before":5}]}`, "field tasks[1].not_before must be a string"},
		{"POST", "/api/tasks/batch", `{"tasks":[{"priority":5.0},{"not_before":5}]}`, "field tasks[1].not_before must be a string"},
		{"POST", "/api/tasks/batch", `{"tasks":[{"title":1},{"not_before":5}]}`, "field tasks[1].not_before must be a string"},
		{"POST", "/api/tasks/batch", `{"tasks":[{"title":"a"},{"title":{"a":[1]}}]}`, "field tasks[1].title must be a string"},
		{"POST", "/api/tasks/batch", `{"tasks":[{"task_id":"a"},7]}`, "field tasks[1] must be an object"},
		{"POST", "/api/tasks/batch", `{"tasks":[{"task_id":"a"},"x"]}`, "field tasks[1] must be an object"},
		{"POST", "/api/tasks/batch", `{"tasks":[[]]}`, "field tasks[0] must be an object"},
		{"POST", "/api/tasks/task-1/checkout", `{"timeout":30}`, "field timeout must be a string"},
		{"POST", "/api/claim", `{"run_id":7}`, "field run_id must be a string"},
		{"POST", "/api/claim", `{"queues":[5]}`, "field queues[0] must be a string"},
		{"POST", "/api/claim", `{"queues":["a",{}]}`, "field queues[1] must be a string"},
		{"POST", "/api/claim", `{"queues":"q"}`, "field queues must be an array of strings"},
		{"POST", "/api/tasks/task-1/renew", `{"fence":"1"}`, "field fence must be an integer"},
		{"POST", "/api/tasks/task-1/release", `{"run_id":1}`, "field run_id must be a string"},
	}
	for _, c := range cases {
		t.Run(c.body, func(t *testing.T) {
			t.Parallel()
			hs := newHarness(t)
			res := hs.do(c.method, c.path, "ck_agent", c.body).expect(t, 400, "invalid_json")
			if msg, _ := res.json["error"].(string); msg != c.want {
				t.Errorf("error %q, want %q", msg, c.want)
			}
		})
	}
}
