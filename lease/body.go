package lease

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
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
// body. Such a leftover is deleted when the writer sees its write refused,
// or its put of the body fail (which may have applied all the same: no
// task write has named it yet, nor will); one left by a crash stays,
// unread (it is in no index), until `checkout-server bodies` deletes it
// (DeleteStrayBodies, stray_bodies.go: a body carries its time of
// writing, written_at, so that one being written is not taken for one
// left). These deletes, like the one of a replaced
// body, are made with a context of their own: a caller who hung up after
// its write applied leaves nothing behind.
//
// A task write that DynamoDB refused outright, its only sending answered
// 400 for other than its condition (an invalid request, access denied,
// throttling), did not apply and never will: its body is deleted (refused).
//
// A task write that fails otherwise (the caller hung up, a timeout, a 5xx
// after the SDK's retries) does not say whether it applied, and it may
// still land later, sent before the answer was given up on. Deleting
// the body then could leave a task naming none; keeping it leaves one
// nobody names. So the writer first decides the write, with a context of
// its own (the caller's may be cancelled), and deletes the body only
// when no write can ever name it:
//
//   - A PATCH's write is conditioned on the version it read and on its
//     own id (patch) not being voided; applied, it moves the version on,
//     and a version never goes back. The writer voids it: one write, ADD
//     its id to void_patches, conditioned on that version, moving none.
//     If it applies, the PATCH's write had not, and now never will
//     (voided while the version stays; past it once it moves): the body
//     is deleted. If it fails, the version has moved on: the PATCH's
//     write applied if the task names its body (kept); otherwise it
//     never can apply, or it did and a later PATCH has replaced the
//     body (deleted). Either way the body the PATCH replaced is deleted
//     unless the task still names it. Each PATCH's write removes the
//     set, and the void is conditioned on the set holding fewer than
//     maxVoided ids, so that PATCHes lost in a row cannot grow the item
//     past its kilobyte: one refused on that, the version unmoved, leaves
//     the write undecided and its body kept. The set keeps the version
//     its ids were voided at (void_at), since other writes (a checkout, a
//     release) move the version without clearing it: ids of an earlier
//     version, whose writes can never apply, are replaced by the next
//     void (a second write, then), so only PATCHes lost at one version
//     fill it.
//   - A create's put is conditioned on no task with its id, and task
//     items are never deleted. The writer sends the same put again: it
//     applies (the task names the body), or it finds the task, which is
//     this create's when the first put applied (its made id says so:
//     either way the create is answered as made) or another's, which can
//     never become this one (the body is deleted).
//
// A PATCH's write that the SDK sent again (its first answer lost: sends.go)
// and whose second sending was refused knows its own write by its id on
// the task, or by its new body named there; once another PATCH of the
// description has landed on it, by the body named now, which keeps the
// id of the PATCH whose write it followed, or by its new body gone, which
// only a PATCH that replaced it deletes (replacedOwn).
//
// Nothing can make a body named after it was deleted; nothing is
// deleted that a task names or may still name (one gone all the same, by
// hand or by a bug, is read empty: lostBody). This costs one write,
// and only on such an error; a deciding write that itself fails so
// leaves the body, as a crash would (DeleteStrayBodies deletes it). There
// is no TTL on bodies: clearing one once named would cost a write of the
// body (up to 12 KB) on every change of it.
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
	// Follows is the id of the PATCH whose write the task held when the
	// PATCH that wrote this body read it (replacedOwn).
	Follows string `dynamodbav:"follows,omitempty"`
	// WrittenAt is when the body was written (Unix ms; none on a body
	// written before it was kept): a body no task names is deleted
	// once it is old (DeleteStrayBodies).
	WrittenAt int64 `dynamodbav:"written_at,omitempty"`
}

func bodyKey(taskID, token string) string { return taskID + "#body#" + token }

