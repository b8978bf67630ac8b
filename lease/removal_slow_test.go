package lease_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// stalledEndings is the HTTP client of a store whose writes of task items
// never complete: each waits for its request's context to end.
type stalledEndings struct{ tasks string }

func (d stalledEndings) Do(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".UpdateItem") && r.Body != nil {
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if strings.Contains(string(body), `"`+d.tasks+`"`) {
			<-r.Context().Done()
			return nil, r.Context().Err()
		}
		r.Body = io.NopCloser(strings.NewReader(string(body)))
	}
	return http.DefaultClient.Do(r)
}

// Removing an agent ends the leases it holds in the same request, but an
// agent can hold thousands: the request ran out of its time (25 s on the
// local server, the function's 10 s in AWS) ending them and answered 503
// "the database cannot be reached", though the removal had taken effect
// (its retry then answered 404 agent_not_found). The endings now get half
// of the time the request has left; the removal is answered once they run
// out of it, and the sweep ends the rest: every lease was dead from the
// tombstone on.
func TestARemovalWhoseEndingsRunOutOfTimeIsAnswered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "a", Name: "a"}))
	tasks := []string{"t1", "t2", "t3"}
	e.task(t, tasks...)
	for _, id := range tasks {
		e.checkout(t, id, "a", time.Hour)
	}
	e.caughtUp(t)

	s := lease.New(lease.Config{
		DB:     lease.NewLocalClient(testenv.Endpoint(), func(o *dynamodb.Options) { o.HTTPClient = stalledEndings{e.names.Table(schema.TasksTable)} }),
		Tables: e.names, Now: e.clock.Now,
	})
	rctx, cancel := context.WithTimeout(c, 4*time.Second) // the request's budget
	defer cancel()
	if err := s.RemoveAgent(rctx, "a"); err != nil {
		t.Fatalf("a removal whose lease endings ran out of time: %v; want it answered, the sweep ending the rest", err)
	}
	if rctx.Err() != nil {
		t.Fatal("the removal was answered only once the request's time was up")
	}
	if err := e.store.RemoveAgent(c, "a"); !errors.Is(err, lease.ErrAgentNotFound) {
		t.Errorf("the agent after its removal: %v, want agent_not_found", err)
	}
	for _, id := range tasks {
		if got := e.get(t, id); got.Checkout != nil {
			t.Errorf("task %s still shows a's lease (%+v) after a's removal", id, got.Checkout)
		}
	}
	if res := must[lease.SweepResult](t)(e.store.Sweep(c)); res.AgentDeaths != len(tasks) {
		t.Errorf("the sweep after the removal ended %+v, want the %d leases the removal had no time for", res, len(tasks))
	}
	for i, id := range tasks {
		if ev := deathOf(t, e, id, 1); ev.Reason != "agent removed" {
			t.Errorf("lease %d's ending: %+v, want agent_death, agent removed", i, ev)
		}
	}
}
