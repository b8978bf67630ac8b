package mcpserver

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/checkout-dev/checkout/client"
)

// These tests check how the tools turn the API's answers into results, with
// the server's answers scripted; cmd/checkout's tests run the real binary
// against the real local server over stdio.

const holder = `{"task_id":"task-d4e5","agent_id":"agent-c3d4","agent_name":"writer","run_id":"run-w","fence":7,` +
	`"locked_at":"2026-03-20T14:30:00.000Z","timeout_seconds":900,"expires_at":"2026-03-20T14:45:00.000Z","remaining_seconds":600,"reason":"drafting"}`

// scriptedNow is the scripted server's clock (its answers' Date header),
// which the fixtures' times are read against.
var scriptedNow = time.Date(2026, 3, 20, 14, 30, 0, 0, time.UTC)

func session(t *testing.T, answer func(r *http.Request, body map[string]any) (int, string)) *mcp.ClientSession {
	t.Helper()
	return sessionAt(t, scriptedNow, answer)
}

// sessionAt is session with a server whose clock reads date.
func sessionAt(t *testing.T, date time.Time, answer func(r *http.Request, body map[string]any) (int, string)) *mcp.ClientSession {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &body)
		status, out := answer(r, body)
		w.Header().Set("Date", date.Format(http.TimeFormat))
		w.WriteHeader(status)
		io.WriteString(w, out)
	}))
	t.Cleanup(srv.Close)
	st, ct := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := New(client.New(srv.URL, "ck_test")).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func callTool(t *testing.T, cs *mcp.ClientSession, name string, args any) (*mcp.CallToolResult, string, map[string]any) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	var txt strings.Builder
	for _, c := range res.Content {
		txt.WriteString(c.(*mcp.TextContent).Text)
	}
	var out map[string]any
	b, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(b, &out)
	return res, txt.String(), out
}

func TestConflictIsAResultNamingTheHolder(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var runIDs []any
	cs := session(t, func(r *http.Request, body map[string]any) (int, string) {
		if r.Method == http.MethodGet {
			return 200, `{"task_id":"task-d4e5","title":"Fix login bug","status":"in_progress"}`
		}
		mu.Lock()
		runIDs = append(runIDs, body["run_id"])
		mu.Unlock()
		if body["watch"] != true {
			t.Errorf("watch not passed: %v", body)
		}
		return 409, `{"error":"task task-d4e5 is already checked out","code":"checked_out","holder":` + holder + `,"watching":true}`
	})
	res, txt, out := callTool(t, cs, "checkout_task", map[string]any{"task_id": "task-d4e5", "watch": true})
	if res.IsError {
		t.Fatalf("a conflict is not an error: %s", txt)
	}
	if out["ok"] != true || out["acquired"] != false || out["watching"] != true || out["holder"].(map[string]any)["agent_name"] != "writer" || out["title"] != "Fix login bug" {
		t.Fatalf("structured %v", out)
	}
	for _, want := range []string{"DENIED", "writer (agent-c3d4)", "2026-03-20T14:45:00Z", "drafting", "inbox"} {
		if !strings.Contains(txt, want) {
			t.Errorf("text %q lacks %q", txt, want)
		}
	}
	callTool(t, cs, "checkout_task", map[string]any{"task_id": "task-x", "watch": true})
	mu.Lock()
	defer mu.Unlock()
	if len(runIDs) != 2 || runIDs[0] == nil || runIDs[0] != runIDs[1] {
		t.Fatalf("one session should use one run id: %v", runIDs)
	}
}

func TestFailuresAreToolErrors(t *testing.T) {
	t.Parallel()
	cs := session(t, func(r *http.Request, body map[string]any) (int, string) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/complete"):
			return 403, `{"error":"held by another","code":"not_holder","holder":` + holder + `}`
		}
		return 401, `{"error":"bad key","code":"unauthorized"}`
	})
	for _, tc := range []struct {
		name string
		tool string
		args map[string]any
		want string
		code string
	}{
		{"completing another's lease says this session does not hold it", "complete_task", map[string]any{"task_id": "task-d4e5"}, "this session does not hold the lease", "not_holder"},
		{"a refused key points at CHECKOUT_API_KEY", "task_status", map[string]any{"task_id": "task-d4e5"}, "CHECKOUT_API_KEY", "unauthorized"},
		{"a timeout that is no duration asks for a Go duration", "renew_task", map[string]any{"task_id": "task-d4e5", "timeout": "x"}, "Go duration", "invalid_arguments"},
		{"a checkout without a task id names task_id", "checkout_task", map[string]any{}, "task_id", "invalid_arguments"},
		{"a task id that is a number names task_id", "checkout_task", map[string]any{"task_id": 7}, "task_id", "invalid_arguments"},
		{"a limit over the maximum names limit", "list_tasks", map[string]any{"limit": 5000}, "limit", "invalid_arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, txt, out := callTool(t, cs, tc.tool, tc.args)
			if !res.IsError || !strings.Contains(txt, tc.want) {
				t.Errorf("%s %v: isError %v, text %q, want it to mention %q", tc.tool, tc.args, res.IsError, txt, tc.want)
			}
			if out["ok"] != false || out["code"] != tc.code || out["message"] != txt {
				t.Errorf("%s %v: structured content %v, want ok false and code %s", tc.tool, tc.args, out, tc.code)
			}
		})
	}
}

// A task_available message whose task waits (a failed attempt's retry
// delay) tells the agent from when it may take it, in the text and in the
// structured messages.
func TestInboxSaysWhenADelayedTaskIsReady(t *testing.T) {
	t.Parallel()
	cs := session(t, func(r *http.Request, _ map[string]any) (int, string) {
		return 200, `{"messages":[` +
			`{"message_id":"m-1","type":"task_available","task_id":"flaky","reason":"release","at":"2026-03-20T14:30:00.000Z","fence":1,"run_id":"r","not_before":"2026-03-20T14:30:30.000Z"},` +
			`{"message_id":"m-2","type":"task_available","task_id":"ready","reason":"release","at":"2026-03-20T14:31:00.000Z","fence":2,"run_id":"r","not_before":null}]}`
	})
	_, txt, out := callTool(t, cs, "read_inbox", nil)
	if !strings.Contains(txt, "task flaky became available (release) at 2026-03-20T14:30:00Z; it may be taken from 2026-03-20T14:30:30Z") {
		t.Errorf("text %q does not say when flaky may be taken", txt)
	}
	if strings.Count(txt, "may be taken from") != 1 {
		t.Errorf("text %q: only flaky waits", txt)
	}
	msgs, _ := out["messages"].([]any)
	if len(msgs) != 2 || msgs[0].(map[string]any)["not_before"] != "2026-03-20T14:30:30Z" {
		t.Errorf("structured messages %v", msgs)
	}
}

// locked is the answer of GET /api/tasks/{task_id}/checkout for a task
// that lease (a checkout's JSON) holds: the tools read it after a grant.
func locked(lease string) string { return `{"locked":true,"checkout":` + lease + `}` }
