package mcpserver

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// list_tasks reads on, within the one call, past pages that come short,
// even empty, with a cursor, until it has the tasks asked for or the
// listing ends. It used to answer the empty first page alone.
func TestListTasksReadsPastEmptyPages(t *testing.T) {
	t.Parallel()
	var asked []string
	cs := session(t, func(r *http.Request, _ map[string]any) (int, string) {
		q := r.URL.Query()
		asked = append(asked, q.Get("cursor")+"/"+q.Get("limit"))
		switch q.Get("cursor") {
		case "":
			return 200, `{"tasks":[],"next_cursor":"c1"}`
		case "c1":
			return 200, `{"tasks":[{"task_id":"t1","status":"todo","queue":"zz"}],"next_cursor":"c2"}`
		default:
			return 200, `{"tasks":[{"task_id":"t2","status":"todo","queue":"zz"}],"next_cursor":null}`
		}
	})
	_, txt, out := callTool(t, cs, "list_tasks", map[string]any{"status": "todo", "limit": 5})
	tasks, _ := out["tasks"].([]any)
	if len(tasks) != 2 || out["next_cursor"] != nil || !strings.HasPrefix(txt, "2 task(s)") || strings.Contains(txt, "More tasks") {
		t.Errorf("list_tasks: %v\n%s", out, txt)
	}
	if want := []string{"/5", "c1/5", "c2/4"}; !slices.Equal(asked, want) {
		t.Errorf("asked (cursor/limit) %v, want %v", asked, want)
	}
}

// list_tasks reads at most 10 pages in one call, then answers what it has
// with the cursor to go on from.
func TestListTasksReadsTenPagesAtMost(t *testing.T) {
	t.Parallel()
	n := 0
	cs := session(t, func(*http.Request, map[string]any) (int, string) {
		n++
		return 200, fmt.Sprintf(`{"tasks":[],"next_cursor":"c%d"}`, n)
	})
	_, txt, out := callTool(t, cs, "list_tasks", map[string]any{})
	if n != 10 || out["next_cursor"] != "c10" || !strings.Contains(txt, "call list_tasks with cursor=next_cursor") {
		t.Errorf("%d requests, answer %v\n%s", n, out, txt)
	}
}