// splitBody takes it's description and metadata off the item into a new
// body written at (Unix ms), and names that body on the item; nil when
// there is none.
func splitBody(it *taskItem, at int64) *bodyItem {
	if it.Description == "" && it.Metadata == "" {
		it.BodyToken = ""
		return nil
	}
	it.BodyToken = writeID()
	b := &bodyItem{Key: bodyKey(it.TaskID, it.BodyToken), Description: it.Description, Metadata: it.Metadata, WrittenAt: at}
	it.Description, it.Metadata = "", ""
	return b
}

// putBody writes a new body. A put that fails may still have applied (its
// answer lost: the caller hung up, a timeout); no task write has named
// the body yet, nor will, so it is deleted.
func (s *Store) putBody(ctx context.Context, b *bodyItem) error {
	item, err := attributevalue.MarshalMap(b)
	if err != nil {
		return err
	}
	if _, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.tasks, Item: item}); err != nil {
		s.deleteBody(ctx, b.Key)
		return fmt.Errorf("write the body of %s: %w", b.Key, err)
	}
	return nil
}

// nameVoided is the task's set of PATCH ids whose writes their writers
// voided (settlePatchBody).
var nameVoided = expression.Name("void_patches")

// nameVoidAt is the version at which they were voided: ids of an earlier
// version make way for a new one.
var nameVoidAt = expression.Name("void_at")

// settleTimeout bounds the deciding of a write whose outcome was lost.
const settleTimeout = 5 * time.Second

// settleContext is ctx's values without its cancellation (the caller may
// have hung up), for settleTimeout.
func settleContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
}

// maxVoided bounds the PATCH ids a task item holds voided: only an
// applied PATCH clears them, and a run of PATCHes whose writes were lost
// would otherwise grow the item without bound, past the kilobyte a
// transition's write is billed by.
const maxVoided = 4

// settlePatchBody decides a PATCH's write that failed with an error other
// than a refused condition (see above), and deletes the bodies no task
// can name any more: the new one (token) unless the task names it, and
// the one it replaced (old) once the task names another. version is the
// version the PATCH read, patchID its id. With maxVoided ids voided at
// that version already, the write stays undecided and its body is left;
// ids voided at an earlier version are replaced.
func (s *Store) settlePatchBody(ctx context.Context, taskID string, version int64, patchID, old, token string) {
	if token == "" && old == "" {
		return
	}
	ctx, cancel := settleContext(ctx)
	defer cancel()
	pin := nameVersion.Equal(expression.Value(version))
	if version == 0 {
		pin = expression.AttributeNotExists(nameVersion)
	}
	ids := expression.Value(&types.AttributeValueMemberSS{Value: []string{patchID}})
	at := expression.Value(version)
	// Added to the ids voided at this version (or kept from before
	// void_at), while there is room.
	same := expression.Or(expression.AttributeNotExists(nameVoidAt), nameVoidAt.Equal(at))
	room := expression.Or(expression.AttributeNotExists(nameVoided), nameVoided.Size().LessThan(expression.Value(maxVoided)))
	cur, voided, err := s.write(ctx, taskID, terms{pin, same, room}, expression.Add(nameVoided, ids).Set(nameVoidAt, at), types.ReturnValueNone)
	if err == nil && !voided && cur != nil && cur.Version == version && cur.VoidAt != nil && *cur.VoidAt != version {
		// Ids voided at an earlier version, whose writes can never apply
		// now: this one's replace them.
		stale := nameVoidAt.Equal(expression.Value(*cur.VoidAt))
		cur, voided, err = s.write(ctx, taskID, terms{pin, stale}, expression.Set(nameVoided, ids).Set(nameVoidAt, at), types.ReturnValueNone)
	}
	switch {
	case voided:
		s.dropBody(ctx, taskID, token) // the PATCH never applies: the task names old
	case err != nil || cur == nil || cur.Version == version:
		// Undecided: the void was not written (or the set is full).
	default:
		// The version has moved on: the PATCH applied, or never will;
		// either way the task names what it names for good, and no
		// write can name a body it has left.
		if cur.BodyToken != token {
			s.dropBody(ctx, taskID, token)
		}
		if cur.BodyToken != old {
			s.dropBody(ctx, taskID, old)
		}
	}
}

