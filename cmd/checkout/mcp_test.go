package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// connectMCP runs the built binary as "checkout mcp" for one agent and
// connects an MCP client to it over stdio.
func connectMCP(t *testing.T, url, key string) *mcp.ClientSession {
	t.Helper()
	cmd := exec.Command(binary, "mcp")
	cmd.Env = append(os.Environ(), "CHECKOUT_URL="+url, "CHECKOUT_API_KEY="+key)
	cmd.Stderr = os.Stderr
	c := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func call(t *testing.T, s *mcp.ClientSession, tool string, args map[string]any) (*mcp.CallToolResult, map[string]any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error %v", tool, err)
	}
	var out map[string]any
	if res.StructuredContent != nil {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
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
	e.task(t, "task-f6a7", "")
	researcher := connectMCP(t, e.srv.URL(), e.keys["agent-a1b2"])
	writer := connectMCP(t, e.srv.URL(), e.keys["agent-c3d4"])

	if got := researcher.InitializeResult().ServerInfo.Name; got != "checkout" {
		t.Fatalf("server name %q", got)
	}
	tools, err := researcher.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
		if len(tool.Description) < 80 || tool.InputSchema == nil || tool.OutputSchema == nil {
			t.Errorf("tool %s: thin description or missing schema", tool.Name)
		}
	}
	sort.Strings(names)
	if want := "checkout_task claim_task complete_task heartbeat list_checkouts release_task renew_task task_status"; strings.Join(names, " ") != want {
		t.Fatalf("tools %v, want %s", names, want)
	}

	// Two agents race for one task: the researcher wins, the writer is told
	// who holds it, as a normal result.
	res, out := call(t, researcher, "checkout_task", map[string]any{"task_id": "task-d4e5", "timeout": "30m", "reason": "fix it"})
	if res.IsError || out["acquired"] != true {
		t.Fatalf("researcher's checkout: %s %v", textOf(res), out)
	}
	if co := out["checkout"].(map[string]any); co["agent_id"] != "agent-a1b2" || co["timeout_seconds"] != 1800.0 {
		t.Fatalf("lease %v", co)
	}
	res, out = call(t, writer, "checkout_task", map[string]any{"task_id": "task-d4e5"})
	if res.IsError || out["acquired"] != false {
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
	if res, out = call(t, researcher, "checkout_task", map[string]any{"task_id": "task-d4e5"}); out["acquired"] != true {
		t.Fatalf("repeat checkout: %s", textOf(res))
	}

	// The writer moves on to the next open task.
	res, out = call(t, writer, "claim_task", map[string]any{"timeout": "10m"})
	if res.IsError || out["acquired"] != true || out["task_id"] != "task-f6a7" {
		t.Fatalf("claim: %s %v", textOf(res), out)
	}
	if res, out = call(t, researcher, "claim_task", nil); res.IsError || out["acquired"] != false {
		t.Fatalf("claim from an empty pool: %s %v", textOf(res), out)
	}

	res, out = call(t, writer, "task_status", map[string]any{"task_id": "task-d4e5"})
	if res.IsError || out["locked"] != true || out["checkout"].(map[string]any)["agent_id"] != "agent-a1b2" {
		t.Fatalf("status: %s %v", textOf(res), out)
	}
	res, out = call(t, writer, "list_checkouts", nil)
	if res.IsError || len(out["checkouts"].([]any)) != 2 {
		t.Fatalf("list: %s %v", textOf(res), out)
	}
	if res, _ = call(t, researcher, "heartbeat", map[string]any{"ttl": "2m"}); res.IsError {
		t.Fatalf("heartbeat: %s", textOf(res))
	}
	if res, _ = call(t, researcher, "renew_task", map[string]any{"task_id": "task-d4e5", "timeout": "1h"}); res.IsError {
		t.Fatalf("renew: %s", textOf(res))
	}

	// Failures the agent must act on are tool errors with a clear message.
	res, _ = call(t, writer, "complete_task", map[string]any{"task_id": "task-d4e5"})
	if !res.IsError || !strings.Contains(textOf(res), "do not hold") {
		t.Fatalf("complete by a non-holder: %v %s", res.IsError, textOf(res))
	}
	if res, _ = call(t, writer, "checkout_task", map[string]any{"task_id": "nope"}); !res.IsError || !strings.Contains(textOf(res), "nope") {
		t.Fatalf("unknown task: %v %s", res.IsError, textOf(res))
	}
	if res, _ = call(t, writer, "checkout_task", map[string]any{"task_id": "task-f6a7", "timeout": "soon"}); !res.IsError || !strings.Contains(textOf(res), "Go duration") {
		t.Fatalf("bad timeout: %v %s", res.IsError, textOf(res))
	}

	if res, out = call(t, researcher, "complete_task", map[string]any{"task_id": "task-d4e5"}); res.IsError || out["task"].(map[string]any)["status"] != "done" {
		t.Fatalf("complete: %s %v", textOf(res), out)
	}
	if res, _ = call(t, writer, "release_task", map[string]any{"task_id": "task-f6a7", "reason": "blocked"}); res.IsError {
		t.Fatalf("release: %s", textOf(res))
	}
}

func TestMCPWithServerDown(t *testing.T) {
	t.Parallel()
	s := connectMCP(t, "http://127.0.0.1:1", "ck_x")
	res, _ := call(t, s, "task_status", map[string]any{"task_id": "t"})
	if !res.IsError || !strings.Contains(textOf(res), "cannot reach the server") {
		t.Fatalf("%v %s", res.IsError, textOf(res))
	}
}
