package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// These tests run the built binary as "checkout mcp" and talk to it with the
// Go SDK's client over stdio, against the real local server.

type mcpSession struct {
	t       *testing.T
	s       *mcp.ClientSession
	schemas map[string]*jsonschema.Resolved // tool -> output schema
	tools   []*mcp.Tool
}

// connectMCP runs the built binary as "checkout mcp" for one agent and
// connects an MCP client to it over stdio.
func connectMCP(t *testing.T, url, key string, env ...string) *mcpSession {
	t.Helper()
	cmd := exec.Command(binary, "mcp")
	cmd.Env = cleanEnv(append([]string{"CHECKOUT_URL=" + url, "CHECKOUT_API_KEY=" + key}, env...)...)
	c := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ms := &mcpSession{t: t, s: s, schemas: map[string]*jsonschema.Resolved{}}
	tools, err := s.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	ms.tools = tools.Tools
	for _, tool := range tools.Tools {
		b, _ := json.Marshal(tool.OutputSchema)
		var sch jsonschema.Schema
		if err := json.Unmarshal(b, &sch); err != nil {
			t.Fatalf("%s: output schema: %v", tool.Name, err)
		}
		r, err := sch.Resolve(nil)
		if err != nil {
			t.Fatalf("%s: output schema: %v", tool.Name, err)
		}
		ms.schemas[tool.Name] = r
	}
	return ms
}

// call calls a tool and checks what every result must have: structured
// content that the tool's output schema accepts, with ok, message (the
// text) and, on failure, a code.
func (ms *mcpSession) call(tool string, args map[string]any) (*mcp.CallToolResult, map[string]any) {
	t := ms.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := ms.s.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error %v", tool, err)
	}
	if res.StructuredContent == nil {
		t.Fatalf("%s %v: no structured content: %s", tool, args, textOf(res))
	}
	b, _ := json.Marshal(res.StructuredContent)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if err := ms.schemas[tool].Validate(out); err != nil {
		t.Errorf("%s %v: structured content breaks the output schema: %v\n%s", tool, args, err, b)
	}
	if out["ok"] != !res.IsError || out["message"] != textOf(res) || res.IsError && out["code"] == nil {
		t.Errorf("%s %v: isError %v with %s", tool, args, res.IsError, b)
	}
	return res, out
}

