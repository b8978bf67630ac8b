package mcpserver

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The work graph's tools and results, against scripted answers.

const graphTask = `{"task_id":"deploy","title":"Deploy","description":"","queue":"default","priority":5,"metadata":{},` +
	`"version":3,"status":"blocked","created_at":"2026-03-20T14:30:00.000Z","started_at":null,"completed_at":null,` +
	`"duration_seconds":null,"checkout":null,` +
	`"blocked_by":[{"task_id":"build","status":"in_progress"},{"task_id":"test","status":"done"}],"blocks":["announce"],` +
	`"max_attempts":3,"attempts":2,"retry_delay_seconds":30,"not_before":null,"last_error":"exit status 1"}`

type bodies struct {
	mu  sync.Mutex
	got []map[string]any
}

func (b *bodies) add(m map[string]any) {
	b.mu.Lock()
	b.got = append(b.got, m)
	b.mu.Unlock()
}

func (b *bodies) last() map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.got[len(b.got)-1]
}

func (b *bodies) all() []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]map[string]any(nil), b.got...)
}

func TestToolSchemasOfTheWorkGraph(t *testing.T) {
	t.Parallel()
	cs := session(t, func(*http.Request, map[string]any) (int, string) { return 200, `{}` })
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	props := func(schema any) (map[string]any, []any) {
		b, _ := json.Marshal(schema)
		var s struct {
			Properties map[string]any `json:"properties"`
			Required   []any          `json:"required"`
		}
		_ = json.Unmarshal(b, &s)
		return s.Properties, s.Required
	}
	seen := map[string]bool{}
	for _, tool := range res.Tools {
		in, required := props(tool.InputSchema)
		switch tool.Name {
		case "create_task", "update_task":
			seen[tool.Name] = true
			for _, p := range []string{"blocked_by", "max_attempts", "retry_delay", "not_before"} {
				if in[p] == nil {
					t.Errorf("%s has no %s argument", tool.Name, p)
				}
			}
		case "fail_task":
			seen[tool.Name] = true
			if in["task_id"] == nil || in["error"] == nil || in["fence"] == nil {
				t.Errorf("fail_task arguments %v", in)
			}
			if !reflect.DeepEqual(required, []any{"task_id", "error"}) && !reflect.DeepEqual(required, []any{"error", "task_id"}) {
				t.Errorf("fail_task requires %v, want task_id and error", required)
			}
			if !strings.Contains(tool.Description, "2 KiB") || !strings.Contains(tool.Description, "release_task") {
				t.Errorf("fail_task description: %s", tool.Description)
			}
		case "checkout_task":
			out, _ := props(tool.OutputSchema)
			if out["blocked_by"] == nil || out["not_before"] == nil {
				t.Errorf("checkout_task's result cannot carry blocked_by and not_before: %v", out)
			}
		}
	}
	if len(seen) != 3 {
		t.Errorf("tools seen: %v", seen)
	}
}

