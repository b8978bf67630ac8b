package lease_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

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

// putKeyHookDB runs hook once, before the first PutItem of a key item
// ("#key#…") is sent: a write slow to land.
type putKeyHookDB struct {
	lease.DB
	hook func()
	done bool
}

func (d *putKeyHookDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if id, ok := in.Item["agent_id"].(*types.AttributeValueMemberS); ok && !d.done && strings.HasPrefix(id.Value, "#key#") {
		d.done = true
		d.hook()
	}
	return d.DB.PutItem(ctx, in, opts...)
}

// Two rotations of one admin's key at once (two servers started with
// different keys, or mint-admin run twice): whichever key the agent ends
// up with, the other must not stay a working key that the agent item no
// longer names, which no later rotation would end. Here the second
// rotation runs whole while the first one's key item is on its way.
func TestConcurrentKeyRotationsLeaveNoKeyBehind(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	if err := e.store.EnsureAgent(c, "admin", "admin", true, "first-admin-key-0000"); err != nil {
		t.Fatal(err)
	}
	db := &putKeyHookDB{DB: e.db, hook: func() {
		if err := e.store.EnsureAgent(c, "admin", "admin", true, "other-admin-key-2222"); err != nil {
			t.Errorf("the other rotation: %v", err)
		}
	}}
	slow := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	slowErr := slow.EnsureAgent(c, "admin", "admin", true, "slow-admin-key-11111")
	if !db.done {
		t.Fatal("no key item was written")
	}
	working := 0
	for _, k := range []string{"slow-admin-key-11111", "other-admin-key-2222"} {
		if _, err := e.store.Authenticate(c, k); err == nil {
			working++
		}
	}
	if working != 1 {
		t.Errorf("%d of the two rotations' keys work (the slow one answered %v), want 1", working, slowErr)
	}
	if err := e.store.EnsureAgent(c, "admin", "admin", true, "third-admin-key-3333"); err != nil {
		t.Fatal(err)
	}
	for _, old := range []string{"first-admin-key-0000", "slow-admin-key-11111", "other-admin-key-2222"} {
		if p, err := e.store.Authenticate(c, old); !errors.Is(err, lease.ErrUnauthorized) {
			t.Errorf("key %s still works after a later rotation: %+v, %v", old, p, err)
		}
	}
}
