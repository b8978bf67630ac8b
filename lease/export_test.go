package lease

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"

	"github.com/checkout-dev/checkout/lease/schema"
)

// ClockMargin is the clock skew between processes that heartbeats and
// the death cache allow for (alive.go).
const ClockMargin = clockMargin

// SettleAfter is how long after an agent's return from the dead the sweep
// keeps looking for the leases it held when it died (sweep.go).
const SettleAfter = settleAfter

// SpreadClaims makes s's next claims start from a window of w candidates,
// as if its recent claims had lost races to claimers elsewhere.
func SpreadClaims(s *Store, w int) {
	s.claims.mu.Lock()
	defer s.claims.mu.Unlock()
	s.claims.learned, s.claims.learnedAt = float64(w), s.clock()
}

// WaitForGraphLock sets how long s's changes of blocked_by wait for the
// graph's lock before answering ErrBusy.
func WaitForGraphLock(s *Store, d time.Duration) { s.graphWait = d }

// WaitForArchive sets how long a task's first watch on s waits for the
// change stream to archive a freeing hidden from it.
func WaitForArchive(s *Store, d time.Duration) { s.archiveWait = d }

// KeepGrantsFor sets how long s's claims try to keep a grant whose
// write fails before answering ErrGrantNotKept.
func KeepGrantsFor(s *Store, d time.Duration) { s.grantWait = d }

// IsUnwatched reports whether err is a watch's failure that left no watch
// of the agent's on the task (unwatchedError).
func IsUnwatched(err error) bool { return errors.As(err, new(unwatchedError)) }

// OnGraphWalk makes s call f after each level of a cycle walk is read.
func OnGraphWalk(s *Store, f func()) { s.walked = f }

// OnPatch makes s call f with each PATCH's task as patch foresaw it (the
// answer of one whose own answer was lost) and as its write left it.
func OnPatch(s *Store, f func(foreseen, written Task)) { s.patched = f }

// LimitDependents sets how many tasks one task of s may block.
func LimitDependents(s *Store, n int) { s.maxDependents = n }

// LimitRegistryPage sets how many queue names one page of s's queue
// registry holds.
func LimitRegistryPage(s *Store, n int) { s.registryPage = n }

// LimitQueueListingReads sets the Queries of oldest todo tasks a page of
// s's queue listing makes at most (MaxQueueListingReads).
func LimitQueueListingReads(s *Store, n int) { s.queueReads = n }

// PollClaims sets how often s's waiting claims look again when nothing
// wakes them.
func PollClaims(s *Store, d time.Duration) { s.claimPoll = d }

// ClaimsAsleep is how many of s's waiting claims are between two looks.
func ClaimsAsleep(s *Store) int { return int(s.claims.asleep.Load()) }

// ClaimWakes is how many wakes s has sent to its waiting claims (a claim
// waiting on several queues woken for all gets one for each).
func ClaimWakes(s *Store) int { return int(s.claims.wakes.Load()) }

// InboxWhole answers an inbox read as Inbox did when it read all of the
// agent's unread messages: the answer its bounded read must give.
func InboxWhole(ctx context.Context, s *Store, agentID string) ([]Message, error) {
	unread := expression.Key("agent_id").Equal(expression.Value(agentID)).And(expression.Key("message_id").LessThan(expression.Value(tombstonePrefix)))
	items, err := queryAll[messageItem](ctx, s.db, s.inbox, "", unread)
	if err != nil {
		return nil, err
	}
	var hb *heartbeatItem
	if slices.ContainsFunc(items, func(m messageItem) bool { return !m.Acked && m.WatchedAt != 0 }) {
		if hb, err = s.readHeartbeat(ctx, agentID); err != nil {
			return nil, err
		}
	}
	out := make([]Message, 0, len(items))
	for _, m := range items {
		if m.Acked || hb != nil && m.WatchedAt != 0 && (hb.Removed || hb.RegisteredAt > m.WatchedAt) {
			continue
		}
		out = append(out, m.message())
	}
	slices.SortStableFunc(out, func(a, b Message) int { return a.At.Compare(b.At) })
	return out[:min(len(out), MaxInbox)], nil
}

// TablePrefix is the prefix of s's table names.
func TablePrefix(s *Store) string { return strings.TrimSuffix(s.tasks, schema.TasksTable) }

// PageDependentsReads is how many tasks' dependents one listing page
// reads at most.
const PageDependentsReads = pageDependentsReads

// PageBlockerReads is how many blockers' statuses one listing page reads
// at most.
const PageBlockerReads = pageBlockerReads

// TaskWireBound is the most task t can take in a Lambda's answer, as a
// listing page counts it.
func TaskWireBound(t Task) int { return taskWireBound(t) }

// ListedQueuesFor is how old a listing's copy of the queue registry may be.
const ListedQueuesFor = listedQueuesFor

// ReceiptTried is the tasks the receipt of agentID's claim runID lists as
// tried (nil when it has none).
func ReceiptTried(ctx context.Context, s *Store, agentID, runID string) ([]string, error) {
	rec, _, err := s.receipt(ctx, agentID, runID)
	return rec.Tried, err
}

// LateFeedMargin is how long past the feed's settle time s keeps a late
// event's feed time as its task's floor (feed.go).
const LateFeedMargin = lateFeedMargin

// LateFeedFloors is how many tasks s holds a late event's feed time of.
func LateFeedFloors(s *Store) int {
	s.lateFeed.mu.Lock()
	defer s.lateFeed.mu.Unlock()
	return len(s.lateFeed.at)
}

// Unblock takes blocker out of taskID's waiting list as the change stream
// does at blocker's completion (unblocking it when it was the last).
func Unblock(s *Store, taskID, blocker string) error {
	return s.unblock(context.Background(), taskID, blocker)
}

// UnblockDependent is the change stream's pass of blocker's completion to
// dependent over an edge recording named blockers (deps.go).
func UnblockDependent(s *Store, dependent, blocker string, named int) error {
	return s.unblockDependent(context.Background(), edgeItem{Dependent: dependent, Named: named}, blocker)
}

// SendAgain is sendAgain: whether the store sends again, itself, a write
// whose attempt failed with err (sentAgainWith).
func SendAgain(ctx context.Context, r aws.Retryer, attempt int, err error) (again bool, _ error) {
	release, again, err := sendAgain(ctx, r, attempt, err)
	if release != nil {
		_ = release(nil)
	}
	return again, err
}

// Unapplied is unapplied: err tells that the request was not applied.
var Unapplied = unapplied

// TakeNoTurns has s's named claims take no turns, as a version before
// turns did: its attempts sent at the same time each take a task, and
// the give-back settles them (claim.go, "Turns").
func TakeNoTurns(s *Store) { s.noTurns = true }