func TestCreateAndUpdateSendTheWorkGraph(t *testing.T) {
	t.Parallel()
	var b bodies
	cs := session(t, func(_ *http.Request, body map[string]any) (int, string) {
		b.add(body)
		return 200, graphTask
	})
	res, txt, out := callTool(t, cs, "create_task", map[string]any{"task_id": "deploy", "blocked_by": []string{"build", "test"},
		"max_attempts": 3, "retry_delay": "0s", "not_before": "2026-03-21T09:00:00Z"})
	if res.IsError {
		t.Fatal(txt)
	}
	want := map[string]any{"task_id": "deploy", "blocked_by": []any{"build", "test"}, "max_attempts": 3.0, "retry_delay": "0s", "not_before": "2026-03-21T09:00:00Z"}
	if got := b.last(); !reflect.DeepEqual(got, want) {
		t.Errorf("create body %v, want %v", got, want)
	}
	if !strings.Contains(txt, "waits for task build (in_progress)") || strings.Contains(txt, "task test") {
		t.Errorf("create text %q should name the blocker not done, and only it", txt)
	}
	task := out["task"].(map[string]any)
	if task["attempts"] != 2.0 || task["max_attempts"] != 3.0 || task["last_error"] != "exit status 1" || task["retry_delay_seconds"] != 30.0 ||
		len(task["blocked_by"].([]any)) != 2 || !reflect.DeepEqual(task["blocks"], []any{"announce"}) {
		t.Errorf("task result %v", task)
	}

	if res, txt, _ = callTool(t, cs, "update_task", map[string]any{"task_id": "deploy", "blocked_by": []string{}, "not_before": ""}); res.IsError {
		t.Fatal(txt)
	}
	if got := b.last(); !reflect.DeepEqual(got, map[string]any{"blocked_by": []any{}, "not_before": nil}) {
		t.Errorf("update body %v, want blocked_by [] and not_before null", got)
	}
	if res, txt, _ = callTool(t, cs, "update_task", map[string]any{"task_id": "deploy", "retry_delay": "1m", "not_before": "2026-03-21T09:00:00Z"}); res.IsError {
		t.Fatal(txt)
	}
	if got := b.last(); !reflect.DeepEqual(got, map[string]any{"retry_delay": "1m0s", "not_before": "2026-03-21T09:00:00Z"}) {
		t.Errorf("update body %v", got)
	}

	n := len(b.got)
	for _, args := range []map[string]any{{"not_before": "tomorrow"}, {"retry_delay": "-1s"}} {
		args["task_id"] = "x"
		res, txt, out := callTool(t, cs, "create_task", args)
		if !res.IsError || out["code"] != "invalid_arguments" {
			t.Errorf("create_task %v: %s %v", args, txt, out)
		}
	}
	if len(b.got) != n {
		t.Errorf("bad arguments reached the server")
	}
}

func TestFailTaskReleasesAsAFailedAttempt(t *testing.T) {
	t.Parallel()
	var b bodies
	state := []string{`"status":"todo"`, `"attempts":2`, `"not_before":"2026-03-20T14:31:00.000Z"`}
	var mu sync.Mutex
	cs := session(t, func(r *http.Request, body map[string]any) (int, string) {
		if r.Method == http.MethodGet {
			mu.Lock()
			defer mu.Unlock()
			return 200, strings.NewReplacer(`"status":"blocked"`, state[0], `"attempts":2`, state[1], `"not_before":null`, state[2]).Replace(graphTask)
		}
		b.add(body)
		return 200, `{"task_id":"deploy","released_by":"agent-a1b2","held_seconds":75}`
	})
	res, txt, out := callTool(t, cs, "fail_task", map[string]any{"task_id": "deploy", "error": "tests fail", "fence": 4})
	if res.IsError {
		t.Fatal(txt)
	}
	if got := b.last(); got["outcome"] != "failed" || got["error"] != "tests fail" || got["fence"] != 4.0 {
		t.Errorf("release body %v", got)
	}
	if !strings.Contains(txt, "Attempt 2 of 3 failed") || !strings.Contains(txt, "2026-03-20T14:31:00Z") || out["task"] == nil {
		t.Errorf("fail_task: %s %v", txt, out)
	}

	mu.Lock()
	state = []string{`"status":"failed"`, `"attempts":3`, `"not_before":null`}
	mu.Unlock()
	if _, txt, _ = callTool(t, cs, "fail_task", map[string]any{"task_id": "deploy", "error": "again"}); !strings.Contains(txt, "is now failed") {
		t.Errorf("the last failed attempt: %s", txt)
	}
	if res, _, out = callTool(t, cs, "fail_task", map[string]any{"task_id": "deploy"}); !res.IsError || out["code"] != "invalid_arguments" {
		t.Errorf("fail_task without an error: %v", out)
	}
}

