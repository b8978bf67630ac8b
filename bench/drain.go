package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// Drain is one run of agents draining a queue with claim: every agent
// claims, completes what it got and claims again until a claim finds
// nothing.
type Drain struct {
	Agents, Tasks int
	// Mode says how the agents share the store: "one process" (one
	// lease.Store, as the local server) or "one store per agent" (each its
	// own, as Lambda containers that run one claim at a time).
	Mode    string
	Granted int
	// Claims is every claim request, the final 404s included.
	Claims int
	// Writes counts the claims' conditional grant writes, won or lost.
	Writes, Lost int
	Elapsed      time.Duration
	// Requests are the DynamoDB requests of the claims (completions left
	// out).
	Requests Ops
	// Twice lists tasks granted more than once (must be empty).
	Twice []string
	Setup time.Duration
}

// ClaimsPerGrant is claim requests per granted claim.
func (d Drain) ClaimsPerGrant() float64 { return float64(d.Claims) / float64(max(d.Granted, 1)) }

// WritesPerGrant is conditional grant writes per granted claim.
func (d Drain) WritesPerGrant() float64 { return float64(d.Writes) / float64(max(d.Granted, 1)) }

// grantCounter counts the conditional UpdateItems on the tasks table that
// set a lease (the grants), won and lost, and leaves the rest alone.
type grantCounter struct {
	lease.DB
	writes, lost atomic.Int64
}

func (g *grantCounter) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := g.DB.UpdateItem(ctx, in, opt...)
	if strings.HasSuffix(*in.TableName, schema.TasksTable) && isGrant(in) {
		g.writes.Add(1)
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			g.lost.Add(1)
		}
	}
	return out, err
}

// isGrant reports whether an UpdateItem is a grant: the only write that
// sets prev_agent.
func isGrant(in *dynamodb.UpdateItemInput) bool {
	for _, n := range in.ExpressionAttributeNames {
		if n == "prev_agent" {
			return true
		}
	}
	return false
}

// RunDrain creates tasks tasks in one queue (in batches of 25, with
// priorities 0 to 9) and has agents drain it. With perAgent each agent has
// its own lease.Store.
func RunDrain(ctx context.Context, endpoint string, agents, tasks int, perAgent bool) (Drain, error) {
	o, err := NewOurs(ctx, endpoint, nil)
	if err != nil {
		return Drain{}, err
	}
	res := Drain{Agents: agents, Tasks: tasks, Mode: "one process"}
	if perAgent {
		res.Mode = "one store per agent"
	}
	t0 := time.Now()
	for start := 0; start < tasks; start += lease.MaxBatch {
		var batch []lease.CreateTaskParams
		for i := start; i < min(start+lease.MaxBatch, tasks); i++ {
			prio := i % 10
			batch = append(batch, lease.CreateTaskParams{TaskID: fmt.Sprintf("job-%05d", i), Queue: "drain", Priority: &prio})
		}
		if _, err := o.Store.CreateTasks(ctx, batch); err != nil {
			return res, err
		}
	}
	res.Setup = time.Since(t0)
	// The claims' own client: the stream function's requests (on o.DB)
	// and the completions' (their own client) are left out of Requests.
	claimCount := NewCounter()
	gc := &grantCounter{DB: claimCount.Client(endpoint)}
	shared := lease.New(lease.Config{DB: gc, Tables: o.Names, Notifier: nopNotifier{}})
	stores := make([]*lease.Store, agents)
	for i := range stores {
		stores[i] = shared
		if perAgent {
			stores[i] = lease.New(lease.Config{DB: gc, Tables: o.Names, Notifier: nopNotifier{}})
		}
	}
	// The claims' requests alone: completions go through another client.
	completer := lease.New(lease.Config{DB: NewCounter().Client(endpoint), Tables: o.Names, Notifier: nopNotifier{}})
	var mu sync.Mutex
	granted := map[string]int{}
	var claims atomic.Int64
	claimCount.Take()
	start := time.Now()
	err = parallel(ctx, agents, agents, func(i int) error {
		agent := fmt.Sprintf("agent-%02d", i)
		for {
			claims.Add(1)
			c, err := stores[i].Claim(ctx, lease.ClaimParams{AgentID: agent, Queues: []string{"drain"}, Timeout: 10 * time.Minute})
			if errors.Is(err, lease.ErrNoTaskAvailable) {
				return nil
			}
			if err != nil {
				return err
			}
			mu.Lock()
			granted[c.TaskID]++
			mu.Unlock()
			if _, err := completer.Complete(ctx, lease.CompleteParams{TaskID: c.TaskID, AgentID: agent, RunID: c.RunID, Fence: c.Fence}); err != nil {
				return err
			}
		}
	})
	res.Elapsed = time.Since(start)
	res.Requests = claimCount.Take()
	if err != nil {
		return res, err
	}
	res.Claims = int(claims.Load())
	res.Writes, res.Lost = int(gc.writes.Load()), int(gc.lost.Load())
	for id, n := range granted {
		res.Granted += n
		if n > 1 {
			res.Twice = append(res.Twice, id)
		}
	}
	if len(res.Twice) > 0 {
		return res, fmt.Errorf("drain: %d tasks granted twice: %v", len(res.Twice), res.Twice)
	}
	if len(granted) != tasks {
		return res, fmt.Errorf("drain: %d of %d tasks granted", len(granted), tasks)
	}
	return res, nil
}
