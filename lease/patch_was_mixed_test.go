package lease_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
)

// oldVersionPatch writes a PATCH of the title as the version before
// 1a87108 did: patch its id, patch_prev the latest PATCH's, patch_was left
// as it is.
func oldVersionPatch(t *testing.T, e *env, task, id, title string) {
	t.Helper()
	table := e.names.Table("tasks2")
	key := map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: task}}
	out, err := e.db.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &table, Key: key, ConsistentRead: new(true)})
	if err != nil {
		t.Fatal(err)
	}
	prev := out.Item["patch"].(*types.AttributeValueMemberS).Value
	if _, err := e.db.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName: &table, Key: key,
		UpdateExpression:         new("SET #p = :p, #pp = :pp, #t = :t ADD #v :one"),
		ExpressionAttributeNames: map[string]string{"#p": "patch", "#pp": "patch_prev", "#t": "title", "#v": "version"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":p": &types.AttributeValueMemberS{Value: id}, ":pp": &types.AttributeValueMemberS{Value: prev},
			":t": &types.AttributeValueMemberS{Value: title}, ":one": &types.AttributeValueMemberN{Value: "1"},
		},
	}); err != nil {
		t.Fatal(err)
	}
}

// Review r3 of 1a87108: a PATCH of this version sent again across one
// PATCH of the version before (which keeps it in patch_prev and leaves
// patch_was) and then across three of this version (which take
// patch_prev into patch_was, in order) is known as made, not applied
// again over the later titles.
func TestAPatchSentTwiceAcrossAnEarlierVersionsPatchIsKnown(t *testing.T) {
	t.Parallel()
	for _, after := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("%d PATCHes after the earlier version's", after), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.create(t, lease.CreateTaskParams{TaskID: "m"})
			for i := range 3 { // patch_was full before
				title := fmt.Sprintf("before %d", i)
				must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "m", AgentID: "c", Title: &title}))
			}
			var raceErr error
			last := ""
			db := &updateTwiceDB{DB: e.db, name: "patch", race: func() {
				oldVersionPatch(t, e, "m", "OLDVERSION1", "old")
				for i := range after {
					last = fmt.Sprintf("after %d", i)
					if _, raceErr = e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "m", AgentID: "c", Title: &last}); raceErr != nil {
						return
					}
				}
			}}
			s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
			mine := "mine"
			got, err := s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "m", AgentID: "a", Title: &mine})
			if !db.sent.Load() || raceErr != nil {
				t.Fatalf("sent twice %v, race %v", db.sent.Load(), raceErr)
			}
			if err != nil || got.Title != "mine" {
				t.Fatalf("the PATCH sent twice: %+v, %v", got, err)
			}
			if now := e.get(t, "m"); now.Title != last {
				t.Fatalf("title %q after the PATCH sent twice, want the later PATCH's %q: applied again", now.Title, last)
			}
		})
	}
}