// refusedWrite is the error of a write that DynamoDB refused outright
// (refused): it did not apply, and never will.
type refusedWrite struct{ error }

func (e refusedWrite) Unwrap() error { return e.error }

// refused says whether err, a write's error after sends sendings, is
// DynamoDB's refusal (400) of its only sending for other than a failed
// condition (an invalid request, a missing table, access denied,
// throttling): that write did not apply. A write sent more than once may
// have applied at an earlier sending, its answer lost.
func refused(err error, sends int32) bool {
	var answer interface{ HTTPStatusCode() int }
	_, failed := conditionFailed(err)
	return sends == 1 && !failed && errors.As(err, &answer) && answer.HTTPStatusCode() == http.StatusBadRequest
}

// settleCreatedBody decides a create's put of it that failed (err) with an
// error other than a refused condition: refused outright, it did not
// apply, and the body is deleted; otherwise by sending it again (see above):
// it returns what putTaskItem would have for the put (nil: created), and
// err when that is still undecided. The task that is found instead is the
// caller's to answer, and the body its to delete.
func (s *Store) settleCreatedBody(ctx context.Context, it taskItem, err error) (*taskItem, error) {
	if errors.As(err, new(refusedWrite)) {
		s.dropBody(ctx, it.TaskID, it.BodyToken) // no put ever names it
		return nil, err
	}
	ctx, cancel := settleContext(ctx)
	defer cancel()
	cur, again := s.putTaskItem(ctx, it)
	switch {
	case again != nil:
		return nil, err
	case cur != nil && cur.MadeBy == it.MadeBy:
		return nil, nil // the first put applied (its id is in no other write)
	}
	return cur, nil
}

// dropBody deletes a body nobody names (any more). It is best effort: a
// body left behind is never read. The caller may have hung up by then
// (after its task write applied, say): the delete is made all the same.
func (s *Store) dropBody(ctx context.Context, taskID, token string) {
	if token != "" {
		s.deleteBody(ctx, bodyKey(taskID, token))
	}
}

// deleteBody deletes the body key, with a context of its own (settleContext).
func (s *Store) deleteBody(ctx context.Context, key string) {
	ctx, cancel := settleContext(ctx)
	defer cancel()
	_, _ = s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &s.tasks, Key: taskKey(key)})
}

// fillBodies reads the bodies that items name, and the error items of
// their latest failed releases, consistently in one batch, and puts
// their description, metadata and last error on the items. A body that a
// PATCH replaced after an item was read is gone by the time it is asked
// for: such an item gets the body its task names now, read again (its
// other fields stay as read; GetTask reads the whole task again instead).
// A body not found that the task, read again, still names at the version
// it was read at is gone for good (lostBody).
func (s *Store) fillBodies(ctx context.Context, items ...*taskItem) error {
	gone, err := s.readBodies(ctx, items...)
	read := make(map[*taskItem]int64, len(gone)) // the version each was read naming its body at
	for _, it := range gone {
		read[it] = it.Version
	}
	for range retries(ctx) {
		if err != nil || len(gone) == 0 {
			return err
		}
		var again []*taskItem
		for _, it := range gone {
			cur, err := s.getTask(ctx, it.TaskID)
			if err != nil {
				return err
			}
			if cur != nil && cur.BodyToken == it.BodyToken && cur.Version == read[it] {
				s.lostBody(ctx, it)
				continue
			}
			if cur != nil {
				it.BodyToken, it.Description, it.Metadata = cur.BodyToken, cur.Description, cur.Metadata
				read[it] = cur.Version
			}
			again = append(again, it)
		}
		gone, err = s.readBodies(ctx, again...)
	}
	if err == nil && len(gone) > 0 {
		err = fmt.Errorf("read the body of %s: replaced again and again: %w", gone[0].TaskID, ErrBusy)
	}
	return err
}

