package localserver

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/faults"
	"github.com/checkout-dev/checkout/internal/testenv"
)

// A database that stops answering (a stopped dynalite: it accepts
// connections and never replies) gets every API request answered 503
// unavailable with Retry-After once the request's deadline has passed, well
// before the HTTP server's write timeout, rather than the connection cut
// without an answer; the server then serves again as soon as the database
// answers. The stall is a proxy in front of a real dynalite that swallows
// every request; the request timeout is shortened so that the test takes
// seconds (the database client's own timeouts, 10 s an attempt, are not,
// and would make the answer late without the deadline).
func TestDatabaseStallIsAnswered503BeforeTheWriteTimeout(t *testing.T) {
	t.Parallel()
	p, err := faults.Listen(strings.TrimPrefix(testenv.Endpoint(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var logs testenv.Buffer
	const timeout = time.Second
	srv, err := Start(context.Background(), Config{
		Addr: "127.0.0.1:0", DynamoEndpoint: p.URL(), TablePrefix: testenv.Prefix(),
		RequestTimeout: timeout, SweepInterval: -1,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	admin, base := srv.AdminKey(), srv.URL()
	st, body := call(t, "POST", base+"/api/agents", admin, `{"name":"worker","agent_id":"worker"}`)
	if st != 201 {
		t.Fatalf("register: %d %v", st, body)
	}
	worker := body["api_key"].(string)
	for _, c := range []struct{ path, body string }{
		{"/api/tasks", `{"task_id":"held","queue":"q"}`},
		{"/api/tasks", `{"task_id":"free","queue":"q"}`},
		{"/api/tasks/held/checkout", `{"timeout":"1h"}`},
	} {
		if st, body := call(t, "POST", base+c.path, worker, c.body); st/100 != 2 {
			t.Fatalf("POST %s: %d %v", c.path, st, body)
		}
	}

	// The database stalls: new connections are swallowed, and the open
	// ones are cut so that the client has to make new ones.
	p.SetPolicy(func(int64) faults.Fault { return faults.Fault{Kind: faults.Blackhole} })
	p.CutAll()
	client := &http.Client{Timeout: timeout + 4*time.Second} // short of the write timeout's cut
	routes := []struct{ method, path, key, body string }{
		{"POST", "/api/claim", worker, `{"queues":["q"]}`},
		{"POST", "/api/claim", worker, `{"queues":["other"],"wait":"20s"}`},
		{"POST", "/api/tasks", worker, `{"task_id":"new"}`},
		{"POST", "/api/agents", admin, `{"name":"other"}`},
		{"POST", "/api/tasks/free/checkout", worker, `{}`},
		{"PATCH", "/api/tasks/free", worker, `{"priority":7}`},
		{"POST", "/api/heartbeat", worker, `{}`},
		{"POST", "/api/tasks/held/release", worker, `{}`},
		{"GET", "/api/tasks", "ck_a-key-nobody-has-seen-before", ""}, // the key's look-up stalls
	}
	var wg sync.WaitGroup
	for _, c := range routes {
		wg.Go(func() {
			req, err := http.NewRequest(c.method, base+c.path, strings.NewReader(c.body))
			if err != nil {
				t.Error(err)
				return
			}
			req.Header.Set("Authorization", "Bearer "+c.key)
			began := time.Now()
			resp, err := client.Do(req)
			if err != nil {
				t.Errorf("%s %s while the database stalls: no answer after %v: %v", c.method, c.path, time.Since(began).Round(time.Millisecond), err)
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			var m map[string]any
			_ = json.Unmarshal(b, &m)
			if resp.StatusCode != 503 || m["code"] != "unavailable" || resp.Header.Get("Retry-After") == "" {
				t.Errorf("%s %s while the database stalls: %d Retry-After %q %s", c.method, c.path, resp.StatusCode, resp.Header.Get("Retry-After"), b)
			}
		})
	}
	wg.Wait()
	if strings.Contains(logs.String(), `"status":500`) || strings.Contains(logs.String(), `"status":499`) {
		t.Errorf("a 500 or 499 was logged:\n%s", logs.String())
	}

	// The database answers again, and so does the server.
	p.SetPolicy(faults.None)
	if st, body := call(t, "POST", base+"/api/heartbeat", worker, `{}`); st != 200 {
		t.Fatalf("heartbeat once the database answers: %d %v", st, body)
	}
}
