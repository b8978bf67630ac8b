package mcpserver

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/checkout-dev/checkout/client"
)

// Metadata reaches the server with its numbers as the agent wrote them:
// an integer past 2^53 was decoded into a float and sent rounded, so the
// server stored another number instead of refusing it as HTTP does.
func TestMetadataNumbersReachTheServerAsSent(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		w.WriteHeader(400)
		io.WriteString(w, `{"error":"metadata holds the integer 9007199254740993, beyond 2^53","code":"invalid_request"}`)
	}))
	t.Cleanup(srv.Close)
	st, ct := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := New(client.New(srv.URL, "ck_test", client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 1}))).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	for _, tool := range []string{"create_task", "update_task"} {
		args := map[string]any{"task_id": "g3", "metadata": map[string]any{"n": jsonNumber("9007199254740993"), "f": jsonNumber("0.1")}}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		if !res.IsError {
			t.Errorf("%s: the server's refusal is not a tool error", tool)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 2 {
		t.Fatalf("%d requests, want 2: %q", len(bodies), bodies)
	}
	for _, b := range bodies {
		if !strings.Contains(b, `"n":9007199254740993`) || !strings.Contains(b, `"f":0.1`) {
			t.Errorf("request body %s: the metadata's numbers are not as sent", b)
		}
	}
}

// jsonNumber is a number written as given in the tool call's arguments.
type jsonNumber string

func (n jsonNumber) MarshalJSON() ([]byte, error) { return []byte(n), nil }
