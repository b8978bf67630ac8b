package localserver

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testenv"
)

// Close (SIGINT or SIGTERM in checkout-server) while a claim waits for a
// task: the claim is answered at once, 503 unavailable with Retry-After
// (the agent claims again, from the next server), and Close returns nil.
// Close used to give up after 10 s, shorter than a claim may wait (20 s):
// checkout-server exited 1 with "context deadline exceeded", cutting the
// claim's connection without an answer; and then, waiting long enough, it
// held the stop for the whole wait (longer than many process managers'
// grace period) to answer 404 no_task_available, which tells an agent
// there is no work rather than to come back.
func TestCloseWaitsForTheRequestsInFlight(t *testing.T) {
	t.Parallel()
	// The test waits for the claim's handler to start: the server's
	// writes in flight (the sweep's, the stream's polls) would not tell it
	// from them, and on a loaded machine Close came before the claim was
	// sent (a closed port, or a connection closed unanswered).
	claiming := make(chan struct{}, 1)
	srv, err := Start(context.Background(), Config{Addr: "127.0.0.1:0", DynamoEndpoint: testenv.Endpoint(), TablePrefix: testenv.Prefix(),
		started: func(r *http.Request) {
			if r.URL.Path == "/api/claim" {
				claiming <- struct{}{}
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	answered := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("POST", srv.URL()+"/api/claim", strings.NewReader(`{"queues":["nothing-here"],"wait":"20s"}`))
		req.Header.Set("Authorization", "Bearer "+srv.AdminKey())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("the claim got no answer: %v", err)
			answered <- 0
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable && (resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), `"code":"unavailable"`)) {
			t.Errorf("503 without Retry-After or code unavailable: %s %s", resp.Header, body)
		}
		answered <- resp.StatusCode
	}()
	select {
	case <-claiming:
	case <-time.After(10 * time.Second):
		t.Fatal("the claim did not start")
	}

	if err := srv.Close(); err != nil {
		t.Fatalf("Close: %v; want the claim in flight answered first", err)
	}
	select {
	case st := <-answered:
		if st != http.StatusServiceUnavailable {
			t.Fatalf("the waiting claim was answered %d, want 503 unavailable: the server is stopping", st)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close returned before the claim in flight was answered")
	}
}
