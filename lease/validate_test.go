package lease_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// ruleFailure is what a rule's failure must be: the field, the API's code and the
// sentence the API answers with. A zero ruleFailure is no failure.
type ruleFailure struct {
	field, code, message string
}

func expectRule(t *testing.T, err error, w ruleFailure) {
	t.Helper()
	if w == (ruleFailure{}) {
		if err != nil {
			t.Fatalf("got %v, want no error", err)
		}
		return
	}
	var ve *lease.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("got %v, want a validation error", err)
	}
	if !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("%v does not match ErrInvalid", err)
	}
	if got := (ruleFailure{ve.Field, ve.Code, ve.Message}); got != w {
		t.Fatalf("got %+v, want %+v", got, w)
	}
}

const idRuleText = "must match ^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"

func TestIDRules(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, field, id string
		want            ruleFailure
	}{
		{"a plain id is valid", "task_id", "task-1", ruleFailure{}},
		{"an id may hold dots, colons and underscores after its first character", "run_id", "r.1:a_b", ruleFailure{}},
		{"an id of 128 characters is valid", "agent_id", strings.Repeat("a", 128), ruleFailure{}},
		{"an empty id is invalid", "task_id", "", ruleFailure{"task_id", "invalid_id", "task_id " + idRuleText}},
		{"an id of 129 characters is invalid", "task_id", strings.Repeat("a", 129), ruleFailure{"task_id", "invalid_id", "task_id " + idRuleText}},
		{"an id may not start with a dash", "agent_id", "-x", ruleFailure{"agent_id", "invalid_id", "agent_id " + idRuleText}},
		{"an id may not hold a slash", "agent_id", "a/b", ruleFailure{"agent_id", "invalid_id", "agent_id " + idRuleText}},
		{"an id may not hold a hash, which separates index key parts", "run_id", "a#b", ruleFailure{"run_id", "invalid_id", "run_id " + idRuleText}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			expectRule(t, lease.CheckID(tc.field, tc.id), tc.want)
		})
	}
}

func TestTextRules(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
		want ruleFailure
	}{
		{"a name is required", lease.CheckName(""), ruleFailure{"name", "invalid_request", "name is required"}},
		{"a blank name counts as none", lease.CheckName(" \t"), ruleFailure{"name", "invalid_request", "name is required"}},
		{"a name of 256 bytes is valid", lease.CheckName(strings.Repeat("n", 256)), ruleFailure{}},
		{"a name of 257 bytes is too long", lease.CheckName(strings.Repeat("n", 257)), ruleFailure{"name", "invalid_request", "name must be at most 256 bytes"}},
		{"an empty title is valid", lease.CheckTitle(""), ruleFailure{}},
		{"a title of 1025 bytes is too long", lease.CheckTitle(strings.Repeat("t", 1025)), ruleFailure{"title", "invalid_request", "title must be at most 1024 bytes"}},
		{"a reason of 1024 bytes is valid", lease.CheckReason(strings.Repeat("r", 1024)), ruleFailure{}},
		{"a reason of 1025 bytes is too long", lease.CheckReason(strings.Repeat("r", 1025)), ruleFailure{"reason", "invalid_request", "reason must be at most 1024 bytes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			expectRule(t, tc.err, tc.want)
		})
	}
}