func textOf(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestMCPOverStdio(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "task-d4e5", "Fix login bug")
	e.task(t, "task-f6a7", "Write release notes")
	researcher := connectMCP(t, e.srv.URL(), e.keys["agent-a1b2"])
	writer := connectMCP(t, e.srv.URL(), e.keys["agent-c3d4"])

	if got := researcher.s.InitializeResult().ServerInfo.Name; got != "checkout" {
		t.Fatalf("server name %q", got)
	}
	var names []string
	for _, tool := range researcher.tools {
		names = append(names, tool.Name)
		if len(tool.Description) < 80 || tool.InputSchema == nil || tool.OutputSchema == nil {
			t.Errorf("tool %s: thin description or missing schema", tool.Name)
		}
	}
	sort.Strings(names)
	if want := "ack_message checkout_task claim_task complete_task create_task fail_task get_task heartbeat list_checkouts list_queues list_tasks read_inbox release_task renew_task task_status update_task watch_task"; strings.Join(names, " ") != want {
		t.Fatalf("tools %v, want %s", names, want)
	}

	// What there is to do.
	res, out := researcher.call("list_tasks", map[string]any{"status": "todo", "limit": 1})
	if res.IsError || len(out["tasks"].([]any)) != 1 || out["next_cursor"] == nil {
		t.Fatalf("list_tasks: %s %v", textOf(res), out)
	}
	res, out = researcher.call("list_tasks", map[string]any{"cursor": out["next_cursor"]})
	if res.IsError || len(out["tasks"].([]any)) != 1 {
		t.Fatalf("list_tasks page 2: %s %v", textOf(res), out)
	}
	res, out = researcher.call("get_task", map[string]any{"task_id": "task-d4e5"})
	if res.IsError || out["task"].(map[string]any)["title"] != "Fix login bug" || !strings.Contains(textOf(res), "open") {
		t.Fatalf("get_task: %s %v", textOf(res), out)
	}

	// The researcher takes one; the writer is told who holds it, as a normal
	// result.
	res, out = researcher.call("checkout_task", map[string]any{"task_id": "task-d4e5", "timeout": "30m", "reason": "fix it"})
	if res.IsError || out["acquired"] != true || out["title"] != "Fix login bug" {
		t.Fatalf("researcher's checkout: %s %v", textOf(res), out)
	}
	if co := out["checkout"].(map[string]any); co["agent_id"] != "agent-a1b2" || co["timeout_seconds"] != 1800.0 {
		t.Fatalf("lease %v", co)
	}
	res, out = writer.call("checkout_task", map[string]any{"task_id": "task-d4e5"})
	if res.IsError || out["acquired"] != false || out["held_by_you"] != false || out["title"] != "Fix login bug" {
		t.Fatalf("writer's checkout: %s %v", textOf(res), out)
	}
	holder := out["holder"].(map[string]any)
	if holder["agent_id"] != "agent-a1b2" || holder["agent_name"] != "researcher" {
		t.Fatalf("holder %v", holder)
	}
	if txt := textOf(res); !strings.Contains(txt, "DENIED") || !strings.Contains(txt, "researcher (agent-a1b2)") || !strings.Contains(txt, "claim_task") {
		t.Fatalf("denial text %q", txt)
	}
	// Checking out again in the same session is the same lease.
	if res, out = researcher.call("checkout_task", map[string]any{"task_id": "task-d4e5"}); out["acquired"] != true {
		t.Fatalf("repeat checkout: %s", textOf(res))
	}

	// The writer moves on to the next open task, with its title.
	res, out = writer.call("claim_task", map[string]any{"timeout": "10m"})
	if res.IsError || out["acquired"] != true || out["task_id"] != "task-f6a7" || out["title"] != "Write release notes" {
		t.Fatalf("claim: %s %v", textOf(res), out)
	}
	if res, out = researcher.call("claim_task", nil); res.IsError || out["acquired"] != false {
		t.Fatalf("claim from an empty pool: %s %v", textOf(res), out)
	}

	res, out = writer.call("task_status", map[string]any{"task_id": "task-d4e5"})
	if res.IsError || out["locked"] != true || out["checkout"].(map[string]any)["agent_id"] != "agent-a1b2" || out["held_by_this_session"] != false {
		t.Fatalf("status: %s %v", textOf(res), out)
	}
	if _, out = researcher.call("task_status", map[string]any{"task_id": "task-d4e5"}); out["held_by_this_session"] != true {
		t.Fatalf("status of one's own: %v", out)
	}
	res, out = writer.call("list_checkouts", nil)
	if res.IsError || len(out["checkouts"].([]any)) != 2 || out["total"] != 2.0 {
		t.Fatalf("list: %s %v", textOf(res), out)
	}
	res, out = writer.call("list_checkouts", map[string]any{"limit": 1})
	if res.IsError || len(out["checkouts"].([]any)) != 1 || out["total"] != 2.0 || out["truncated"] != true {
		t.Fatalf("list with a limit: %s %v", textOf(res), out)
	}
	if res, _ = researcher.call("heartbeat", map[string]any{"ttl": "2m"}); res.IsError {
		t.Fatalf("heartbeat: %s", textOf(res))
	}
	if res, _ = researcher.call("renew_task", map[string]any{"task_id": "task-d4e5", "timeout": "1h"}); res.IsError {
		t.Fatalf("renew: %s", textOf(res))
	}

	// Failures the agent must act on are tool errors with a clear message
	// and a code.
	res, out = writer.call("complete_task", map[string]any{"task_id": "task-d4e5"})
	if !res.IsError || out["code"] != "not_holder" || out["holder"].(map[string]any)["agent_id"] != "agent-a1b2" {
		t.Fatalf("complete by a non-holder: %v %s", res.IsError, textOf(res))
	}
	for _, tc := range []struct {
		name string
		args map[string]any
		code string
		text string
	}{
		{"an unknown task is not found", map[string]any{"task_id": "nope"}, "task_not_found", "nope"},
		{"a timeout that is no duration is an invalid argument", map[string]any{"task_id": "task-f6a7", "timeout": "soon"}, "invalid_arguments", "Go duration"},
		{"a timeout of two days is an invalid timeout", map[string]any{"task_id": "task-f6a7", "timeout": "48h"}, "invalid_timeout", "timeout"},
		{"a task id with a space is an invalid id", map[string]any{"task_id": "bad id"}, "invalid_id", "task_id"},
		{"no task id is an invalid argument", map[string]any{}, "invalid_arguments", "task_id"},
		{"an argument the tool does not take is an invalid argument", map[string]any{"task_id": "x", "extra": 1}, "invalid_arguments", "extra"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if res, out := writer.call("checkout_task", tc.args); !res.IsError || out["code"] != tc.code || !strings.Contains(textOf(res), tc.text) {
				t.Errorf("checkout_task %v: %v %v", tc.args, res.IsError, out)
			}
		})
	}

	if res, out = researcher.call("complete_task", map[string]any{"task_id": "task-d4e5"}); res.IsError || out["task"].(map[string]any)["status"] != "done" {
		t.Fatalf("complete: %s %v", textOf(res), out)
	}
	// A task nobody may take is an answer, like a conflict.
	if res, out = researcher.call("checkout_task", map[string]any{"task_id": "task-d4e5"}); res.IsError || out["acquired"] != false || out["code"] != "status_mismatch" {
		t.Fatalf("checkout of a done task: %s %v", textOf(res), out)
	}
	if res, _ = writer.call("release_task", map[string]any{"task_id": "task-f6a7", "reason": "blocked"}); res.IsError {
		t.Fatalf("release: %s", textOf(res))
	}
	// A repeated release names the lease it ended, and is answered as the
	// first was.
	if res, out = writer.call("release_task", map[string]any{"task_id": "task-f6a7"}); res.IsError {
		t.Fatalf("release again: %s %v", textOf(res), out)
	}
}

