package lease

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// A task's body, its description and metadata (up to 8 KiB and 4 KiB), is
// an item of its own, so that the task item every transition writes stays
// small: DynamoDB bills a write by the larger of the item's images, in 1 KB
// units, so a body on the task item made every checkout, renewal and
// ending of a 12 KB task cost twelve times what a small one's did.
//
// A body is written once and never changed: its key is the task's id and a
// token of its own ("<task_id>#body#<token>"; '#' cannot occur in an id),
// and the task item names the token (body). Creating a task writes the
// body first, then the task item conditionally; a PATCH of the description
// or metadata writes a new body, then the task item conditioned on the
// version it read, and then deletes the body it replaced. So a task item
// always names a body that is whole, and a write that fails or is cut
// short leaves at most a body nobody names, never a task without its
// body. Such a leftover is deleted when the writer sees its write fail;
// one left by a crash stays, unread (it is in no index).
//
// A task with neither a description nor metadata has no body. A task item
// from before bodies keeps description and metadata on itself until its
// next PATCH of either (or `checkout-server migrate`).

// bodyItem is a task's description and metadata.
type bodyItem struct {
	Key         string `dynamodbav:"task_id"`
	Description string `dynamodbav:"description,omitempty"`
	Metadata    string `dynamodbav:"metadata,omitempty"`
	// Error is an error item's text (below).
	Error string `dynamodbav:"error,omitempty"`
}

func bodyKey(taskID, token string) string { return taskID + "#body#" + token }

// splitBody takes it's description and metadata off the item into a new
// body, and names that body on the item; nil when there is none.
func splitBody(it *taskItem) *bodyItem {
	if it.Description == "" && it.Metadata == "" {
		it.BodyToken = ""
		return nil
	}
	it.BodyToken = newID("")
	b := &bodyItem{Key: bodyKey(it.TaskID, it.BodyToken), Description: it.Description, Metadata: it.Metadata}
	it.Description, it.Metadata = "", ""
	return b
}

// putBody writes a new body.
func (s *Store) putBody(ctx context.Context, b *bodyItem) error {
	item, err := attributevalue.MarshalMap(b)
	if err != nil {
		return err
	}
	if _, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.tasks, Item: item}); err != nil {
		return fmt.Errorf("write the body of %s: %w", b.Key, err)
	}
	return nil
}

// dropBody deletes a body nobody names (any more). It is best effort: a
// body left behind is never read.
func (s *Store) dropBody(ctx context.Context, taskID, token string) {
	if token == "" {
		return
	}
	_, _ = s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &s.tasks, Key: taskKey(bodyKey(taskID, token))})
}

// fillBodies reads the bodies that items name, and the error items of
// their latest failed releases, consistently in one batch, and puts
// their description, metadata and last error on the items. A body that a
// PATCH replaced after an item was read is gone by the time it is asked
// for: such an item gets the body its task names now, read again (its
// other fields stay as read; GetTask reads the whole task again instead).
func (s *Store) fillBodies(ctx context.Context, items ...*taskItem) error {
	gone, err := s.readBodies(ctx, items...)
	for range retries(ctx) {
		if err != nil || len(gone) == 0 {
			return err
		}
		for _, it := range gone {
			cur, err := s.getTask(ctx, it.TaskID)
			if err != nil {
				return err
			}
			if cur != nil {
				it.BodyToken, it.Description, it.Metadata = cur.BodyToken, cur.Description, cur.Metadata
			}
		}
		gone, err = s.readBodies(ctx, gone...)
	}
	if err == nil && len(gone) > 0 {
		err = fmt.Errorf("read the body of %s: replaced again and again: %w", gone[0].TaskID, ErrBusy)
	}
	return err
}

// readBodies is fillBodies' one batch: it returns the items whose body was
// not found (gone).
func (s *Store) readBodies(ctx context.Context, items ...*taskItem) (gone []*taskItem, err error) {
	want := map[string][]*taskItem{}
	var ids []string
	add := func(k string, it *taskItem) {
		if _, dup := want[k]; !dup {
			ids = append(ids, k)
		}
		want[k] = append(want[k], it)
	}
	for _, it := range items {
		if it == nil {
			continue
		}
		if it.BodyToken != "" {
			add(bodyKey(it.TaskID, it.BodyToken), it)
		}
		if it.LastErrorFence != 0 {
			add(errorKey(it.TaskID, it.LastErrorFence), it)
		}
	}
	got, err := batchGet[bodyItem](ctx, s.db, s.tasks, uniqueKeys(ids, taskKey), "", nil)
	if err != nil {
		return nil, fmt.Errorf("read task bodies: %w", err)
	}
	found := make(map[string]bool, len(got))
	for _, b := range got {
		found[b.Key] = true
		for _, it := range want[b.Key] {
			if b.Key == errorKey(it.TaskID, it.LastErrorFence) {
				it.LastError = b.Error
			} else {
				it.Description, it.Metadata = b.Description, b.Metadata
			}
		}
	}
	for _, it := range items {
		if it != nil && it.BodyToken != "" && !found[bodyKey(it.TaskID, it.BodyToken)] {
			gone = append(gone, it)
		}
	}
	return gone, nil
}

// A failed release's error (up to MaxErrorLen) is an item of its own
// too, "<task_id>#error#<fence>", written before the release's ending
// write, which names it (last_error_fence, end_errored): an error on the
// task item would make every later transition of the task cost up to
// two more write units. The change stream reads it into the release's
// event; GET reads it with the body.

func errorKey(taskID string, fence int64) string { return fmt.Sprintf("%s#error#%d", taskID, fence) }

// putError writes the error of the failed release of taskID's lease fence.
func (s *Store) putError(ctx context.Context, taskID string, fence int64, text string) error {
	item, err := attributevalue.MarshalMap(bodyItem{Key: errorKey(taskID, fence), Error: text})
	if err != nil {
		return err
	}
	if _, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.tasks, Item: item}); err != nil {
		return fmt.Errorf("write the error of %s: %w", taskID, err)
	}
	return nil
}

// readError reads the error of the failed release of taskID's lease
// fence ("" when there is none).
func (s *Store) readError(ctx context.Context, taskID string, fence int64) (string, error) {
	b, err := getItem[bodyItem](ctx, s.db, s.tasks, taskKey(errorKey(taskID, fence)))
	if err != nil || b == nil {
		return "", err
	}
	return b.Error, nil
}