// A task nobody may take now is an answer like a conflict (acquired
// false, not an error), with why: its code and details.
func TestBlockedNotReadyAndNotOpenPassTheirDetails(t *testing.T) {
	t.Parallel()
	cs := session(t, func(r *http.Request, _ map[string]any) (int, string) {
		switch {
		case strings.Contains(r.URL.Path, "deploy"):
			return 409, `{"error":"task deploy is blocked","code":"blocked","blocked_by":[{"task_id":"build","status":"todo"}]}`
		case strings.Contains(r.URL.Path, "flaky"):
			return 409, `{"error":"task flaky is not ready","code":"not_ready","not_before":"2026-03-20T14:35:00.000Z"}`
		}
		return 409, `{"error":"task is done","code":"status_mismatch","status":"done"}`
	})
	notAcquired := func(res *mcp.CallToolResult, out map[string]any, code string) bool {
		return !res.IsError && out["ok"] == true && out["acquired"] == false && out["code"] == code
	}
	res, txt, out := callTool(t, cs, "checkout_task", map[string]any{"task_id": "deploy"})
	if !notAcquired(res, out, "blocked") || !strings.Contains(txt, "task build (todo)") ||
		!reflect.DeepEqual(out["blocked_by"], []any{map[string]any{"task_id": "build", "status": "todo"}}) {
		t.Errorf("blocked: %s %v", txt, out)
	}
	res, txt, out = callTool(t, cs, "checkout_task", map[string]any{"task_id": "flaky"})
	if !notAcquired(res, out, "not_ready") || out["not_before"] != "2026-03-20T14:35:00Z" || !strings.Contains(txt, "2026-03-20T14:35:00Z") {
		t.Errorf("not ready: %s %v", txt, out)
	}
	// Asked to watch it, the answer says no watch was placed: the service
	// watches only for a freeing, and no message comes when the time passes.
	res, txt, out = callTool(t, cs, "checkout_task", map[string]any{"task_id": "flaky", "watch": true})
	if !notAcquired(res, out, "not_ready") || out["watching"] == true || !strings.Contains(txt, "no message will come") {
		t.Errorf("not ready, watch asked: %s %v", txt, out)
	}
	res, txt, out = callTool(t, cs, "checkout_task", map[string]any{"task_id": "done"})
	if !notAcquired(res, out, "status_mismatch") || !strings.Contains(txt, "status done") {
		t.Errorf("done: %s %v", txt, out)
	}
}

func TestGetTaskTellsWhatItWaitsFor(t *testing.T) {
	t.Parallel()
	cs := session(t, func(r *http.Request, _ map[string]any) (int, string) {
		if r.URL.Path == "/api/tasks" {
			return 200, `{"tasks":[` + graphTask + `],"next_cursor":null}`
		}
		return 200, graphTask
	})
	_, txt, _ := callTool(t, cs, "get_task", map[string]any{"task_id": "deploy"})
	for _, want := range []string{"blocked", "waits for task build (in_progress)", "Attempts: 2 of 3", `Last error: "exit status 1"`, "announce"} {
		if !strings.Contains(txt, want) {
			t.Errorf("get_task text %q lacks %q", txt, want)
		}
	}
	_, txt, _ = callTool(t, cs, "list_tasks", map[string]any{})
	if !strings.Contains(txt, "waits for task build (in_progress)") {
		t.Errorf("list_tasks text %q", txt)
	}
}

// The README's table of tools names every tool the server lists.
func TestREADMENamesEveryTool(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	cs := session(t, func(*http.Request, map[string]any) (int, string) { return 200, `{}` })
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range res.Tools {
		if !strings.Contains(string(readme), "`"+tool.Name+"`") {
			t.Errorf("README.md does not name the tool %s", tool.Name)
		}
	}
}

