package lease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// slowRemovalDB makes a removal's inbox clear take inboxDelay (an inbox of
// tens of thousands of messages, deleted 25 a request) and runs beforeKeyDelete
// just before the key item is deleted.
type slowRemovalDB struct {
	lease.DB
	inboxDelay      func()
	beforeKeyDelete func()
}

func (d *slowRemovalDB) BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	d.inboxDelay()
	return d.DB.BatchWriteItem(ctx, in, opts...)
}

func (d *slowRemovalDB) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	if id, ok := in.Key["agent_id"].(*types.AttributeValueMemberS); ok && strings.HasPrefix(id.Value, "#key#") {
		d.beforeKeyDelete()
	}
	return d.DB.DeleteItem(ctx, in, opts...)
}

// ReRegisterAfter exists so that a removed agent's key, which the AWS
// authorizer may keep passing for its cache time after the last look-up
// that found it, cannot act as a new agent registered under the same id.
// That look-up can happen as late as just before the removal deletes the
// key item, which comes after the inbox is cleared; the hold must
// therefore run from then, not from the tombstone's time (the start of the
// removal). Here the inbox clear takes 5 s and the authorizer reads the key
// just before its deletion: a registration 30 s after the removal started,
// but less than 30 s after that read, must still be refused.
func TestReRegisterHoldCoversTheKeysLastLookup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	const hold = 30 * time.Second
	s := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now, ReRegisterAfter: hold})
	reg := must[lease.Registration](t)(s.RegisterAgent(c, lease.RegisterParams{AgentID: "x", Name: "x"}))
	must[lease.Heartbeat](t)(s.Heartbeat(c, "x", time.Minute))
	// One inbox message, so that the removal clears an inbox.
	msg, err := attributevalue.MarshalMap(map[string]any{"agent_id": "x", "message_id": "m1", "type": "task_available", "task_id": "t", "at": e.clock.Now().UnixMilli()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.PutItem(c, &dynamodb.PutItemInput{TableName: ptr(e.names.Table(schema.InboxTable)), Item: msg}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Second)

	var lastLookup time.Time
	remover := lease.New(lease.Config{DB: &slowRemovalDB{DB: e.db,
		inboxDelay: func() { e.clock.Advance(5 * time.Second) },
		beforeKeyDelete: func() {
			if p, err := s.Authenticate(c, reg.APIKey); err == nil && p.AgentID == "x" {
				lastLookup = e.clock.Now() // the authorizer caches this answer for hold
			}
		},
	}, Tables: e.names, Now: e.clock.Now, ReRegisterAfter: hold})
	if err := remover.RemoveAgent(c, "x"); err != nil {
		t.Fatal(err)
	}
	if lastLookup.IsZero() {
		t.Fatal("the old key was never found before its deletion")
	}
	if _, err := s.Authenticate(c, reg.APIKey); !errors.Is(err, lease.ErrUnauthorized) {
		t.Fatalf("old key after the removal: %v, want unauthorized", err)
	}

	// The authorizer still passes the old key as x until lastLookup+hold.
	e.clock.Advance(lastLookup.Add(hold - time.Second).Sub(e.clock.Now()))
	_, err = s.RegisterAgent(c, lease.RegisterParams{AgentID: "x", Name: "x again"})
	var recent *lease.RemovedRecentlyError
	if !errors.As(err, &recent) {
		t.Fatalf("registering x %v after the old key's last look-up (the authorizer still passes that key as x): err = %v, want a RemovedRecentlyError", hold-time.Second, err)
	}
	if recent.Until.Before(lastLookup.Add(hold)) {
		t.Errorf("may be registered again from %v, before the old key's cached answer ends (%v)", recent.Until, lastLookup.Add(hold))
	}
}
