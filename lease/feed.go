package lease

import (
	"context"
	"encoding/base64"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/lease/schema"
)

// The fleet feed (GET /api/events) is every archived event, across tasks,
// oldest first. It is an index of the events table (schema.EventsByFeed)
// that the stream function fills as it archives: each event item carries
//
//	feed_shard  <hour bucket YYYYMMDDHH, UTC>#<shard of its task>
//	feed_key    <feed time, 13-digit Unix ms>#<task_id>#<seq, 19 digits>
//
// so an hour of the fleet's writes is spread over the feed shard count's
// partitions, and a reader Queries each shard of each hour it reads and
// merges them. Nothing is scanned.
//
// The feed time is the event's time, but never earlier than the previous
// transition's of the same task (the old image's last_at): a decider whose
// clock is a little behind cannot put a task's events out of order. Both
// come from the change record itself, so a replayed record rewrites the
// same keys and the feed holds each transition exactly once.
//
// A reader only ever reads up to the horizon, now minus FeedSettle: an
// event reaches the feed after the change stream has carried it and the
// index has caught up, and a cursor must never pass an event that is still
// on its way. A cursor is the feed key of the last event read (or the
// horizon it read up to), so following a feed with its cursor sees every
// event once, in order, about FeedSettle after it happened.

// Feed defaults and bounds.
const (
	DefaultFeedSettle = 2 * time.Second
	DefaultFeedWindow = time.Hour // how far back a feed read with neither since nor cursor starts
	// feedBucketsPerRead bounds the hours one read walks, so an empty
	// stretch of the feed costs a bounded number of Queries per page; the
	// cursor then moves past the hours read.
	feedBucketsPerRead = 6
	// feedRawPerRead bounds the events a read with a type filter examines.
	feedRawPerRead = 5000
)

// FeedParams select a page of the fleet feed.
type FeedParams struct {
	// Since is where a feed read starts, inclusive, when no cursor is
	// given (zero: DefaultFeedWindow ago).
	Since time.Time
	// Cursor continues from a page's NextCursor.
	Cursor string
	// Limit is 1 to MaxListLimit (default DefaultListLimit).
	Limit int
	// Types keeps only events of these types (empty: every type).
	Types []EventType
}

// FeedPage is one page of the feed. NextCursor is always set: the feed has
// no end, and following it later returns what happened since.
type FeedPage struct {
	Events     []Event
	NextCursor string
}

// feedShard is the feed partition of an event of taskID at atMS, with n
// feed shards.
func feedShard(taskID string, atMS int64, n int) string {
	return time.UnixMilli(atMS).UTC().Format("2006010215") + "#" + shardOf(taskID, n)
}

func feedKey(atMS int64, taskID string, seq int64) string {
	return fmt.Sprintf("%013d#%s#%019d", atMS, taskID, seq)
}

// feedEnd is the position after every event at atMS: '~' sorts after every
// character an id may hold.
func feedEnd(atMS int64) string { return fmt.Sprintf("%013d#~", atMS) }

var feedPosPattern = regexp.MustCompile(`^[0-9]{13}#(~|[A-Za-z0-9][A-Za-z0-9._:-]{0,127}#[0-9]{19})?$`)

func encodeFeedCursor(pos string) string {
	return "f1." + base64.RawURLEncoding.EncodeToString([]byte(pos))
}

func decodeFeedCursor(c string) (string, error) {
	bad := notIssued()
	if len(c) < 3 || c[:3] != "f1." {
		return "", bad
	}
	b, err := base64.RawURLEncoding.DecodeString(c[3:])
	if err != nil || !feedPosPattern.Match(b) {
		return "", bad
	}
	return string(b), nil
}

func posMS(pos string) int64 {
	ms, _ := strconv.ParseInt(pos[:13], 10, 64)
	return ms
}

