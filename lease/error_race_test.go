package lease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
)

// heldErrorDB holds back the PutItem of a failed release's error: it says
// on reached that one has come, and makes it once go is closed.
type heldErrorDB struct {
	lease.DB
	reached chan struct{}
	goOn    chan struct{}
}

func (d *heldErrorDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if k, _ := in.Item["task_id"].(*types.AttributeValueMemberS); k != nil && strings.Contains(k.Value, "#error#") {
		select {
		case d.reached <- struct{}{}:
		default:
		}
		<-d.goOn
	}
	return d.DB.PutItem(ctx, in, opts...)
}

// Two failed releases of one lease, sent at once with different errors:
// the one refused (404, or answered as a repeat of the other when both
// name the lease) wrote its error to the item the winner's ending names
// ("<task>#error#<fence>", the same for both) after the winner did, so
// the task's last_error, and the release's event in the trail, held the
// loser's error: a refused request changed the task. Each failed release
// now writes its error under an id of its own, which its ending names.
func TestARefusedFailedReleaseLeavesTheWinnersError(t *testing.T) {
	t.Parallel()
	for _, named := range []bool{false, true} {
		name := "unnamed"
		if named {
			name = "named"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.create(t, lease.CreateTaskParams{TaskID: "t", MaxAttempts: new(3), RetryDelay: new(10 * time.Second)})
			co := e.checkout(t, "t", "x", time.Minute)
			release := func(s *lease.Store, text string) (lease.Released, error) {
				p := lease.ReleaseParams{TaskID: "t", AgentID: "x", Outcome: lease.OutcomeFailed, Error: text}
				if named {
					p.RunID = co.RunID
				}
				return s.Release(c, p)
			}
			db := &heldErrorDB{DB: e.db, reached: make(chan struct{}, 1), goOn: make(chan struct{})}
			late := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
			lost := make(chan error, 1)
			go func() {
				_, err := release(late, "the loser's error")
				lost <- err
			}()
			// The late release has read the live lease and is about to
			// write its error; the other release is made whole meanwhile.
			<-db.reached
			must[lease.Released](t)(release(e.store, "the winner's error"))
			close(db.goOn)
			err := <-lost
			switch {
			case named && err != nil:
				t.Fatalf("the late named release: %v; want it answered as a repeat", err)
			case !named && !errors.Is(err, lease.ErrNotCheckedOut):
				t.Fatalf("the late release: %v; want not_checked_out", err)
			}
			if got := e.get(t, "t").LastError; got != "the winner's error" {
				t.Errorf("last_error %q; want the winner's error", got)
			}
			evs := e.events(t, "t")
			if last := evs[len(evs)-1]; last.Type != lease.EventRelease || last.Error != "the winner's error" {
				t.Errorf("the release's archived event: %s with error %q; want the winner's error", last.Type, last.Error)
			}
		})
	}
}
