package lease_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/checkout-dev/checkout/lease"
)

// One environment per fuzz process: the inputs only read, or write under ids
// no other test uses.
var (
	fuzzOnce sync.Once
	fuzzEnv  *env
)

func sharedEnv(t *testing.T) *env {
	fuzzOnce.Do(func() {
		// The environment outlives the first test that builds it.
		fuzzEnv = newEnv(&testing.T{})
		for _, id := range []string{"a", "b", "c"} {
			_, _ = fuzzEnv.store.CreateTask(context.Background(), lease.CreateTaskParams{TaskID: id})
		}
	})
	return fuzzEnv
}

// domainOnly fails unless err is nil or one of the lease domain's errors:
// anything else would surface as a 5xx.
func domainOnly(t *testing.T, what string, err error) {
	t.Helper()
	for _, e := range []error{lease.ErrInvalid, lease.ErrTaskNotFound, lease.ErrCheckedOut, lease.ErrStatusMismatch,
		lease.ErrNotHolder, lease.ErrNotCheckedOut, lease.ErrMessageNotFound, lease.ErrTaskExists} {
		if errors.Is(err, e) {
			return
		}
	}
	if err != nil {
		t.Fatalf("%s: not a domain error: %v", what, err)
	}
}

// A listing cursor comes from the client: any string must give a page or
// invalid_request, never a server error.
func FuzzListTasksCursor(f *testing.F) {
	// Forged keys with missing or empty parts ({"s":1,"k":{"task_id":"a"}},
	// empty strings, {"k":{"status":"todo"}}) reach DynamoDB as an invalid
	// ExclusiveStartKey today; `make fuzz` finds them within seconds.
	for _, s := range []string{"", "e30", `{"s":0}`, `{"s":0,"k":{"task_id":"a","status":"todo","created_key":"x"}}`,
		`{"s":9}`, `{"s":-1}`} {
		f.Add(s, true, 10, "")
	}
	f.Add("!!!", false, 0, "todo")
	f.Fuzz(func(t *testing.T, cursor string, encode bool, limit int, status string) {
		if encode { // let the fuzzer mutate the JSON inside the cursor
			cursor = base64.RawURLEncoding.EncodeToString([]byte(cursor))
		}
		e := sharedEnv(t)
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := e.store.ListTasks(c, lease.ListTasksParams{Cursor: cursor, Limit: limit, Status: lease.Status(status)})
		domainOnly(t, "list tasks", err)
	})
}

// Message ids come from the client's path: any string must delete a message
// or give message_not_found.
func FuzzDeleteMessage(f *testing.F) {
	for _, s := range []string{"", "0000000000001.1.a", "1773999999999.18446744073709551615.task", "x.y.z", "0000000000001.1." + string(make([]byte, 200))} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		e := sharedEnv(t)
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		domainOnly(t, "delete message", e.store.DeleteMessage(c, "agent-fuzz", id))
	})
}

// Checkout's parameters come from the path and the body: whatever they are,
// the answer is a grant or a domain error.
func FuzzCheckoutParams(f *testing.F) {
	f.Add("a", "agent", "", int64(0), "", "")
	f.Add("b", "agent", "run-1", int64(time.Minute), "why", "todo")
	f.Add("", "", "\x00", int64(-1), "", "nonsense")
	f.Add("c", "agent.2", "r:1", int64(25*time.Hour), "", "done")
	f.Fuzz(func(t *testing.T, task, agent, run string, timeout int64, reason, expected string) {
		if !lease.ValidID(agent) {
			return // agent ids come from authentication, never from input
		}
		e := sharedEnv(t)
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p := lease.CheckoutParams{TaskID: task, AgentID: agent, RunID: run, Timeout: time.Duration(timeout), Reason: reason}
		if expected != "" {
			p.ExpectedStatuses = []lease.Status{lease.Status(expected)}
		}
		_, err := e.store.Checkout(c, p)
		domainOnly(t, "checkout", err)
		if err == nil {
			_, err = e.store.Release(c, lease.ReleaseParams{TaskID: task, AgentID: agent})
			domainOnly(t, "release", err)
		}
	})
}

// The same, with the fuzzer building the cursor's resume key part by part:
// a key with missing or empty parts is what a forged cursor looks like.
func FuzzListTasksCursorKey(f *testing.F) {
	f.Add(0, "a", "todo", "0000000000001#a", true, true, true)
	f.Add(1, "b", "in_progress", "0000000000002#b", true, true, true)
	f.Fuzz(func(t *testing.T, status int, taskID, st, createdKey string, hasTask, hasStatus, hasCreated bool) {
		key := map[string]string{}
		if hasTask {
			key["task_id"] = taskID
		}
		if hasStatus {
			key["status"] = st
		}
		if hasCreated {
			key["created_key"] = createdKey
		}
		b, err := json.Marshal(map[string]any{"s": status, "k": key})
		if err != nil {
			return
		}
		e := sharedEnv(t)
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = e.store.ListTasks(c, lease.ListTasksParams{Cursor: base64.RawURLEncoding.EncodeToString(b)})
		domainOnly(t, "list tasks", err)
	})
}

// NormalizeMetadata keeps the JSON it is given: the same value (keys,
// order aside, strings and numbers' digits), valid UTF-8, never longer
// than compact, and normalizing again changes nothing.
func FuzzNormalizeMetadata(f *testing.F) {
	for _, s := range []string{`{}`, `{"k":"\u00e9\u2603"}`, `{"a":[1,2.50,{"b":"\"\\\u0001"}],"c":null,"d":true}`,
		`{ "x" : "\ud800" }`, "{\"k\":\"a\xffb\"}", `{"k":"\u2028<>&"}`, `[1,"\u0041"]`, `"\u0041"`, `{"a":`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out := lease.NormalizeMetadata(in)
		if !json.Valid(in) {
			return // refused by the checks that follow it
		}
		if !utf8.Valid(out) || !json.Valid(out) {
			t.Fatalf("%q normalized to %q: not valid UTF-8 JSON", in, out)
		}
		var compact bytes.Buffer
		if json.Compact(&compact, in) == nil && utf8.Valid(in) && len(out) > compact.Len() {
			t.Fatalf("%q normalized to %q, longer than compact %q", in, out, compact.Bytes())
		}
		decode := func(b []byte) any {
			d := json.NewDecoder(bytes.NewReader(b))
			d.UseNumber()
			var v any
			if err := d.Decode(&v); err != nil {
				t.Fatalf("decode %q: %v", b, err)
			}
			return v
		}
		if utf8.Valid(in) && !reflect.DeepEqual(decode(in), decode(out)) {
			t.Fatalf("%q normalized to %q: another value", in, out)
		}
		if again := lease.NormalizeMetadata(out); !bytes.Equal(again, out) {
			t.Fatalf("normalizing %q again gave %q", out, again)
		}
	})
}