// Many agents race for one task through their own MCP servers: exactly one
// is granted it, every other is told who holds it.
func TestMCPTwoAgentRace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "task-race", "The only task")
	sessions := []*mcpSession{connectMCP(t, e.srv.URL(), e.keys["agent-a1b2"]), connectMCP(t, e.srv.URL(), e.keys["agent-c3d4"])}
	for round := range 5 {
		var wg sync.WaitGroup
		outs := make([]map[string]any, len(sessions))
		for i, s := range sessions {
			wg.Go(func() { _, outs[i] = s.call("checkout_task", map[string]any{"task_id": "task-race", "timeout": "1m"}) })
		}
		wg.Wait()
		winners := 0
		var winner *mcpSession
		for i, out := range outs {
			switch {
			case out["acquired"] == true:
				winners++
				winner = sessions[i]
			case out["holder"] == nil || out["held_by_you"] != false:
				t.Fatalf("round %d: a loser not told the holder: %v", round, out)
			}
		}
		if winners != 1 {
			t.Fatalf("round %d: %d winners: %v", round, winners, outs)
		}
		if res, _ := winner.call("release_task", map[string]any{"task_id": "task-race"}); res.IsError {
			t.Fatalf("round %d: release: %s", round, textOf(res))
		}
	}
}

// A restarted MCP server finds its agent holding a task under its old run:
// it is told so (never DENIED), and adopts the lease, by checkout_task
// adopt=true or by the fence.
func TestMCPRestartAndAdopt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "task-1", "Long job")
	e.task(t, "task-2", "")
	url, key := e.srv.URL(), e.keys["agent-a1b2"]
	first := connectMCP(t, url, key)
	_, out := first.call("checkout_task", map[string]any{"task_id": "task-1", "timeout": "30m"})
	fence := out["checkout"].(map[string]any)["fence"]
	oldRun := out["checkout"].(map[string]any)["run_id"]
	first.call("checkout_task", map[string]any{"task_id": "task-2"})
	first.s.Close()

	e.clock.Advance(10 * time.Minute)
	second := connectMCP(t, url, key)
	res, out := second.call("checkout_task", map[string]any{"task_id": "task-1"})
	if res.IsError || out["acquired"] != false || out["held_by_you"] != true || strings.Contains(textOf(res), "DENIED") || !strings.Contains(textOf(res), "adopt=true") {
		t.Fatalf("after the restart: %s %v", textOf(res), out)
	}
	// Its release without the fence names the lease it sees instead of
	// pretending.
	res, out = second.call("release_task", map[string]any{"task_id": "task-1"})
	if !res.IsError || out["code"] != "not_holder" || out["holder"].(map[string]any)["run_id"] != oldRun || !strings.Contains(textOf(res), "fence=") {
		t.Fatalf("release of the old run's lease: %s %v", textOf(res), out)
	}
	res, out = second.call("checkout_task", map[string]any{"task_id": "task-1", "adopt": true, "timeout": "1h"})
	if res.IsError || out["acquired"] != true || out["adopted"] != true {
		t.Fatalf("adopt: %s %v", textOf(res), out)
	}
	co := out["checkout"].(map[string]any)
	if co["fence"] != fence || co["timeout_seconds"] != 3600.0 || co["remaining_seconds"] != 3600.0 {
		t.Fatalf("adopted lease %v, want fence %v renewed for 1h", co, fence)
	}
	if _, out = second.call("task_status", map[string]any{"task_id": "task-1"}); out["held_by_this_session"] != true {
		t.Fatalf("status after adopting: %v", out)
	}
	if res, _ = second.call("renew_task", map[string]any{"task_id": "task-1"}); res.IsError {
		t.Fatalf("renew the adopted lease: %s", textOf(res))
	}
	if res, out = second.call("complete_task", map[string]any{"task_id": "task-1"}); res.IsError || out["task"].(map[string]any)["status"] != "done" {
		t.Fatalf("complete the adopted lease: %s %v", textOf(res), out)
	}
	// The other lease is adopted by its fence alone.
	_, out = second.call("task_status", map[string]any{"task_id": "task-2"})
	f2 := out["checkout"].(map[string]any)["fence"]
	if res, out = second.call("release_task", map[string]any{"task_id": "task-2", "fence": f2}); res.IsError {
		t.Fatalf("release by fence: %s %v", textOf(res), out)
	}
	// Another agent's lease is never "yours".
	third := connectMCP(t, url, e.keys["agent-c3d4"])
	third.call("checkout_task", map[string]any{"task_id": "task-2"})
	if res, out = second.call("checkout_task", map[string]any{"task_id": "task-2", "adopt": true}); res.IsError || out["acquired"] != false || out["held_by_you"] != false {
		t.Fatalf("adopting another agent's lease: %s %v", textOf(res), out)
	}
}

