package localserver

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testenv"
)

// A read that applies the change stream first (a trail, the queue counts,
// an inbox) waits at most catchUpWait for it, and then answers with what
// is applied. It waited for its turn behind the poll in flight without a
// bound: after an agent holding 10,000 leases died, the poll applying
// their endings held every such read for 30 to 47 s, past the request's
// 25 s budget and the connection's 30 s write timeout, so that clients got
// no answer at all.
func TestAReadBehindALongPollAnswersWithWhatIsApplied(t *testing.T) {
	t.Parallel()
	srv, err := Start(context.Background(), Config{Addr: "127.0.0.1:0", DynamoEndpoint: testenv.Endpoint(), TablePrefix: testenv.Prefix()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	// A poll in flight that does not end while the reads are made.
	to := srv.changes.consequences
	if err := to.lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer to.unlock()

	c := &http.Client{Timeout: 4 * catchUpWait}
	for _, path := range []string{"/api/queues", "/api/inbox", "/api/tasks/none/events"} {
		req, _ := http.NewRequest("GET", srv.URL()+path, nil)
		req.Header.Set("Authorization", "Bearer "+srv.AdminKey())
		start := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			t.Errorf("GET %s behind a poll in flight: %v after %v; want an answer with what is applied", path, err, time.Since(start).Round(time.Millisecond))
			continue
		}
		resp.Body.Close()
		if resp.StatusCode >= 500 {
			t.Errorf("GET %s behind a poll in flight: %d; want an answer with what is applied", path, resp.StatusCode)
		}
	}
}