func TestTaskFieldRules(t *testing.T) {
	t.Parallel()
	type fields struct {
		title, description, queue *string
		priority                  *int
		metadata                  string
	}
	for _, tc := range []struct {
		name string
		f    fields
		want ruleFailure
	}{
		{"no field given is valid", fields{}, ruleFailure{}},
		{"every field within its bounds is valid", fields{ptr("t"), ptr("d"), ptr("q"), ptr(9), `{"a":1}`}, ruleFailure{}},
		{"a title over its bound is invalid", fields{title: ptr(strings.Repeat("t", 1025))}, ruleFailure{"title", "invalid_request", "title must be at most 1024 bytes"}},
		{"a description of 8 KiB is valid", fields{description: ptr(strings.Repeat("d", 8<<10))}, ruleFailure{}},
		{"a description over 8 KiB is invalid", fields{description: ptr(strings.Repeat("d", 8<<10+1))}, ruleFailure{"description", "invalid_request", "description must be at most 8192 bytes"}},
		{"a queue given empty is invalid", fields{queue: ptr("")}, ruleFailure{"queue", "invalid_id", "queue must not be empty"}},
		{"a queue must be an id", fields{queue: ptr("a b")}, ruleFailure{"queue", "invalid_id", `queue "a b" must match ^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`}},
		{"priority 0 is valid", fields{priority: ptr(0)}, ruleFailure{}},
		{"a negative priority is invalid", fields{priority: ptr(-1)}, ruleFailure{"priority", "invalid_request", "priority must be an integer from 0 to 9"}},
		{"priority 10 is invalid", fields{priority: ptr(10)}, ruleFailure{"priority", "invalid_request", "priority must be an integer from 0 to 9"}},
		{"metadata must be an object", fields{metadata: `[1]`}, ruleFailure{"metadata", "invalid_request", "metadata must be a JSON object"}},
		{"metadata null is not an object", fields{metadata: `null`}, ruleFailure{"metadata", "invalid_request", "metadata must be a JSON object"}},
		{"metadata with a number no float64 holds is invalid", fields{metadata: `{"n":1e400}`}, ruleFailure{"metadata", "invalid_request", "metadata holds the number 1e400, which no 64-bit float can hold"}},
		{"metadata with a number out of range deep inside is invalid", fields{metadata: `{"a":[{"b":-2e308}]}`}, ruleFailure{"metadata", "invalid_request", "metadata holds the number -2e308, which no 64-bit float can hold"}},
		{"metadata with a number too small for a float64 is invalid", fields{metadata: `{"n":1e-400}`}, ruleFailure{"metadata", "invalid_request", "metadata holds the number 1e-400, which no 64-bit float can hold (it would read back as 0)"}},
		{"metadata with a negative number too small deep inside is invalid", fields{metadata: `{"a":[{"b":-2e-324}]}`}, ruleFailure{"metadata", "invalid_request", "metadata holds the number -2e-324, which no 64-bit float can hold (it would read back as 0)"}},
		{"metadata with the least float64 is valid", fields{metadata: `{"n":5e-324,"z":0e-400,"y":-0.0e9}`}, ruleFailure{}},
		{"metadata nested 33 levels is invalid", fields{metadata: `{"a":` + strings.Repeat("[", 32) + strings.Repeat("]", 32) + `}`}, ruleFailure{"metadata", "invalid_request", "metadata nests deeper than 32 levels"}},
		{"metadata with a key twice is invalid", fields{metadata: `{"k":1,"x":{"k":1},"k":2}`}, ruleFailure{"metadata", "invalid_request", `metadata has the key "k" twice in one object`}},
		{"metadata over 4 KiB is invalid", fields{metadata: `{"a":"` + strings.Repeat("m", 4<<10) + `"}`}, ruleFailure{"metadata", "invalid_request", "metadata is larger than 4096 bytes"}},
		{"an empty queue is reported before a long description", fields{description: ptr(strings.Repeat("d", 8<<10+1)), queue: ptr("")}, ruleFailure{"queue", "invalid_id", "queue must not be empty"}},
		{"a long description is reported before a malformed queue", fields{description: ptr(strings.Repeat("d", 8<<10+1)), queue: ptr("a b")}, ruleFailure{"description", "invalid_request", "description must be at most 8192 bytes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var md json.RawMessage
			if tc.f.metadata != "" {
				md = json.RawMessage(tc.f.metadata)
			}
			expectRule(t, lease.CheckTaskFields(tc.f.title, tc.f.description, tc.f.queue, tc.f.priority, md), tc.want)
		})
	}
}

func TestDurationRules(t *testing.T) {
	t.Parallel()
	const timeoutMsg = `timeout must be a duration such as "90s" or "30m" from 1s to 24h`
	const ttlMsg = `ttl must be a duration such as "90s" or "30m" from 1s to 1h`
	const waitMsg = `wait must be a duration such as "5s" or "20s" from 0s to 20s`
	for _, tc := range []struct {
		name string
		rng  lease.DurationRange
		d    time.Duration
		want ruleFailure
	}{
		{"a timeout of 1s is valid", lease.TimeoutRange, time.Second, ruleFailure{}},
		{"a timeout of 24h is valid", lease.TimeoutRange, 24 * time.Hour, ruleFailure{}},
		{"a timeout under 1s is invalid", lease.TimeoutRange, 999 * time.Millisecond, ruleFailure{"timeout", "invalid_timeout", timeoutMsg}},
		{"a timeout of 0s given explicitly is invalid", lease.TimeoutRange, 0, ruleFailure{"timeout", "invalid_timeout", timeoutMsg}},
		{"a timeout over 24h is invalid", lease.TimeoutRange, 24*time.Hour + time.Second, ruleFailure{"timeout", "invalid_timeout", timeoutMsg}},
		{"a negative timeout is invalid", lease.TimeoutRange, -time.Minute, ruleFailure{"timeout", "invalid_timeout", timeoutMsg}},
		{"a ttl of 1h is valid", lease.TTLRange, time.Hour, ruleFailure{}},
		{"a ttl over 1h is invalid", lease.TTLRange, 61 * time.Minute, ruleFailure{"ttl", "invalid_timeout", ttlMsg}},
		{"a wait of 0s is valid", lease.WaitRange, 0, ruleFailure{}},
		{"a wait of 20s is valid", lease.WaitRange, 20 * time.Second, ruleFailure{}},
		{"a wait over 20s is invalid", lease.WaitRange, 21 * time.Second, ruleFailure{"wait", "invalid_timeout", waitMsg}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			expectRule(t, tc.rng.Check(tc.d), tc.want)
		})
	}
	t.Run("a value that does not parse fails as one out of range does", func(t *testing.T) {
		t.Parallel()
		expectRule(t, lease.TimeoutRange.Invalid(), ruleFailure{"timeout", "invalid_timeout", timeoutMsg})
	})
}

