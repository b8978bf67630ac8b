package lease_test

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// seeded is a message seedMessages writes: a lease_lost one when lost,
// else a task_available one, made at at (Unix ms), about task t<n>.
type seeded struct {
	lost      bool
	at        int64
	n         int
	acked     bool
	watchedAt int64
}

// seedMessages writes msgs straight into agentID's inbox.
func (e *env) seedMessages(t testing.TB, agentID string, msgs []seeded) {
	t.Helper()
	table := e.names.Table(schema.InboxTable)
	ttl := fmt.Sprint(epoch.Add(7 * 24 * time.Hour).Unix())
	var reqs []types.WriteRequest
	for i, m := range msgs {
		task := fmt.Sprintf("t%05d", m.n)
		id, typ, reason := fmt.Sprintf("%013d.%d.%s", m.at, m.n+1, task), lease.MessageTaskAvailable, "release"
		if m.lost {
			id, typ, reason = "lost."+id, lease.MessageLeaseLost, "timeout"
		}
		item := map[string]types.AttributeValue{
			"agent_id": &types.AttributeValueMemberS{Value: agentID}, "message_id": &types.AttributeValueMemberS{Value: id},
			"type": &types.AttributeValueMemberS{Value: typ}, "task_id": &types.AttributeValueMemberS{Value: task},
			"reason": &types.AttributeValueMemberS{Value: reason}, "at": &types.AttributeValueMemberN{Value: fmt.Sprint(m.at)},
			"fence": &types.AttributeValueMemberN{Value: fmt.Sprint(m.n + 1)}, "ttl": &types.AttributeValueMemberN{Value: ttl},
		}
		if m.acked {
			item["acked"] = &types.AttributeValueMemberBOOL{Value: true}
		}
		if m.watchedAt != 0 {
			item["watched_at"] = &types.AttributeValueMemberN{Value: fmt.Sprint(m.watchedAt)}
		}
		reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: item}})
		if len(reqs) == 25 || i == len(msgs)-1 {
			if _, err := e.db.BatchWriteItem(ctx(t), &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{table: reqs}}); err != nil {
				t.Fatal(err)
			}
			reqs = nil
		}
	}
}