// An agent that takes a task whose earlier attempts failed is told so, and
// what the latest one failed with, whether it checks the task out or
// claims it: fail_task's error is for whoever tries next.
func TestATakerOfARetriedTaskReadsTheLastError(t *testing.T) {
	t.Parallel()
	lease := `{"task_id":"deploy","agent_id":"agent-a1b2","agent_name":"builder","run_id":"run-1","fence":4,` +
		`"locked_at":"2026-03-20T14:30:00.000Z","timeout_seconds":1800,"expires_at":"2026-03-20T15:00:00.000Z","remaining_seconds":1800,"attempt":3`
	cs := session(t, func(r *http.Request, _ map[string]any) (int, string) {
		switch r.URL.Path {
		case "/api/claim":
			return 200, lease + `,"title":"Deploy","queue":"default","priority":5}`
		case "/api/tasks/deploy/checkout":
			if r.Method == http.MethodGet {
				return 200, locked(lease + `}`)
			}
			return 200, lease + `}`
		}
		return 200, strings.NewReplacer(`"status":"blocked"`, `"status":"in_progress"`, `"checkout":null`, `"checkout":`+lease+`}`).Replace(graphTask)
	})
	for tool, args := range map[string]map[string]any{"checkout_task": {"task_id": "deploy"}, "claim_task": {}} {
		res, txt, out := callTool(t, cs, tool, args)
		if res.IsError || out["acquired"] != true {
			t.Fatalf("%s: %s", tool, txt)
		}
		if out["last_error"] != "exit status 1" {
			t.Errorf("%s: last_error %v, want the task's", tool, out["last_error"])
		}
		if !strings.Contains(txt, "attempt 3 of 3") || !strings.Contains(txt, `"exit status 1"`) {
			t.Errorf("%s text %q should say which attempt this is and the last error", tool, txt)
		}
	}
}

// max_attempts bounds the grants of a task, not its failures (API 1.1:
// attempts counts every grant, and a failed attempt once attempts has
// reached max_attempts fails the task; a plain release is an attempt
// too): the tools must not tell the model it bounds failures.
func TestMaxAttemptsIsDescribedAsABoundOnGrants(t *testing.T) {
	t.Parallel()
	cs := session(t, func(*http.Request, map[string]any) (int, string) { return 200, `{}` })
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range res.Tools {
		if tool.Name != "create_task" && tool.Name != "update_task" {
			continue
		}
		b, _ := json.Marshal(tool.InputSchema)
		var in struct {
			Properties map[string]struct {
				Description string `json:"description"`
			} `json:"properties"`
		}
		_ = json.Unmarshal(b, &in)
		for what, text := range map[string]string{"description": tool.Description, "max_attempts": in.Properties["max_attempts"].Description} {
			if strings.Contains(text, "failed attempts before") || strings.Contains(text, "failed attempts it takes") {
				t.Errorf("%s's %s counts failures for max_attempts: %s", tool.Name, what, text)
			}
		}
		if !strings.Contains(in.Properties["max_attempts"].Description, "taken") {
			t.Errorf("%s's max_attempts does not say it counts the times the task is taken: %s", tool.Name, in.Properties["max_attempts"].Description)
		}
	}
}

// A watcher is told of a task that failed (it used its attempts) with a
// task_available message of reason failed; that task is not free, and
// read_inbox must not send the agent to check it out.
func TestInboxSaysAFailedTaskIsNotFree(t *testing.T) {
	t.Parallel()
	cs := session(t, func(r *http.Request, _ map[string]any) (int, string) {
		return 200, `{"messages":[` +
			`{"message_id":"m-1","type":"task_available","task_id":"flaky","reason":"failed","at":"2026-03-20T14:30:00.000Z","fence":3,"run_id":"r","not_before":null},` +
			`{"message_id":"m-2","type":"task_available","task_id":"ready","reason":"release","at":"2026-03-20T14:31:00.000Z","fence":2,"run_id":"r","not_before":null}]}`
	})
	_, txt, _ := callTool(t, cs, "read_inbox", nil)
	if strings.Contains(txt, "task flaky became available") || !strings.Contains(txt, "task flaky failed") || !strings.Contains(txt, "update_task") {
		t.Errorf("text %q should say flaky failed and how to reopen it, not that it is available", txt)
	}
	if !strings.Contains(txt, "task ready became available (release)") {
		t.Errorf("text %q lost the released task", txt)
	}
}