// watch_task, then the holder releases, then read_inbox shows the message,
// the watcher takes the task and acknowledges the message.
func TestMCPWatchReleaseReadInbox(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "task-1", "")
	e.task(t, "task-2", "")
	researcher := connectMCP(t, e.srv.URL(), e.keys["agent-a1b2"])
	writer := connectMCP(t, e.srv.URL(), e.keys["agent-c3d4"])
	writer.call("checkout_task", map[string]any{"task_id": "task-1"})
	writer.call("checkout_task", map[string]any{"task_id": "task-2"})
	if res, out := researcher.call("watch_task", map[string]any{"task_id": "task-1"}); res.IsError || out["watching"] != true {
		t.Fatalf("watch: %s", textOf(res))
	}
	if res, out := researcher.call("checkout_task", map[string]any{"task_id": "task-2", "watch": true}); res.IsError || out["watching"] != true || out["acquired"] != false {
		t.Fatalf("checkout with watch: %s", textOf(res))
	}
	if res, out := researcher.call("read_inbox", nil); res.IsError || out["messages"] != nil || !strings.Contains(textOf(res), "empty") {
		t.Fatalf("inbox before: %s %v", textOf(res), out)
	}
	writer.call("release_task", map[string]any{"task_id": "task-1", "reason": "done for now"})
	writer.call("release_task", map[string]any{"task_id": "task-2"})
	var msgs []any
	deadline := time.Now().Add(10 * time.Second)
	for len(msgs) < 2 && time.Now().Before(deadline) {
		_, out := researcher.call("read_inbox", nil)
		msgs, _ = out["messages"].([]any)
		if len(msgs) < 2 {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if len(msgs) != 2 {
		t.Fatalf("inbox after the releases: %v", msgs)
	}
	_, out := researcher.call("read_inbox", map[string]any{"limit": 1})
	if len(out["messages"].([]any)) != 1 || out["truncated"] != true || out["total"] != 2.0 {
		t.Fatalf("inbox with a limit: %v", out)
	}
	m := msgs[0].(map[string]any)
	if m["task_id"] != "task-1" || m["type"] != "task_available" {
		t.Fatalf("message %v", m)
	}
	res, out := researcher.call("checkout_task", map[string]any{"task_id": "task-1"})
	if out["acquired"] != true {
		t.Fatalf("checkout after the message: %s", textOf(res))
	}
	if res, _ = researcher.call("ack_message", map[string]any{"message_id": m["message_id"]}); res.IsError {
		t.Fatalf("ack: %s", textOf(res))
	}
	if res, out = researcher.call("ack_message", map[string]any{"message_id": m["message_id"]}); !res.IsError || out["code"] != "not_found" {
		t.Fatalf("ack again: %s %v", textOf(res), out)
	}
	if _, out = researcher.call("read_inbox", nil); len(out["messages"].([]any)) != 1 {
		t.Fatalf("inbox after the ack: %v", out)
	}
}

func TestMCPWithServerDown(t *testing.T) {
	t.Parallel()
	s := connectMCP(t, "http://127.0.0.1:1", "ck_x")
	res, out := s.call("task_status", map[string]any{"task_id": "t"})
	if !res.IsError || out["code"] != "unreachable" || !strings.Contains(textOf(res), "cannot reach the server") {
		t.Fatalf("%v %s", res.IsError, textOf(res))
	}
}

// Queues through the MCP tools: create_task with a queue, a priority and
// metadata; claim_task from that queue, best first; update_task to change
// and cancel.
func TestMCPQueues(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	agent := connectMCP(t, e.srv.URL(), e.keys["agent-a1b2"])
	res, out := agent.call("create_task", map[string]any{"task_id": "low", "title": "Tidy", "queue": "backend", "priority": 1})
	if res.IsError || out["task"].(map[string]any)["queue"] != "backend" {
		t.Fatalf("create_task: %s %v", textOf(res), out)
	}
	res, out = agent.call("create_task", map[string]any{"task_id": "high", "title": "Bug", "queue": "backend", "priority": 9, "metadata": map[string]any{"ticket": "OPS-1"}})
	if res.IsError || out["task"].(map[string]any)["metadata"].(map[string]any)["ticket"] != "OPS-1" {
		t.Fatalf("create_task with metadata: %s %v", textOf(res), out)
	}
	if res, out = agent.call("create_task", map[string]any{"task_id": "high"}); res.IsError || !strings.Contains(textOf(res), "exists") {
		t.Fatalf("create_task again: %s %v", textOf(res), out)
	}
	if res, out = agent.call("claim_task", nil); res.IsError || out["acquired"] != false {
		t.Fatalf("claim from the default queue: %s %v", textOf(res), out)
	}
	res, out = agent.call("claim_task", map[string]any{"queues": []string{"backend"}, "wait": "1s"})
	if res.IsError || out["task_id"] != "high" || out["checkout"].(map[string]any)["priority"] != 9.0 {
		t.Fatalf("claim from backend: %s %v", textOf(res), out)
	}
	res, out = agent.call("update_task", map[string]any{"task_id": "low", "priority": 8, "version": 99})
	if !res.IsError || out["code"] != "version_mismatch" {
		t.Fatalf("update_task with a stale version: %s %v", textOf(res), out)
	}
	res, out = agent.call("update_task", map[string]any{"task_id": "high", "status": "cancelled"})
	if res.IsError || out["task"].(map[string]any)["status"] != "cancelled" {
		t.Fatalf("cancel one's own task: %s %v", textOf(res), out)
	}
}

// A line on stdin that is not JSON is answered with JSON-RPC's parse
// error (-32700, id null) and skipped; the session goes on. Valid JSON
// that is no request is an invalid request (-32600).
func TestMCPAnswersALineThatIsNotJSON(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	in, next := rawMCP(t, e.srv.URL(), e.keys["agent-a1b2"])
	io.WriteString(in, "not json at all\n")
	if m := next(); m["id"] != nil || m["error"] == nil || m["error"].(map[string]any)["code"] != -32700.0 {
		t.Fatalf("answer to a line that is not JSON: %v, want a parse error with id null", m)
	}
	io.WriteString(in, "42\n")
	if m := next(); m["id"] != nil || m["error"] == nil || m["error"].(map[string]any)["code"] != -32600.0 {
		t.Fatalf("answer to JSON that is no request: %v, want an invalid request with id null", m)
	}
	io.WriteString(in, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`+"\n")
	if m := next(); m["id"] != 1.0 || m["result"] == nil {
		t.Fatalf("initialize after the bad lines: %v", m)
	}
}

// task_status answers a free task as the API and --json do: locked false
// and checkout null, with held_by_this_session false; the output schema
// takes it.
func TestMCPStatusOfAFreeTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "free", "Nobody holds it")
	agent := connectMCP(t, e.srv.URL(), e.keys["agent-a1b2"])
	res, out := agent.call("task_status", map[string]any{"task_id": "free"})
	co, has := out["checkout"]
	if res.IsError || out["locked"] != false || !has || co != nil || out["held_by_this_session"] != false {
		t.Fatalf("task_status of a free task: %s %v", textOf(res), out)
	}
	agent.call("checkout_task", map[string]any{"task_id": "free"})
	if res, out = agent.call("task_status", map[string]any{"task_id": "free"}); res.IsError || out["locked"] != true || out["held_by_this_session"] != true {
		t.Fatalf("task_status of the session's task: %s %v", textOf(res), out)
	}
}

// A line of 17 MB on stdin is answered with an invalid request and
// skipped; the process goes on. It exited 1 ("inbound JSON-RPC frame
// exceeded the configured maximum line length").
func TestMCPSkipsAnOversizedLine(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	in, next := rawMCP(t, e.srv.URL(), e.keys["agent-a1b2"])
	go func() {
		io.WriteString(in, `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"`+strings.Repeat("a", 17<<20)+`"}}`+"\n")
		io.WriteString(in, `{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`+"\n")
	}()
	if m := next(); m["id"] != nil || m["error"] == nil || m["error"].(map[string]any)["code"] != -32600.0 {
		t.Fatalf("answer to a line of 17 MB: %v, want an invalid request with id null", m)
	}
	if m := next(); m["id"] != 2.0 || m["result"] == nil {
		t.Fatalf("initialize after the line of 17 MB: %v", m)
	}
}

// A client that pipes a script and closes stdin gets the answers of the
// calls it sent, and they are made: the tools/call of
// `printf '<initialize>\n<initialized>\n<tools/call>\n' | checkout mcp`
// was never answered, and the task was not checked out.
func TestMCPAnswersAPipedScript(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "piped", "Taken by a script")
	cmd := exec.Command(binary, "mcp")
	cmd.Env = cleanEnv("CHECKOUT_URL="+e.srv.URL(), "CHECKOUT_API_KEY="+e.keys["agent-a1b2"])
	cmd.Stdin = strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}` + "\n" +
		`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n" +
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"checkout_task","arguments":{"task_id":"piped"}}}` + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("checkout mcp: %v\n%s", err, out)
	}
	var answered bool
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var m struct {
			ID     any `json:"id"`
			Result struct {
				StructuredContent map[string]any `json:"structuredContent"`
			} `json:"result"`
		}
		_ = json.Unmarshal([]byte(line), &m)
		if m.ID == 2.0 {
			answered = m.Result.StructuredContent["acquired"] == true
		}
	}
	if !answered {
		t.Fatalf("no answer acquiring the task: %s", out)
	}
	s, err := e.admin.Status(context.Background(), "piped")
	if err != nil || !s.Locked {
		t.Fatalf("the task is not checked out: %+v %v", s, err)
	}
}

