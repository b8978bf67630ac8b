package lease_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/stream"
)

// A sequential model check. One watcher w watches at random
// points (no concurrency) while a and b take and release the task; the
// stream is drained at random points, each batch applied bisected (each
// record alone) and then whole, twice. w must get exactly the freeings
// that are the first after one of its watches.
func TestSequentialWatchesMatchTheModel(t *testing.T) {
	t.Parallel()
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "t")
			h := stream.Handler(lease.New(lease.Config{DB: lease.NewLocalClient(testenv.Endpoint()), Tables: e.names, Now: e.clock.Now, Notifier: e.notes}))
			p := *e.poller
			p.Handle = func(ctx context.Context, ev events.DynamoDBEvent) error {
				for i := range ev.Records {
					if err := h(ctx, events.DynamoDBEvent{Records: ev.Records[i : i+1]}); err != nil {
						return err
					}
				}
				if err := h(ctx, ev); err != nil {
					return err
				}
				return h(ctx, ev)
			}
			r := rand.New(rand.NewPCG(seed, 7))
			var held *lease.Checkout
			freeings := 0
			var fences []int64        // fence of each freeing, in order
			waiting := map[int]bool{} // freeing indexes owed to w
			var log []string
			var step func(k int)
			step = func(k int) {
				switch {
				case k == 0 && held == nil:
					co := e.checkout(t, "t", []string{"a", "b"}[r.IntN(2)], time.Hour)
					held = &co
					log = append(log, fmt.Sprintf("co%d", co.Fence))
				case k <= 1 && held != nil:
					must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: held.AgentID, RunID: held.RunID}))
					fences = append(fences, held.Fence)
					freeings++
					log = append(log, fmt.Sprintf("rel%d", held.Fence))
					held = nil
				case k == 2:
					if r.IntN(2) == 0 {
						if err := e.store.Watch(c, "t", "w"); err != nil {
							t.Fatal(err)
						}
						waiting[freeings] = true
						log = append(log, "watch")
						break
					}
					// A slow watch: ops between its read and its write,
					// and between its write and its settle.
					db := &afterWatchWriteDB{DB: e.db}
					db.before = func() {
						for range r.IntN(4) {
							step([]int{0, 1, 3}[r.IntN(3)])
						}
						log = append(log, "|write")
					}
					db.after = func() {
						for range r.IntN(4) {
							step([]int{0, 1, 3}[r.IntN(3)])
						}
						log = append(log, "|settle")
					}
					s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
					at := freeings
					log = append(log, "slowwatch")
					if err := s.Watch(c, "t", "w"); err != nil {
						t.Fatal(err)
					}
					waiting[at] = true
				default:
					if _, err := p.Poll(c); err != nil {
						t.Fatal(err)
					}
					log = append(log, "drain")
				}
			}
			for range 60 {
				step(r.IntN(4))
			}
			if _, err := p.Poll(c); err != nil {
				t.Fatal(err)
			}
			var want []int64
			for i, f := range fences {
				if waiting[i] {
					want = append(want, f)
				}
			}
			msgs, err := e.store.Inbox(c, "w")
			if err != nil {
				t.Fatal(err)
			}
			got := fencesOf(msgs)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("w inbox fences %v, want %v; steps %v", got, want, log)
			}
		})
	}
}