func TestRequestRules(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
		want ruleFailure
	}{
		{"fence 0 names no lease and is valid", lease.CheckFence(0), ruleFailure{}},
		{"a negative fence is invalid", lease.CheckFence(-1), ruleFailure{"fence", "invalid_request", "fence must be a positive integer"}},
		{"no expected statuses is the default", lease.CheckExpectedStatuses(nil), ruleFailure{}},
		{"an empty list of expected statuses is invalid", lease.CheckExpectedStatuses([]lease.Status{}), ruleFailure{"expected_statuses", "invalid_request", "expected_statuses must not be empty"}},
		{"expected statuses must be statuses", lease.CheckExpectedStatuses([]lease.Status{"todo", "open"}), ruleFailure{"expected_statuses", "invalid_request", "expected_statuses may hold only todo, blocked, in_progress, done, cancelled and failed"}},
		{"no claim queues is the default queue", lease.CheckClaimQueues(nil), ruleFailure{}},
		{"an empty list of claim queues is invalid", lease.CheckClaimQueues([]string{}), ruleFailure{"queues", "invalid_request", "queues must name at least one queue"}},
		{"a claim names at most 10 queues", lease.CheckClaimQueues(make([]string, 11)), ruleFailure{"queues", "invalid_request", "a claim names at most 10 queues"}},
		{"a claim queue must be an id", lease.CheckClaimQueues([]string{"a", ""}), ruleFailure{"queue", "invalid_id", "queue must not be empty"}},
		{"a PATCH may cancel", lease.CheckPatchStatus(ptr(lease.StatusCancelled)), ruleFailure{}},
		{"a PATCH may reopen", lease.CheckPatchStatus(ptr(lease.StatusTodo)), ruleFailure{}},
		{"a PATCH may not complete", lease.CheckPatchStatus(ptr(lease.StatusDone)), ruleFailure{"status", "invalid_request", "status may be changed only to cancelled or todo"}},
		{"a batch of 25 tasks is valid", lease.CheckBatchSize(25), ruleFailure{}},
		{"an empty batch is invalid", lease.CheckBatchSize(0), ruleFailure{"tasks", "invalid_request", "tasks must hold 1 to 25 tasks"}},
		{"a batch of 26 tasks is invalid", lease.CheckBatchSize(26), ruleFailure{"tasks", "invalid_request", "tasks must hold 1 to 25 tasks"}},
		{"a batch's task error names the task", lease.InBatch(2, lease.CheckTitle(strings.Repeat("t", 1025))), ruleFailure{"tasks[2].title", "invalid_request", "tasks[2]: title must be at most 1024 bytes"}},
		{"a listing status must be a status", lease.CheckListStatus("open"), ruleFailure{"status", "invalid_request", "status must be todo, blocked, in_progress, done, cancelled or failed"}},
		{"a limit of 1000 is valid", lease.CheckLimit(1000), ruleFailure{}},
		{"a limit of 0 given explicitly is invalid", lease.CheckLimit(0), ruleFailure{"limit", "invalid_request", "limit must be an integer from 1 to 1000"}},
		{"a limit of 1001 is invalid", lease.CheckLimit(1001), ruleFailure{"limit", "invalid_request", "limit must be an integer from 1 to 1000"}},
		{"a cursor of 4096 bytes may be decoded", lease.CheckCursor(strings.Repeat("c", 4096)), ruleFailure{}},
		{"a cursor over 4096 bytes is not valid", lease.CheckCursor(strings.Repeat("c", 4097)), ruleFailure{"cursor", "invalid_request", "cursor is not valid"}},
		{"feed types must be event types", lease.CheckEventTypes([]lease.EventType{"checkout", "nap"}), ruleFailure{"type", "invalid_request", `type "nap" is not an event type`}},
		{"a feed lists at most every event type", lease.CheckEventTypes(make([]lease.EventType, len(lease.EventTypes)+1)), ruleFailure{"type", "invalid_request", "type lists too many event types"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			expectRule(t, tc.err, tc.want)
		})
	}
	t.Run("an error that is not a validation error is returned as it is", func(t *testing.T) {
		t.Parallel()
		if err := lease.InBatch(1, lease.ErrTaskExists); !errors.Is(err, lease.ErrTaskExists) {
			t.Fatalf("got %v", err)
		}
	})
}

