package mcpserver

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/checkout-dev/checkout/lease"
)

// The tools state the service's limits and defaults as package lease does:
// no placeholder is left unfilled, and the list limit a tool applies when
// none is given is the service's default.
func TestDescriptionsStateTheServicesLimits(t *testing.T) {
	var asked []string
	cs := session(t, func(r *http.Request, _ map[string]any) (int, string) {
		asked = append(asked, r.URL.RawQuery)
		return 200, `{"tasks":[],"next_cursor":null}`
	})
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	limit := strconv.Itoa(lease.DefaultListLimit)
	for _, tool := range res.Tools {
		text := tool.Description
		for _, s := range []any{tool.InputSchema, tool.OutputSchema} {
			b, _ := json.Marshal(s)
			text += string(b)
		}
		if strings.Contains(text, "{default_") || strings.Contains(text, "{max_") || strings.Contains(text, "{min_") {
			t.Errorf("%s has an unfilled placeholder: %s", tool.Name, text)
		}
		if tool.Name == "list_tasks" && !strings.Contains(tool.Description, "(default "+limit+")") {
			t.Errorf("list_tasks does not give the default limit %s: %s", limit, tool.Description)
		}
	}
	callTool(t, cs, "list_tasks", map[string]any{})
	if len(asked) != 1 || !strings.Contains(asked[0], "limit="+limit) {
		t.Fatalf("list_tasks without a limit asked %q, want limit=%s", asked, limit)
	}
}