// An inbox read reads each kind of message only until it has the MaxInbox
// oldest it shows, and answers what a read of every unread message did:
// the same messages in the same order, however the kinds interleave, share
// milliseconds, or hide messages the read skips (deleted by a deletion cut
// short, or a removed agent's).
func TestABoundedInboxReadAnswersWhatAWholeReadDid(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	at := epoch.UnixMilli()
	registered := at + 10_000
	// "again" was removed and registered again: messages watched before
	// that are the removed agent's.
	if _, err := e.db.PutItem(c, &dynamodb.PutItemInput{TableName: aws.String(e.names.Table(schema.HeartbeatsTable)), Item: map[string]types.AttributeValue{
		"agent_id": &types.AttributeValueMemberS{Value: "again"}, "expires_at": &types.AttributeValueMemberN{Value: fmt.Sprint(at + 60_000)},
		"last_at": &types.AttributeValueMemberN{Value: fmt.Sprint(registered)}, "alive_since": &types.AttributeValueMemberN{Value: fmt.Sprint(registered)},
		"registered_at": &types.AttributeValueMemberN{Value: fmt.Sprint(registered)},
	}}); err != nil {
		t.Fatal(err)
	}
	var again, lostFirst, few []seeded
	for i := range 2500 {
		// task_available two a millisecond, the first 400 deleted (more
		// than a page's worth past the first), every 5th the removed
		// agent's; lease_lost three a millisecond from 300 ms on, every
		// 7th deleted, every 4th the removed agent's.
		again = append(again,
			seeded{at: at + int64(i/2), n: i, acked: i < 400, watchedAt: []int64{registered - 1, registered + 1, 0, registered, registered + 2}[i%5]},
			seeded{lost: true, at: at + 300 + int64(i/3), n: i, acked: i%7 == 3, watchedAt: []int64{registered - 1, registered, registered + 1, 0}[i%4]})
		// Every lease_lost message older than the task_available ones.
		lostFirst = append(lostFirst, seeded{at: at + 5000 + int64(i), n: i, watchedAt: at}, seeded{lost: true, at: at + int64(i), n: i, acked: i%3 == 0})
	}
	for i := range 300 {
		few = append(few, seeded{at: at + int64(i), n: i, acked: i%2 == 0}, seeded{lost: true, at: at + int64(i), n: i, watchedAt: at})
	}
	for _, tc := range []struct {
		agentID string
		msgs    []seeded
		lost    int // how many of the answer are lease_lost
	}{
		{"again", again, -1},
		{"lost-first", lostFirst, lease.MaxInbox},
		{"few", few, 300},
	} {
		e.seedMessages(t, tc.agentID, tc.msgs)
		want := must[[]lease.Message](t)(lease.InboxWhole(c, e.store, tc.agentID))
		got := must[[]lease.Message](t)(e.store.Inbox(c, tc.agentID))
		if !reflect.DeepEqual(got, want) {
			for i := range min(len(got), len(want)) {
				if !reflect.DeepEqual(got[i], want[i]) {
					t.Fatalf("inbox of %s: %d messages, want %d; message %d is %+v, want %+v", tc.agentID, len(got), len(want), i, got[i], want[i])
				}
			}
			t.Fatalf("inbox of %s: %d messages, want %d", tc.agentID, len(got), len(want))
		}
		lost := 0
		for _, m := range got {
			if m.Type == lease.MessageLeaseLost {
				lost++
			}
		}
		t.Logf("inbox of %s: %d messages, %d of them lease_lost", tc.agentID, len(got), lost)
		if tc.lost >= 0 && lost != tc.lost || tc.lost < 0 && (lost == 0 || lost == len(got) || len(got) != lease.MaxInbox) {
			t.Fatalf("inbox of %s: %d messages, %d lease_lost: not the case this test means to cover", tc.agentID, len(got), lost)
		}
	}
}

// An inbox read costs about what MaxInbox unread messages of each kind
// cost, however many more the agent leaves unread: an agent that never
// deletes its task_available messages (a watcher that reacts to some, the
// Go client's WorkOn helpers) used to pay for all of them, up to 7 days'
// worth, on every read (CheckLossEvery, the CLI, MCP's read_inbox).
func TestAnInboxReadCostsTheMessagesItAnswers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	at := epoch.UnixMilli()
	seed := func(agentID string, n int) {
		var msgs []seeded
		for i := range n {
			msgs = append(msgs, seeded{at: at + int64(i), n: i}, seeded{lost: true, at: at + int64(i), n: i})
		}
		e.seedMessages(t, agentID, msgs)
	}
	seed("full", lease.MaxInbox)
	seed("busy", 3*lease.MaxInbox)
	meter := testenv.NewMeter(t, e.names.Prefix)
	read := func(agentID string) float64 {
		t.Helper()
		meter.Take()
		e.count.Take()
		if msgs := must[[]lease.Message](t)(e.store.Inbox(c, agentID)); len(msgs) != lease.MaxInbox {
			t.Fatalf("inbox of %s: %d messages, want %d", agentID, len(msgs), lease.MaxInbox)
		}
		if n := e.count.Count("GetItem"); n > 0 {
			t.Errorf("inbox of %s: %d GetItem, want none: no message needs the heartbeat", agentID, n)
		}
		return meter.Take().Total().Read
	}
	full, busy := read("full"), read("busy")
	t.Logf("inbox read with %d unread messages of each kind: %g read units; with %d: %g", lease.MaxInbox, full, 3*lease.MaxInbox, busy)
	if busy > full+2 {
		t.Fatalf("an inbox read with %d unread messages of each kind costs %g read units, with %d %g: want about the same", 3*lease.MaxInbox, busy, lease.MaxInbox, full)
	}
}