// Feed returns a page of the fleet feed, oldest first: every transition
// across tasks from p.Since (or after p.Cursor), up to the horizon.
func (s *Store) Feed(ctx context.Context, p FeedParams) (FeedPage, error) {
	limit := p.Limit
	if limit == 0 {
		limit = DefaultListLimit
	}
	if err := CheckLimit(limit); err != nil {
		return FeedPage{}, err
	}
	if err := CheckEventTypes(p.Types); err != nil {
		return FeedPage{}, err
	}
	if err := CheckCursor(p.Cursor); err != nil {
		return FeedPage{}, err
	}
	now := s.clock()
	var pos string
	switch {
	case p.Cursor != "":
		var err error
		if pos, err = decodeFeedCursor(p.Cursor); err != nil {
			return FeedPage{}, err
		}
	case !p.Since.IsZero():
		pos = feedEnd(max(ms(p.Since)-1, 0)) // after every event before Since
	default:
		pos = feedEnd(ms(now.Add(-DefaultFeedWindow)))
	}
	// Only whole milliseconds: more events may still be written in this one.
	horizon := feedEnd(ms(now.Add(-s.feedSettle)) - 1)
	out := []Event{}
	examined := 0
	for calls := 0; len(out) < limit && pos < horizon && calls < 4 && examined < feedRawPerRead; calls++ {
		need := limit - len(out)
		if len(p.Types) > 0 {
			need = min(max(need, 100), feedRawPerRead-examined)
		}
		items, next, err := s.feedRaw(ctx, pos, horizon, need)
		if err != nil {
			return FeedPage{}, err
		}
		examined += len(items)
		for i, it := range items {
			if len(p.Types) > 0 && !slices.Contains(p.Types, it.Type) {
				continue
			}
			out = append(out, it.event())
			if len(out) == limit {
				next = items[i].FeedKey
				break
			}
		}
		pos = next
	}
	return FeedPage{Events: out, NextCursor: encodeFeedCursor(pos)}, nil
}

// feedRaw returns up to n events of the feed after pos and up to horizon,
// in feed order, walking at most feedBucketsPerRead hours, and the position
// it read up to.
func (s *Store) feedRaw(ctx context.Context, pos, horizon string, n int) ([]eventItem, string, error) {
	var out []eventItem
	hour := time.UnixMilli(posMS(pos)).UTC().Truncate(time.Hour)
	last := time.UnixMilli(posMS(horizon)).UTC().Truncate(time.Hour)
	for b := 0; b < feedBucketsPerRead && !hour.After(last); b, hour = b+1, hour.Add(time.Hour) {
		bucket := hour.Format("2006010215")
		got := make([][]eventItem, s.shards.Feed)
		errs := make([]error, s.shards.Feed)
		var wg sync.WaitGroup
		for sh := range s.shards.Feed {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[sh], errs[sh] = s.feedQuery(ctx, bucket+"#"+strconv.Itoa(sh), pos, horizon, n-len(out))
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return nil, "", err
			}
		}
		var merged []eventItem
		for _, g := range got {
			merged = append(merged, g...)
		}
		slices.SortFunc(merged, func(a, b eventItem) int {
			switch {
			case a.FeedKey < b.FeedKey:
				return -1
			case a.FeedKey > b.FeedKey:
				return 1
			}
			return 0
		})
		// Each shard gave its first n-len(out): the first n-len(out) of
		// their union are the bucket's.
		if len(merged) >= n-len(out) {
			merged = merged[:n-len(out)]
			out = append(out, merged...)
			return out, merged[len(merged)-1].FeedKey, nil
		}
		out = append(out, merged...)
	}
	end := min(feedEnd(ms(hour)-1), horizon)
	return out, max(end, pos), nil
}

// feedQuery reads up to n events of one feed partition after pos and up
// to horizon.
func (s *Store) feedQuery(ctx context.Context, shard, pos, horizon string, n int) ([]eventItem, error) {
	cond := expression.Key("feed_shard").Equal(expression.Value(shard)).
		And(expression.Key("feed_key").Between(expression.Value(pos), expression.Value(horizon)))
	expr, err := expression.NewBuilder().WithKeyCondition(cond).Build()
	if err != nil {
		return nil, err
	}
	index := schema.EventsByFeed
	in := &dynamodb.QueryInput{
		TableName: &s.events, IndexName: &index,
		KeyConditionExpression:    expr.KeyCondition(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
	}
	var out []eventItem
	for len(out) < n {
		in.Limit = int32ptr(n - len(out) + 1) // +1: pos itself may be an event's key
		page, err := s.db.Query(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("query %s %s: %w", s.events, index, err)
		}
		var batch []eventItem
		if err := attributevalue.UnmarshalListOfMaps(page.Items, &batch); err != nil {
			return nil, fmt.Errorf("decode %s: %w", s.events, err)
		}
		for _, it := range batch {
			if it.FeedKey != pos && len(out) < n {
				out = append(out, it)
			}
		}
		if len(page.LastEvaluatedKey) == 0 {
			break
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
	return out, nil
}

// EventTypes lists every event type, as the feed's type filter accepts them.
var EventTypes = []EventType{EventCheckout, EventRenew, EventRelease, EventComplete, EventTimeout, EventAgentDeath, EventForceRelease, EventCancel, EventUnblocked, EventFailed}

func int32ptr(n int) *int32 { v := int32(n); return &v }

// feedFields sets the feed keys of an event archived from a change whose
// old image's last transition was at prevAt, with n feed shards.
func (e *eventItem) feedFields(prevAt int64, n int) {
	at := max(e.At, prevAt)
	e.FeedShard = feedShard(e.TaskID, at, n)
	e.FeedKey = feedKey(at, e.TaskID, e.Seq)
}
