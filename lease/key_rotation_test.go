package lease_test

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/lease"
)

// deleteFailsDB fails every DeleteItem, as a throttled or cut-off request
// would.
type deleteFailsDB struct{ lease.DB }

var errDeleteFailed = errors.New("dynamodb: connection reset")

func (deleteFailsDB) DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	return nil, errDeleteFailed
}

// Rotating an admin key (mint-admin run again, or the local server started
// with a new CHECKOUT_ADMIN_KEY) must end the old key even when the first
// attempt fails part way and is run again: the old key may have leaked,
// which is why it is rotated. Before, the agent item was given the new
// key's hash before the old key's item was deleted, so a rotation whose
// delete failed forgot the old key, and the next rotation deleted only the
// failed one's: the old key stayed an admin's for ever.
func TestKeyRotationFailingPartWayEndsTheOldKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	if err := e.store.EnsureAgent(c, "admin", "admin", true, "leaked-admin-key-123"); err != nil {
		t.Fatal(err)
	}
	failing := lease.New(lease.Config{DB: deleteFailsDB{e.db}, Tables: e.names, Now: e.clock.Now})
	if err := failing.EnsureAgent(c, "admin", "admin", true, "second-admin-key-456"); err == nil {
		t.Fatal("a rotation whose deletes fail reported success")
	}
	if err := e.store.EnsureAgent(c, "admin", "admin", true, "third-admin-key-789"); err != nil {
		t.Fatalf("rotate again: %v", err)
	}
	for _, old := range []string{"leaked-admin-key-123", "second-admin-key-456"} {
		if p, err := e.store.Authenticate(c, old); !errors.Is(err, lease.ErrUnauthorized) {
			t.Errorf("key %s still works after the rotation: %+v, %v", old, p, err)
		}
	}
	if p := must[lease.Principal](t)(e.store.Authenticate(c, "third-admin-key-789")); p.AgentID != "admin" || !p.Admin {
		t.Fatalf("new key: %+v", p)
	}
}