// lostBody gives task it, whose body is gone for good, an empty
// description and metadata, and logs an error. No write of the service
// deletes a body its task names (see above); one gone so was deleted by
// hand, or by a bug, and the task must not fail every read of it and
// every listing page it falls on. A PATCH of its description or metadata
// writes it a new body (UpdateTask).
func (s *Store) lostBody(ctx context.Context, it *taskItem) {
	s.log.ErrorContext(ctx, "task body not found: its description and metadata are read empty until a PATCH sets them",
		"task_id", it.TaskID, "body", bodyKey(it.TaskID, it.BodyToken))
	it.Description, it.Metadata, it.bodyLost = "", "", true
}

// replacedOwn reports whether a later PATCH of the description landed on
// the write of PATCH patchID, sent more than once and refused: then that
// write applied. The body the task names now (it) says so when its PATCH
// read that write (it follows patchID); otherwise the PATCH's own new body
// (token, "" for none), gone, does: only a PATCH that read the task naming
// it deletes it (the PATCH that wrote it has not yet), so a body replaced
// again, or a description cleared (the task names no body), is told too.
// A GetItem each, on that path only. A later PATCH between its write and
// its delete of token says nothing, nor does one that writes no body.
func (s *Store) replacedOwn(ctx context.Context, it *taskItem, patchID, token string) (bool, error) {
	if it.BodyToken != "" && it.BodyToken != token {
		b, err := getItem[bodyItem](ctx, s.db, s.tasks, taskKey(bodyKey(it.TaskID, it.BodyToken)))
		if err != nil || b != nil && b.Follows == patchID {
			return err == nil, err
		}
	}
	if token == "" || it.BodyToken == token {
		return false, nil
	}
	own, err := getItem[bodyItem](ctx, s.db, s.tasks, taskKey(bodyKey(it.TaskID, token)))
	return err == nil && own == nil, err
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
		if it.LastErrorID != 0 {
			add(errorKey(it.TaskID, it.LastErrorID), it)
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
			if b.Key == errorKey(it.TaskID, it.LastErrorID) {
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
// too, "<task_id>#error#<id>", written before the release's ending write,
// which names it (last_error_fence, end_errored). The id is the release's
// own (errorID; items written before it was hold the lease's fence), so
// that of failed releases of one lease racing each other, each writes its
// error apart and the one whose ending wins names its own: a refused one
// changes nothing the task shows. An error on the
// task item would make every later transition of the task cost up to
// two more write units. The change stream reads it into the release's
// event; GET reads it with the body.
//
// Only the error the task names is read: an earlier one, replaced by a
// later failed release (or cleared by one without an error), is read
// again only by the stream, which may archive its release (again) until
// the stream's record of it expires, a day after it was written; the
// trail and the feed show it from the archived event. A failed release
// whose write was refused leaves one no task ever names. Both stay until
// `checkout-server bodies` deletes them (DeleteStrayBodies). The release
// that replaces an error does not delete it (one more request on the
// release), nor does the stream: its other reader (the notices), or its
// own batch sent again, may still read it.

func errorKey(taskID string, id int64) string { return fmt.Sprintf("%s#error#%d", taskID, id) }

// errorID returns a random id for a failed release's error item: 52 bits
// above 2^40, so that it is never a fence, which older error items are
// keyed by, and stays exact as a JSON number.
func errorID() int64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return 1<<40 + int64(binary.BigEndian.Uint64(b[:])%(1<<52))
}

// putError writes the error of a failed release of taskID under id
// (errorID), at (Unix ms).
func (s *Store) putError(ctx context.Context, taskID string, id int64, text string, at int64) error {
	item, err := attributevalue.MarshalMap(bodyItem{Key: errorKey(taskID, id), Error: text, WrittenAt: at})
	if err != nil {
		return err
	}
	if _, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.tasks, Item: item}); err != nil {
		return fmt.Errorf("write the error of %s: %w", taskID, err)
	}
	return nil
}

// readError reads the error item id of taskID ("" when there is none).
func (s *Store) readError(ctx context.Context, taskID string, id int64) (string, error) {
	b, err := getItem[bodyItem](ctx, s.db, s.tasks, taskKey(errorKey(taskID, id)))
	if err != nil || b == nil {
		return "", err
	}
	return b.Error, nil
}