// rawMCP runs `checkout mcp` for key with its stdin and stdout bare: in
// writes lines to it, next reads its next answer line as JSON.
func rawMCP(t *testing.T, url, key string) (in io.Writer, next func() map[string]any) {
	t.Helper()
	cmd := exec.Command(binary, "mcp")
	cmd.Env = cleanEnv("CHECKOUT_URL="+url, "CHECKOUT_API_KEY="+key)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(out)
	return stdin, func() map[string]any {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("no answer: %v", lines.Err())
		}
		var m map[string]any
		if err := json.Unmarshal(lines.Bytes(), &m); err != nil {
			t.Fatalf("not JSON: %q", lines.Text())
		}
		return m
	}
}

// watch_task says when its message will come, from the task's state, as
// checkout watch does: a free task is free now (checkout_task takes it,
// and the message waits for its next freeing), a done one sends none
// until it is reopened, taken and freed again. It said of every task that
// a message would arrive "when it becomes available", so an agent
// watching a free or a done task waited for a message that was not coming.
func TestMCPWatchSaysWhenTheMessageComes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "free", "")
	e.task(t, "held", "")
	e.task(t, "finished", "")
	writer := connectMCP(t, e.srv.URL(), e.keys["agent-c3d4"])
	researcher := connectMCP(t, e.srv.URL(), e.keys["agent-a1b2"])
	writer.call("checkout_task", map[string]any{"task_id": "held"})
	writer.call("checkout_task", map[string]any{"task_id": "finished"})
	writer.call("complete_task", map[string]any{"task_id": "finished"})
	for _, tc := range []struct {
		task       string
		has, lacks string
	}{
		{"free", "free now", "when it becomes available"},
		{"finished", "done", "when it becomes available"},
		{"held", "when it becomes available", "free now"},
	} {
		res, out := researcher.call("watch_task", map[string]any{"task_id": tc.task})
		txt := textOf(res)
		if res.IsError || out["watching"] != true || !strings.Contains(txt, tc.has) || strings.Contains(txt, tc.lacks) {
			t.Errorf("watch_task %s: %q (watching %v), want it to say %q and not %q", tc.task, txt, out["watching"], tc.has, tc.lacks)
		}
	}
}
