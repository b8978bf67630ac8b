package lease

import (
	"context"
	"encoding/base64"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
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
// The feed time is when the event was recorded: the time of the write
// that recorded it (the new image's last_at), and never earlier than the
// previous transition's of the same task (the old image's last_at), so a
// decider whose clock is a little behind cannot put a task's events out
// of order. That is the event's own time, but for an ending stamped
// before its write: an agent_death is stamped when the agent died (its
// heartbeat's expiry, or its return when that is not known), while a
// takeover, a cancel or a sweep up to a sweep interval later records it,
// and listing it there would hide it from every follower whose cursor has
// passed that time. Both times come from the change record
// itself, so a replayed record rewrites the same keys and the feed holds
// each transition exactly once. With Config.FeedAtLanding (the functions
// in AWS), the feed time is also never before the second the write landed
// in the table, as its stream record says: a write's time is read before
// it is sent, and one the SDK retried for seconds lands that much later.
//
// A reader only ever reads up to the horizon, now minus FeedSettle: an
// event reaches the feed after the change stream has carried it and the
// index has caught up, and a cursor must never pass an event that is still
// on its way. A cursor is the feed key of the last event read (or the
// position it read up to), so following a feed with its cursor sees every
// event once, about FeedSettle after it happened, in order as long as
// the stream function archives each event, and the index shows it, within
// FeedSettle of its feed time (in AWS, 5 s, less the second a landing
// time may be rounded down by).
//
// # Events archived late
//
// A batch of the change stream that failed (a throttled archive write) is
// retried, maybe long after its writes: listed at their own times, its
// events would be behind the cursors that passed those meanwhile, and no
// follower would see them. So, with Config.FeedAtLanding or FeedLate, an
// event the stream function archives more than FeedSettle/2 after its feed
// time (by the function's clock when it archives the batch's events, after
// the batch's reads: archivedLate) is late, and its feed time is when
// it is archived instead (when its own PutItem is sent: they go one after
// another), ahead of every reader's horizon: a follower sees it, after
// events of other tasks that happened after it, at the archive's time.
// Its feed key then depends on when it was archived, not on the change
// record alone, so a late event is not in the batch's BatchWriteItem but
// written by a PutItem of its own on condition that the event item
// (task_id, seq, whatever its feed keys) is not there: a replay, always
// later and so late too, finds the item archived before, on time or
// late, and leaves it where followers may have read it. An on-time batch
// is one BatchWriteItem as before, and an on-time write that overwrites a
// late one (a replay whose clock reads earlier than the first archive's)
// moves it only while no horizon has reached its transition. The half of
// FeedSettle left covers the index's lag and the readers' clocks behind
// the stream function's. A late PutItem the SDK retries past the other
// half is behind cursors again.
//
// The events of a late event's task after it in the batch are archived
// as late ones too, each put after it, and the process keys the task's
// events of later batches no earlier than it (lateFeedTimes): one that
// happened before the archive, while the stream was held up, and is
// archived on time would otherwise be listed before it. So the feed
// lists a task's events in their order as long as one process archives
// them (in AWS, a shard's next batch may go to another instance of the
// function, which knows no floors). An on-time event raised to its
// task's floor is the same item (the item's key is task_id and seq; the
// feed keys are attributes of it), so a replay that keys it otherwise
// moves it and never lists it twice; and by the clock's rule a replay
// that finds the floor forgotten, a settle time and a margin on, is late
// and leaves it where it is.
//
// The local server reads to its own horizon, having applied the stream
// first, so an event it archives is never behind a cursor of such a read.
// But a read that could not apply the stream (a poll failing, or slower
// than its wait) or whose index lags keeps the settle time, as in AWS, and
// a cursor it hands out may pass the own time of an event still to be
// archived. Such a read first records its horizon (Config.FeedPassed), and
// an event of that time or earlier, archived after, is late: keyed at its
// archive, it is ahead of that cursor
// (TestFeedFollowerSeesAnEventArchivedAfterAHeldUpStream, localserver).
// Lateness is judged by what cursors were handed out, not by the clock,
// which a test may move while the stream waits. A batch judged before
// such a read records its horizon and written after the read (the stream
// coming back in that very moment) can still be behind it.
//
// # How far one page reads
//
// A page reads forward from its start in rounds: one Query per shard of
// the hour bucket the next event may be in, in parallel. A round ends the
// hour (the page moves on to the next one) unless that hour holds more
// events than the page still wants, when the page is full, or, with a type
// filter, the next round reads on in the same hour. A page stops once it
// holds limit events (or pageBytes of them, events.go), reaches the
// horizon, or has made feedRounds rounds. An hour without events costs its
// Queries all the same, and nothing says where the next event is, so a
// page that starts long before it may run out of rounds with no events:
// it then says it is not caught up (CaughtUp false), and its cursor goes
// on from the hours it read. A follower goes on at once while a page is
// not caught up, and waits once one is; an empty page that is not caught
// up is never the end. The simpler rules fail: walking until the first
// event could walk the whole retention (721 hour buckets, 11,536 Queries
// with 16 shards) in one request, and stopping at a fixed walk with
// nothing to tell the follower made an empty page look like the end.
//
// feedQueriesPerRead (768) is the rounds' budget: 48 rounds with the
// default 16 shards, so "since yesterday" at any hour is one page; 768
// with one shard, more than the whole retention; 3 with 256. An empty
// round is 16 empty Queries of the index, 8 read units: a page over empty
// hours is 768 Queries and 384 read units at most (TestFeedReadQueryBound
// measures it). A shard's Query pages on only past 1 MB of events, which
// an empty hour never has.
//
// A start older than the events' retention starts at the retention: TTL
// may have removed anything older (it removes late, so some may remain,
// but not reliably), and every older since or cursor then reads alike.

// Feed defaults and bounds.
const (
	DefaultFeedSettle = 2 * time.Second
	DefaultFeedWindow = time.Hour // how far back a feed read with neither since nor cursor starts
	// feedQueriesPerRead bounds the rounds of one read: see "How far one
	// page reads".
	feedQueriesPerRead = 768
	// feedRawPerRead bounds the events a read with a type filter examines.
	feedRawPerRead = 5000
)

// FeedParams select a page of the fleet feed.
type FeedParams struct {
	// Since is where a feed read starts, inclusive, when no cursor is
	// given (zero: DefaultFeedWindow ago). A time before the events'
	// retention reads from the retention's start.
	Since time.Time
	// Cursor continues from a page's NextCursor, with the Types of the
	// read that handed it out unless Types is given.
	Cursor string
	// Limit is 1 to MaxListLimit (default DefaultListLimit).
	Limit int
	// Types keeps only events of these types (empty: every type).
	Types []EventType
	// Horizon, when set, is where the read stops instead of now less
	// FeedSettle: a time before which the caller knows every transition
	// to be archived (the local server's, which waits for the writes in
	// flight and applies the change stream first). It must not be later
	// than now.
	Horizon time.Time
}

// FeedPage is one page of the feed. NextCursor is always set: the feed has
// no end, and following it later returns what happened since. CaughtUp says
// the page read up to the horizon: nothing more can be read yet. A page
// that is not caught up (full, or out of rounds, with or without events)
// is followed at once.
type FeedPage struct {
	Events     []Event
	NextCursor string
	CaughtUp   bool
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

// A feed cursor is "f1." and the position, base64url, then, for a read
// confined to some event types, "." and those types, comma-separated,
// base64url: a cursor followed alone keeps its read's filter.
func encodeFeedCursor(pos string, types []EventType) string {
	c := "f1." + base64.RawURLEncoding.EncodeToString([]byte(pos))
	if len(types) > 0 {
		names := make([]string, len(types))
		for i, t := range types {
			names[i] = string(t)
		}
		c += "." + base64.RawURLEncoding.EncodeToString([]byte(strings.Join(names, ",")))
	}
	return c
}

func decodeFeedCursor(c string) (pos string, types []EventType, err error) {
	bad := notIssued()
	if len(c) < 3 || c[:3] != "f1." {
		return "", nil, bad
	}
	p, ts, filtered := strings.Cut(c[3:], ".")
	b, err := base64.RawURLEncoding.DecodeString(p)
	if err != nil || !feedPosPattern.Match(b) {
		return "", nil, bad
	}
	if filtered {
		names, err := base64.RawURLEncoding.DecodeString(ts)
		if err != nil || len(names) == 0 {
			return "", nil, bad
		}
		for _, n := range strings.Split(string(names), ",") {
			types = append(types, EventType(n))
		}
		if CheckEventTypes(types) != nil {
			return "", nil, bad
		}
	}
	return string(b), types, nil
}

func posMS(pos string) int64 {
	ms, _ := strconv.ParseInt(pos[:13], 10, 64)
	return ms
}

// Feed returns a page of the fleet feed, oldest first: every transition
// across tasks from p.Since (or after p.Cursor), up to the horizon, in at
// most feedRounds rounds of Queries.
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
	if p.Since.Year() >= 2200 {
		// As far as any time the service takes (tasks.go, not_before);
		// a feed position holds 13 digits of milliseconds.
		return FeedPage{}, invalidField("since", CodeInvalidRequest, "since must be before the year 2200")
	}
	now := s.clock()
	var pos string
	switch {
	case p.Cursor != "":
		var types []EventType
		var err error
		if pos, types, err = decodeFeedCursor(p.Cursor); err != nil {
			return FeedPage{}, err
		}
		if len(p.Types) == 0 {
			p.Types = types // the filter of the read that handed it out
		}
	case !p.Since.IsZero():
		pos = feedEnd(max(ms(p.Since)-1, 0)) // after every event before Since
	default:
		pos = feedEnd(ms(now.Add(-DefaultFeedWindow)))
	}
	// No earlier than the retention's start, inclusive.
	pos = max(pos, feedEnd(ms(now.Add(-s.retention))-1))
	// Only whole milliseconds: more events may still be written in this one.
	horizon := feedEnd(ms(now.Add(-s.feedSettle)) - 1)
	if !p.Horizon.IsZero() && !p.Horizon.After(now) {
		horizon = feedEnd(ms(p.Horizon) - 1)
	}
	out := []Event{}
	examined, size, full := 0, 0, false
	for round := 0; !full && pos < horizon && round < s.feedRounds() && examined < feedRawPerRead; round++ {
		need := limit - len(out)
		if len(p.Types) > 0 {
			need = min(max(need, 100), feedRawPerRead-examined)
		}
		items, next, err := s.feedRound(ctx, pos, horizon, need)
		if err != nil {
			return FeedPage{}, err
		}
		examined += len(items)
		read := pos // the position after the items taken or skipped so far
		for _, it := range items {
			if len(p.Types) > 0 && !slices.Contains(p.Types, it.Type) {
				read = it.FeedKey
				continue
			}
			// At most limit events, and pageBytes of them (see fitPage).
			if size += eventWireBound(it); size > pageBytes && len(out) > 0 {
				next, full = read, true
				break
			}
			out = append(out, it.event())
			read = it.FeedKey
			if len(out) == limit {
				next, full = read, true
				break
			}
		}
		pos = next
	}
	return FeedPage{Events: out, NextCursor: encodeFeedCursor(pos, p.Types), CaughtUp: pos >= horizon}, nil
}

// feedRounds is how many hours one read may Query: feedQueriesPerRead
// Queries, at least one hour's.
func (s *Store) feedRounds() int { return max(1, feedQueriesPerRead/s.shards.Feed) }

// feedHourAfter is the hour bucket of the first event after pos.
func feedHourAfter(pos string) time.Time {
	at := posMS(pos)
	if strings.HasSuffix(pos, "#~") {
		at++ // pos is after every event of its millisecond
	}
	return time.UnixMilli(at).UTC().Truncate(time.Hour)
}

// feedRound returns up to n events of the feed after pos and up to
// horizon, in feed order, from the hour bucket of the first event after
// pos (one Query per shard), and the position it read up to: the last
// event's when it returns n, else the end of that hour or the horizon.
func (s *Store) feedRound(ctx context.Context, pos, horizon string, n int) ([]eventItem, string, error) {
	hour := feedHourAfter(pos)
	bucket := hour.Format("2006010215")
	got := make([][]eventItem, s.shards.Feed)
	errs := make([]error, s.shards.Feed)
	var wg sync.WaitGroup
	for sh := range s.shards.Feed {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[sh], errs[sh] = s.feedQuery(ctx, bucket+"#"+strconv.Itoa(sh), pos, horizon, n)
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
	slices.SortFunc(merged, func(a, b eventItem) int { return strings.Compare(a.FeedKey, b.FeedKey) })
	// Each shard gave its first n: the first n of their union are the
	// bucket's.
	if len(merged) >= n {
		merged = merged[:n]
		return merged, merged[n-1].FeedKey, nil
	}
	end := min(feedEnd(ms(hour.Add(time.Hour))-1), horizon)
	return merged, max(end, pos), nil
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

// landed is the feed time no event of ch may be keyed before: when its
// write landed (its stream record's whole second, rounded down, so never
// later than the write), with Config.FeedAtLanding; 0 otherwise.
func (s *Store) landed(ch Change) int64 {
	if !s.feedLanded || ch.Landed.IsZero() {
		return 0
	}
	return ch.Landed.UnixMilli()
}

// archivedLate says whether an event of feed time atMS archived at now is
// late (see "Events archived late"): with Config.FeedAtLanding or
// FeedLate, more than half the settle time after it; with FeedPassed, at
// or before the time it says cursors may have passed.
func (s *Store) archivedLate(atMS int64, now time.Time) bool {
	if s.feedPassed != nil {
		return atMS <= s.feedPassed()
	}
	return s.feedLate && ms(now)-atMS > (s.feedSettle/2).Milliseconds()
}

// FeedHorizon is where a read of the feed that names no Horizon stops if
// made now: the feed's settle time before now.
func (s *Store) FeedHorizon() time.Time { return s.clock().Add(-s.feedSettle) }

// feedFields sets the feed keys of an event archived from a change
// recorded at recordedAt (the later of the old and new images' last_at,
// and of when it landed: Store.landed), with n feed shards.
func (e *eventItem) feedFields(recordedAt int64, n int) {
	at := max(e.At, recordedAt)
	e.FeedShard = feedShard(e.TaskID, at, n)
	e.FeedKey = feedKey(at, e.TaskID, e.Seq)
}

// lateFeedMargin is how long, past the feed's settle time, a process
// keeps the feed time of a late event it archived as its task's floor
// (lateFeedTimes).
const lateFeedMargin = time.Minute

// lateFeedTimes holds, per task, the latest feed time this process keyed
// a late event of the task at: the task's events archived after it are
// keyed no earlier, so that one that happened before the late one's
// archive (while the stream was held up) and is archived on time in a
// later batch, at its own time, is not listed before it.
//
// A floor is forgotten once the settle time and lateFeedMargin have
// passed it. By then the clock's rule (Config.FeedLate) keys every event
// of the task later anyway: one judged on time is at most half the
// settle time old, so after the floor, and one judged late is keyed at
// its archive, after it too. The local server's rule (Config.FeedPassed)
// judges by the horizons its reads handed out, not by the clock: an
// event after those is on time however long the stream held it up, so
// one held past the margin is keyed at its own time, before the late
// event, unless a read that could not apply the stream first, made a
// settle time after the floor or later, has made it late.
type lateFeedTimes struct {
	mu sync.Mutex
	at map[string]int64 // task id -> feed time, Unix ms
}

// floor is the feed time no event of taskID may be keyed before (0:
// none).
func (l *lateFeedTimes) floor(taskID string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.at[taskID]
}

// keyed records that a late event of taskID was keyed at atMS.
func (l *lateFeedTimes) keyed(taskID string, atMS int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.at == nil {
		l.at = map[string]int64{}
	}
	l.at[taskID] = max(l.at[taskID], atMS)
}

// forget drops the floors at or before upToMS.
func (l *lateFeedTimes) forget(upToMS int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	maps.DeleteFunc(l.at, func(_ string, at int64) bool { return at <= upToMS })
}
