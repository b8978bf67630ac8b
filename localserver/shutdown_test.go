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

// inFlight is how many writes of task items the server is making now (a
// claim counts from its start to its answer).
func (s *Server) inFlight() int {
	s.writes.mu.Lock()
	defer s.writes.mu.Unlock()
	return len(s.writes.active)
}

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
	srv, err := Start(context.Background(), Config{Addr: "127.0.0.1:0", DynamoEndpoint: testenv.Endpoint(), TablePrefix: testenv.Prefix()})
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
	deadline := time.Now().Add(10 * time.Second)
	for srv.inFlight() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the claim did not start")
		}
		time.Sleep(10 * time.Millisecond)
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