func TestDurationRangeMessagesNameTheirBounds(t *testing.T) {
	for _, c := range []struct {
		r    lease.DurationRange
		want string
	}{
		{lease.WaitRange, "from 0s to 20s"},
		{lease.TimeoutRange, "from 1s to 24h"},
	} {
		t.Run(c.r.Field, func(t *testing.T) {
			if err := c.r.Check(-time.Second); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v, want a message with %q", err, c.want)
			}
		})
	}
}

// DynamoDB refuses strings that are not UTF-8; the store refuses them first.
func TestTextThatIsNotUTF8IsRefused(t *testing.T) {
	bad := "caf\xe9"
	for name, err := range map[string]error{
		"title":  lease.CheckTitle(bad),
		"reason": lease.CheckReason(bad),
		"name":   lease.CheckName(bad),
	} {
		t.Run(name, func(t *testing.T) {
			var v *lease.ValidationError
			if !errors.As(err, &v) || !strings.Contains(err.Error(), "UTF-8") {
				t.Fatalf("%v, want a validation error about UTF-8", err)
			}
		})
	}
}

// No agent may take the name the audit trail gives the service's own acts
// ("by": "system"), in any case, however it is registered (the HTTP API,
// or a command such as mint-admin that calls the store itself).
func TestSystemIsNoAgentID(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, id := range []string{"system", "System", "SYSTEM"} {
		_, err := e.store.RegisterAgent(ctx(t), lease.RegisterParams{AgentID: id, Name: id})
		expectRule(t, err, ruleFailure{"agent_id", "invalid_id", "agent_id " + id + " is reserved: the audit trail names the service's own acts by system"})
		// EnsureAgent, as mint-admin and the local server's admin use it.
		err = e.store.EnsureAgent(ctx(t), id, id, true, "ck_a-key-long-enough")
		expectRule(t, err, ruleFailure{"agent_id", "invalid_id", "agent_id " + id + " is reserved: the audit trail names the service's own acts by system"})
	}
}

// A retry delay is whole seconds: it is shown as retry_delay_seconds,
// and "900ms" used to be accepted and shown as 0 while the task waited
// 0.9 s, 1.8 s, 3.6 s... after its failures.
func TestRetryDelayIsWholeSeconds(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{900 * time.Millisecond, 1500 * time.Millisecond, time.Nanosecond} {
		expectRule(t, lease.CheckWorkFields(nil, &d), ruleFailure{"retry_delay", "invalid_timeout", `retry_delay must be whole seconds, such as "10s" or "2m"`})
	}
	for _, d := range []time.Duration{0, time.Second, 90 * time.Second, time.Hour} {
		if err := lease.CheckWorkFields(nil, &d); err != nil {
			t.Errorf("retry_delay %v: %v", d, err)
		}
	}
}

// A lease's timeout is whole seconds: it is shown as timeout_seconds, and
// "1500ms" used to be accepted and shown as 1 while the lease ran 1.5 s.
func TestTimeoutIsWholeSeconds(t *testing.T) {
	t.Parallel()
	want := ruleFailure{"timeout", "invalid_timeout", `timeout must be whole seconds, such as "90s" or "30m"`}
	for _, d := range []time.Duration{1500 * time.Millisecond, time.Minute + time.Nanosecond} {
		expectRule(t, lease.TimeoutRange.Check(d), want)
	}
	e := newEnv(t)
	e.task(t, "t-frac")
	_, err := e.store.Checkout(ctx(t), lease.CheckoutParams{TaskID: "t-frac", AgentID: "a1", Timeout: 1500 * time.Millisecond})
	expectRule(t, err, want)
	_, err = e.store.Claim(ctx(t), lease.ClaimParams{AgentID: "a1", Timeout: 2500 * time.Millisecond})
	expectRule(t, err, want)
	for _, d := range []time.Duration{time.Second, 90 * time.Second, 24 * time.Hour} {
		if err := lease.TimeoutRange.Check(d); err != nil {
			t.Errorf("timeout %v: %v", d, err)
		}
	}
}
