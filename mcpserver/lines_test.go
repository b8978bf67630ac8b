package mcpserver

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/client"
)

// A line that is JSON but no JSON-RPC message, an empty batch, a batch
// with an element that is no message, a batch after an initialize
// whose protocol version has no batches (2025-06-18 and later), and a
// batch that names one request id twice, and a response with neither
// result nor error are each
// answered with an invalid request (-32600, id null), and the session
// goes on. The SDK's reader ends the session at each of them: the
// process exited, and the agent lost its tools.
func TestServeAnswersMessagesItCannotTakeAndGoesOn(t *testing.T) {
	for _, c := range []struct{ version, bad string }{
		{"2025-06-18", `{}`},
		{"2025-06-18", `{"id":1,"method":"ping"}`},
		{"2025-06-18", `{"jsonrpc":"1.0","id":1,"method":"ping"}`},
		{"2025-06-18", `[]`},
		{"2025-06-18", `[1]`},
		{"2025-06-18", `[{"jsonrpc":"2.0","id":5,"method":"ping"}]`},
		// No method, so a response, but with neither result nor error (or
		// both): the SDK ignored it unanswered.
		{"2025-06-18", `{"jsonrpc":"2.0","id":99}`},
		{"2025-06-18", `{"jsonrpc":"2.0","id":99,"result":{},"error":{"code":1,"message":"x"}}`},
		// A version with batches: one naming a request id twice.
		{"2025-03-26", `[{"jsonrpc":"2.0","id":5,"method":"ping"},{"jsonrpc":"2.0","id":5,"method":"ping"}]`},
	} {
		bad := c.bad
		t.Run(c.version+" "+bad, func(t *testing.T) {
			inR, inW := io.Pipe()
			outR, outW := io.Pipe()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- Serve(ctx, client.New("http://127.0.0.1:1", "ck_test"), inR, outW) }()
			t.Cleanup(func() {
				cancel()
				inW.Close()
				outR.Close()
				select {
				case <-done:
				case <-time.After(5 * time.Second):
				}
			})
			lines := bufio.NewScanner(outR)
			next := func() map[string]any {
				t.Helper()
				got := make(chan map[string]any, 1)
				go func() {
					if !lines.Scan() {
						got <- nil
						return
					}
					var m map[string]any
					_ = json.Unmarshal(lines.Bytes(), &m)
					got <- m
				}()
				select {
				case m := <-got:
					if m == nil {
						t.Fatal("the session ended")
					}
					return m
				case err := <-done:
					t.Fatalf("the server ended: %v", err)
				case <-time.After(5 * time.Second):
					t.Fatal("no answer")
				}
				return nil
			}
			send := func(s string) {
				t.Helper()
				go io.WriteString(inW, s+"\n")
			}
			send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + c.version + `","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
			if m := next(); m["id"] != 1.0 || m["result"] == nil {
				t.Fatalf("initialize: %v", m)
			}
			send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			send(bad)
			m := next()
			if m["id"] != nil || m["error"] == nil || m["error"].(map[string]any)["code"] != -32600.0 {
				t.Fatalf("answer to %s: %v, want an invalid request with id null", bad, m)
			}
			send(`{"jsonrpc":"2.0","id":9,"method":"ping"}`)
			if m := next(); m["id"] != 9.0 || m["result"] == nil {
				t.Fatalf("ping after %s: %v", bad, m)
			}
		})
	}
}
