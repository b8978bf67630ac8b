package mcpserver

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// goWords are bits of Go's own error texts that an agent cannot act on.
var goWords = []string{"reflect", "Go struct", "json:", "unmarshal", "validating", "has type"}

// A null argument is one left out, for every tool: many model clients
// send null for what they do not give. A null timeout or metadata was
// refused with the validator's "<invalid reflect.Value> has type null".
func TestNullArgumentsAreLeftOut(t *testing.T) {
	t.Parallel()
	var sent bodies
	cs := session(t, func(r *http.Request, body map[string]any) (int, string) {
		sent.add(body)
		if r.Method == http.MethodPatch {
			return 200, `{"task_id":"u1","title":"new","status":"todo","queue":"default","priority":5,"version":2}`
		}
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/checkout") {
			return 200, locked(strings.ReplaceAll(holder, "task-d4e5", "m1"))
		}
		if r.Method == http.MethodGet {
			return 200, `{"task_id":"m1","title":"t","status":"in_progress","checkout":` + strings.ReplaceAll(holder, "task-d4e5", "m1") + `}`
		}
		return 200, strings.ReplaceAll(holder, "task-d4e5", "m1")
	})
	res, txt, out := callTool(t, cs, "checkout_task", map[string]any{"task_id": "m1", "timeout": nil, "reason": nil, "watch": nil, "adopt": nil})
	if res.IsError || out["acquired"] != true {
		t.Fatalf("checkout_task with null timeout: %s %v", txt, out)
	}
	res, txt, out = callTool(t, cs, "update_task", map[string]any{"task_id": "u1", "title": "new", "metadata": nil, "not_before": nil, "blocked_by": nil})
	if res.IsError || out["ok"] != true {
		t.Fatalf("update_task with null metadata: %s %v", txt, out)
	}
	last := sent.last()
	for _, k := range []string{"metadata", "not_before", "blocked_by"} {
		if _, ok := last[k]; ok {
			t.Errorf("update_task with %s null sent %s: %v", k, k, last)
		}
	}
	// Null alone changes nothing, and says so.
	res, txt, out = callTool(t, cs, "update_task", map[string]any{"task_id": "u1", "metadata": nil})
	if !res.IsError || out["code"] != "invalid_arguments" || !strings.Contains(txt, "nothing to change") {
		t.Fatalf("update_task with only null metadata: %s %v", txt, out)
	}

	// Every tool, every argument null: a required one is missing, in
	// those words; none is refused for being null.
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		b, _ := json.Marshal(tool.InputSchema)
		var in struct {
			Properties map[string]any `json:"properties"`
			Required   []string       `json:"required"`
		}
		_ = json.Unmarshal(b, &in)
		args := map[string]any{}
		for k := range in.Properties {
			args[k] = nil
		}
		_, txt, out := callTool(t, cs, tool.Name, args)
		for _, w := range goWords {
			if strings.Contains(txt, w) {
				t.Errorf("%s with every argument null: %q", tool.Name, txt)
			}
		}
		if len(in.Required) > 0 && (out["code"] != "invalid_arguments" || !strings.Contains(txt, in.Required[0]+" is required")) {
			t.Errorf("%s with every argument null: %q, want %s is required", tool.Name, txt, in.Required[0])
		}
	}
}

// A whole number written with a fraction or an exponent (5.0, 1e0) is the
// integer it is, as JSON Schema counts it: it was refused as not a whole
// number. One that is not whole, or too large, is still refused.
func TestWholeNumbersWrittenAsFloats(t *testing.T) {
	t.Parallel()
	var sent bodies
	cs := session(t, func(r *http.Request, body map[string]any) (int, string) {
		sent.add(body)
		return 201, `{"task_id":"w1","title":"x","status":"todo","queue":"default","priority":7,"version":1}`
	})
	for _, p := range []string{`7.0`, `0.7e1`} {
		res, txt, _ := callTool(t, cs, "create_task", map[string]any{"title": "x", "priority": json.RawMessage(p)})
		if res.IsError {
			t.Fatalf("priority %s: %s", p, txt)
		}
	}
	if bodies := sent.all(); len(bodies) != 2 || bodies[0]["priority"] != float64(7) || bodies[1]["priority"] != float64(7) {
		t.Errorf("bodies %v, want priority 7 twice", bodies)
	}
}

// Arguments of the wrong kind are refused naming the argument and what it
// must be, in plain words: priority 1e300 was "json: cannot unmarshal
// number 1e300 into Go struct field CreateTaskInput.priority of type int".
func TestWrongArgumentsAreRefusedInPlainWords(t *testing.T) {
	t.Parallel()
	cs := session(t, func(r *http.Request, body map[string]any) (int, string) {
		return 500, `{"error":"no request expected","code":"internal"}`
	})
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"create_task", map[string]any{"title": "x", "priority": json.RawMessage(`1e300`)}, "priority must be a whole number"},
		{"create_task", map[string]any{"title": "x", "priority": 1.5}, "priority must be a whole number"},
		{"create_task", map[string]any{"title": "x", "priority": "high"}, "priority must be a whole number"},
		{"create_task", map[string]any{"title": "x", "blocked_by": []any{1}}, "blocked_by must be a list of strings"},
		{"create_task", map[string]any{"title": "x", "metadata": []any{1}}, "metadata must be a JSON object"},
		{"checkout_task", map[string]any{"task_id": "m1", "watch": "yes"}, "watch must be true or false"},
		{"checkout_task", map[string]any{"task_id": "m1", "colour": "red"}, `unknown argument "colour"`},
		{"fail_task", map[string]any{"task_id": "m1"}, "error is required"},
	} {
		res, txt, out := callTool(t, cs, tc.tool, tc.args)
		if !res.IsError || out["code"] != "invalid_arguments" || !strings.Contains(txt, tc.want) {
			t.Errorf("%s %v: %q %v, want invalid_arguments saying %q", tc.tool, tc.args, txt, out, tc.want)
		}
		for _, w := range goWords {
			if strings.Contains(txt, w) {
				t.Errorf("%s %v: %q speaks Go (%q)", tc.tool, tc.args, txt, w)
			}
		}
	}
}
