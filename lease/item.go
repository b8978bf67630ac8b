package lease

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The items as stored. A lease's whole state is on its task item: the live
// lease, the last one an ending ended (endRecord) and the one the latest
// checkout took over (prevRecord); the writes that move it are in store.go.

// taskItem is a task as stored. The lease lives on the task item itself, so
// that one conditional write decides every transition. Times are Unix
// milliseconds.
type taskItem struct {
	TaskID string `dynamodbav:"task_id"`
	Title  string `dynamodbav:"title,omitempty"`
	Status Status `dynamodbav:"status"`
	// StatusShard is the status index's partition key: the status and a
	// shard of the task's (statusShard); none while todo or in_progress.
	StatusShard string `dynamodbav:"status_shard,omitempty"`
	CreatedAt   int64  `dynamodbav:"created_at"`
	CreatedKey  string `dynamodbav:"created_key"`
	StartedAt   int64  `dynamodbav:"started_at,omitempty"`
	CompletedAt int64  `dynamodbav:"completed_at,omitempty"`
	Description string `dynamodbav:"description,omitempty"`
	Queue       string `dynamodbav:"queue,omitempty"`
	// Priority is stored as given; a missing attribute (a task written
	// before queues) is DefaultPriority, see priority().
	Priority *int `dynamodbav:"priority,omitempty"`
	// Metadata is the JSON object as the caller gave it. Description and
	// metadata are kept in the task's body (body.go), whose token is
	// BodyToken; only a task item from before bodies holds them itself.
	Metadata  string `dynamodbav:"metadata,omitempty"`
	BodyToken string `dynamodbav:"body,omitempty"`
	// Version grows by one with every write of the item (Store.update and
	// every other write add to it).
	Version int64 `dynamodbav:"version"`
	// PatchID names the latest PATCH written to the item, and MadeBy the
	// create that made it (kept through every write), so that one sent
	// again by the SDK knows its own write (tasks.go, update.go).
	PatchID string `dynamodbav:"patch,omitempty"`
	MadeBy  string `dynamodbav:"made,omitempty"`
	// PatchWas holds the first patchWasChunk characters of the ids of the
	// patchWasKept PATCHes before the latest, newest first (patchedBy).
	// PatchPrev, the whole id of the one before the latest, is on items
	// an earlier version PATCHed.
	PatchWas  string `dynamodbav:"patch_was,omitempty"`
	PatchPrev string `dynamodbav:"patch_prev,omitempty"`
	// VoidAt is the version at which the PATCH ids in void_patches were
	// voided (settlePatchBody); none on a set voided before it was kept.
	VoidAt *int64 `dynamodbav:"void_at,omitempty"`

	// The claim index's keys. ClaimHome ("<queue>#<shard>") and ClaimKey
	// ("<9-priority>#<created ms>#<task id>") are always present and kept
	// up to date by create and PATCH; ClaimShard, the index's partition
	// key, is a copy of ClaimHome present only while the task is claimable
	// (todo, no lease): the writes that change claimability set it (SET
	// claim_shard = claim_home, a copy the write needs no read for) or
	// REMOVE it.
	ClaimHome  string `dynamodbav:"claim_home,omitempty"`
	ClaimKey   string `dynamodbav:"claim_key,omitempty"`
	ClaimShard string `dynamodbav:"claim_shard,omitempty"`
	// Fence is the fence of the latest grant. It only ever grows, and the
	// task item is never deleted, so it survives every lease.
	Fence int64 `dynamodbav:"fence"`
	// ESeq is the seq of the task's latest audit event.
	ESeq int64 `dynamodbav:"eseq"`

	// The lease, present only while the task is held (or held by a lease
	// that has expired and not been swept yet).
	Holder string `dynamodbav:"holder,omitempty"`
	// HolderName is the holder's name when it is not its id (holderName).
	// Like TimeoutMS, it stays when the lease ends, until the next grant
	// sets or removes it (clearLease).
	HolderName   string `dynamodbav:"holder_name,omitempty"`
	RunID        string `dynamodbav:"run_id,omitempty"`
	LockedAt     int64  `dynamodbav:"locked_at,omitempty"`
	LeaseExpires int64  `dynamodbav:"lease_expires,omitempty"`
	TimeoutMS    int64  `dynamodbav:"timeout_ms,omitempty"`
	Reason       string `dynamodbav:"reason,omitempty"`
	LeaseShard   string `dynamodbav:"lease_shard,omitempty"`
	// LeaseBy is the agent that made the lease's latest transition, its
	// grant or a renewal, when it is not the holder (an admin acting for
	// it): that checkout or renew event's by.
	LeaseBy string `dynamodbav:"lease_by,omitempty"`
	// RenewWrite names the write of the lease's latest renewal (newID),
	// and RenewPrev the one before it, so that a renewal the SDK sent
	// again (its answer lost: sends.go) knows its own, also once another
	// renewal has landed after it (renewedBy). A grant takes them off;
	// an ending leaves them, so that such a renewal also knows its own
	// once the lease it renewed has ended (endedRenewalOf).
	RenewWrite string `dynamodbav:"renew_write,omitempty"`
	RenewPrev  string `dynamodbav:"renew_prev,omitempty"`

	// LeaseSeq is the seq of the lease's checkout event.
	LeaseSeq int64 `dynamodbav:"lease_seq,omitempty"`
	// GrantWrite names the write of the task's latest grant: a grant
	// sent again knows its own by it (grant). A reopen since keeps the
	// grant's attempt on it (splitGrantWrite).
	GrantWrite string `dynamodbav:"grant_write,omitempty"`
	// GrantWas is the task's title, queue and priority at its latest
	// grant, each kept by the first PATCH since that changed it (removed
	// by the next grant): a grant the SDK sent again answers them as they
	// were when it was made. (Versions of 2026-12-06 kept the grant's
	// attempt here too, at a reopen.)
	GrantWas *grantWas `dynamodbav:"grant_was,omitempty"`

	// Watchers maps each watching agent to when it asked (Unix ms). It is
	// bounded by MaxWatchers.
	Watchers map[string]int64 `dynamodbav:"watchers,omitempty"`
	// Watched says whether any agent has watched the task since it was
	// created: the change stream reads a freed task's watches only then
	// (watch.go). A task item from before it has none (nil), and its
	// watches are read at every freeing.
	Watched *bool `dynamodbav:"watched,omitempty"`

	// The work graph (deps.go). BlockedBy is the task's blockers as named;
	// WaitingOn those of them not done when last looked at (a string
	// set, absent when empty): the task is blocked while it is not empty.
	// HasDependents says some task has named this one (its edges are
	// items of the inbox table, "#deps#<task_id>" / dependent).
	BlockedBy     []string `dynamodbav:"blocked_by,omitempty"`
	WaitingOn     []string `dynamodbav:"waiting_on,stringset,omitempty"`
	HasDependents bool     `dynamodbav:"has_dependents,omitempty"`
	// UnblockedBy is the blocker whose completion unblocked the task
	// (unblockedByPatch: a PATCH of blocked_by, made by PatchBy).
	UnblockedBy string `dynamodbav:"unblocked_by,omitempty"`
	PatchBy     string `dynamodbav:"patch_by,omitempty"`
	// CancelBy is who cancelled the task when no lease was on it (the
	// event of that cancel; one that ends a lease records end_by).
	CancelBy string `dynamodbav:"cancel_by,omitempty"`
	// UnblockSeq is the seq of the unblocked event of a checkout that
	// unblocked the task in its grant (checkout.go).
	UnblockSeq int64 `dynamodbav:"unblock_seq,omitempty"`
	// Attempts counts grants since creation or the last reopen; Failures
	// the failed attempts among them (the retry delay's exponent).
	// MaxAttempts and RetryDelayMS are absent on tasks from before the
	// work graph: the defaults (maxAttempts, retryDelay).
	Attempts     int    `dynamodbav:"attempts,omitempty"`
	Failures     int    `dynamodbav:"failures,omitempty"`
	MaxAttempts  int    `dynamodbav:"max_attempts,omitempty"`
	RetryDelayMS *int64 `dynamodbav:"retry_delay_ms,omitempty"`
	// NotBefore (Unix ms) keeps the task from being granted before it.
	NotBefore int64 `dynamodbav:"not_before,omitempty"`
	// ClaimRank is the task's claim_key while it is ready, kept while its
	// claim_key is delayed (none while ready: rank); a task
	// waiting for its not_before has claim_key "~<not_before>#<rank>"
	// instead, which ranks it after the ready ones (claim.go, "Delays").
	ClaimRank string `dynamodbav:"claim_rank,omitempty"`
	// LastErrorID names the error item ("<task_id>#error#<id>") of the
	// latest failed release that carried an error: an id of that release's
	// own (errorID), so that a failed release refused in a race leaves the
	// winner's error named. Its attribute keeps the name of the time the
	// id was the lease's fence, which items written then still hold.
	LastErrorID int64 `dynamodbav:"last_error_fence,omitempty"`
	// LastError is that error's text, read with the body (fillBodies).
	LastError string `dynamodbav:"-"`
	// graph is what fillGraph read of the task's blockers and dependents.
	graph *graphView `dynamodbav:"-"`
	// bodyLost is set when the body the task names is gone for good
	// (lostBody).
	bodyLost bool `dynamodbav:"-"`

	// MigratedAt is set on a task copied from a table of the earlier
	// schema (migrate.go).
	MigratedAt int64 `dynamodbav:"migrated_at,omitempty"`

	// The latest transition: its type (an event type) and time. Every write
	// that moves a lease sets them, and eseq, in the same write.
	LastOp EventType `dynamodbav:"last_op,omitempty"`
	LastAt int64     `dynamodbav:"last_at,omitempty"`
	// PriorAt is the last_at of the transition before the latest one (0
	// for the first): how a reader of the trail tells an event the change
	// stream has yet to archive from one the events' TTL has removed.
	PriorAt int64 `dynamodbav:"prior_at,omitempty"`

	// The last lease that an ending write ended, and the lease the latest
	// checkout took over.
	endRecord
	prevRecord
}

// endRecord is the last lease that an ending write ended (release,
// completion, force release, or the sweep's timeout or agent_death): the
// lease as it was, moved out of the lease attributes by that write, and how
// it ended. It gives the ending's event, and it lets a holder retrying its
// release or completion be answered as its first attempt was.
type endRecord struct {
	EndSeq     int64     `dynamodbav:"end_seq,omitempty"`
	EndType    EventType `dynamodbav:"end_type,omitempty"`
	EndAgent   string    `dynamodbav:"end_agent,omitempty"`
	EndRun     string    `dynamodbav:"end_run,omitempty"`
	EndFence   int64     `dynamodbav:"end_fence,omitempty"`
	EndLocked  int64     `dynamodbav:"end_locked,omitempty"`
	EndExpires int64     `dynamodbav:"end_expires,omitempty"`
	EndAt      int64     `dynamodbav:"end_at,omitempty"`
	// EndVersion is the version a completion found (none: 0; a
	// completion's alone): it left one more, and its repetition is
	// answered with that.
	EndVersion  *int64 `dynamodbav:"end_version,omitempty"`
	EndBy       string `dynamodbav:"end_by,omitempty"`
	EndReason   string `dynamodbav:"end_reason,omitempty"`
	EndLeaseSeq int64  `dynamodbav:"end_lease_seq,omitempty"`
	// EndOutcome is a release's outcome; EndErrored says it carried an
	// error, kept in the error item of EndFence.
	EndOutcome ReleaseOutcome `dynamodbav:"end_outcome,omitempty"`
	EndErrored bool           `dynamodbav:"end_errored,omitempty"`
	// EndWrite names the write of the ending, so that it knows its own
	// when the SDK sent it again (sends.go): a holder's ending that named
	// no lease, a force release, a sweep's ending, and the ending of an
	// ended lease a checkout or PATCH makes (see sentAgain); none for a
	// holder's ending that named its lease, which a repeat of it matches.
	EndWrite string `dynamodbav:"end_write,omitempty"`
}

// prevRecord is the lease a checkout took over (expired, or its holder
// dead), copied by the checkout's own write; prev_agent is absent (NULL on
// items written before 2026-12-06) when the checkout found the task free,
// and so are the lease's other attributes but prev_fence and prev_write
// (replacedLease). With the lease it replaced on the item, the
// write carries both of its events: the old lease's end and the new
// checkout.
type prevRecord struct {
	PrevAgent   string    `dynamodbav:"prev_agent,omitempty"`
	PrevRun     string    `dynamodbav:"prev_run,omitempty"`
	PrevFence   int64     `dynamodbav:"prev_fence,omitempty"`
	PrevLocked  int64     `dynamodbav:"prev_locked,omitempty"`
	PrevExpires int64     `dynamodbav:"prev_expires,omitempty"`
	PrevEnd     EventType `dynamodbav:"prev_end,omitempty"`
	// PrevReason is why it ended, when not the usual one for PrevEnd
	// (an agent_death by the holder's removal).
	PrevReason string `dynamodbav:"prev_reason,omitempty"`
	// PrevEndAt is when the agent_death happened (the holder's heartbeat
	// expiry, or when it was read dead), the time of its event; 0: the
	// checkout's own time.
	PrevEndAt int64 `dynamodbav:"prev_end_at,omitempty"`
	// PrevWrite is the grant_write of the grant before this one, with
	// the attempt a reopen between the two kept (see grant, splitGrantWrite).
	PrevWrite string `dynamodbav:"prev_write,omitempty"`
}

// maxAttempts is the task's attempt limit.
func (t *taskItem) maxAttempts() int {
	if t.MaxAttempts == 0 {
		return DefaultMaxAttempts
	}
	return t.MaxAttempts
}

// retryDelay is the wait after the task's first failed release.
func (t *taskItem) retryDelay() time.Duration {
	if t.RetryDelayMS == nil {
		return DefaultRetryDelay
	}
	return time.Duration(*t.RetryDelayMS) * time.Millisecond
}

// retryWait is the wait after the task's nth failed attempt since its last
// reopen: the retry delay doubled for each failure before it, at most
// MaxRetryWait.
func retryWait(delay time.Duration, n int) time.Duration {
	w := delay
	for i := 1; i < n && w < MaxRetryWait; i++ {
		w *= 2
	}
	return min(w, MaxRetryWait)
}

// rank is the task's claim_key while ready: claim_rank while its key is
// delayed, its key itself while ready (a ready task keeps no claim_rank;
// one written before 2026-12-06 may).
func (t *taskItem) rank() string {
	if t.ClaimRank != "" {
		return t.ClaimRank
	}
	if r, delayed := delayedRank(t.ClaimKey); delayed {
		return r
	}
	if t.ClaimKey != "" {
		return t.ClaimKey
	}
	return claimKey(t.priority(), t.CreatedAt, t.TaskID)
}

// delayedKey is the claim_key of a task of rank waiting until notBefore
// (Unix ms): it sorts after every ready task's key ('~' after the digits),
// earliest first.
func delayedKey(notBefore int64, rank string) string {
	return fmt.Sprintf("~%013d#%s", notBefore, rank)
}

// delayedRank is the ready key a delayed claim_key keeps after its
// not_before (delayedKey's rank), and whether key is a delayed one.
func delayedRank(key string) (string, bool) {
	if _, ok := delayedUntil(key); !ok || len(key) < 15 || key[14] != '#' {
		return "", false
	}
	return key[15:], true
}

// delayedUntil is the not_before a claim_key says, and whether it is a
// delayed one.
func delayedUntil(key string) (int64, bool) {
	if len(key) < 14 || key[0] != '~' {
		return 0, false
	}
	var nb int64
	for _, c := range key[1:14] {
		if c < '0' || c > '9' {
			return 0, false
		}
		nb = nb*10 + int64(c-'0')
	}
	return nb, true
}

func (t *taskItem) queue() string {
	if t.Queue == "" {
		return DefaultQueue
	}
	return t.Queue
}

func (t *taskItem) priority() int {
	if t.Priority == nil {
		return DefaultPriority
	}
	return *t.Priority
}

// claimHome is the claim index partition of a task of queue: the queue and
// the task's claim shard of n (the claim shard count).
func claimHome(queue, taskID string, n int) string {
	return queue + "#" + shardOf(taskID, n)
}

// claimKey orders a queue's claimable tasks: highest priority first, then
// oldest, then by id.
func claimKey(priority int, createdMS int64, taskID string) string {
	return fmt.Sprintf("%d#%013d#%s", MaxPriority-priority, createdMS, taskID)
}

// claimable reports whether the item is claimable without a takeover:
// todo with no lease record.
func (t *taskItem) claimable() bool { return t.Status == StatusTodo && !t.hasLease() }

// hasLease reports whether a lease record is present, live or not.
func (t *taskItem) hasLease() bool { return t.Holder != "" }

// leaseTimeValid reports whether the lease record has not expired at now.
func (t *taskItem) leaseTimeValid(now time.Time) bool {
	return t.hasLease() && t.LeaseExpires > ms(now)
}

func (t *taskItem) checkout() Checkout {
	return Checkout{
		TaskID:    t.TaskID,
		AgentID:   t.Holder,
		AgentName: t.holderName(),
		RunID:     t.RunID,
		Fence:     t.Fence,
		LockedAt:  fromMS(t.LockedAt),
		Timeout:   time.Duration(t.TimeoutMS) * time.Millisecond,
		ExpiresAt: fromMS(t.LeaseExpires),
		Reason:    t.Reason,
		Title:     t.Title,
		Queue:     t.queue(),
		Priority:  t.priority(),
		Attempt:   t.Attempts,
	}
}

// task converts the item to the domain view. live says whether its lease is
// live (the caller has judged expiry and the holder's heartbeat). A task
// whose lease has ended but not yet been swept is shown as it will be once
// swept: todo and free.
func (t *taskItem) task(live bool) Task {
	out := Task{
		TaskID:      t.TaskID,
		Title:       t.Title,
		Description: t.Description,
		Queue:       t.queue(),
		Priority:    t.priority(),
		Version:     t.Version,
		Status:      t.Status,
		CreatedAt:   fromMS(t.CreatedAt),
		Attempts:    t.Attempts,
		MaxAttempts: t.maxAttempts(),
		RetryDelay:  t.retryDelay(),
	}
	out.LastError = t.LastError
	if t.NotBefore != 0 {
		v := fromMS(t.NotBefore)
		out.NotBefore = &v
	}
	for _, id := range t.BlockedBy {
		// Statuses are filled in by fillGraph; a blocker still waited on
		// is not done, one no longer waited on is.
		st := StatusDone
		if slices.Contains(t.WaitingOn, id) {
			st = StatusTodo
		}
		if t.graph != nil {
			if g, ok := t.graph.blockers[id]; ok {
				st = g
			}
		}
		out.BlockedBy = append(out.BlockedBy, Blocker{TaskID: id, Status: st})
	}
	if t.graph != nil {
		out.Blocks = t.graph.blocks
	}
	if t.Metadata != "" {
		out.Metadata = json.RawMessage(t.Metadata)
	}
	if t.StartedAt != 0 {
		v := fromMS(t.StartedAt)
		out.StartedAt = &v
	}
	if t.CompletedAt != 0 {
		v := fromMS(t.CompletedAt)
		out.CompletedAt = &v
	}
	if t.hasLease() {
		if live {
			c := t.checkout()
			out.Checkout = &c
		} else if t.Status == StatusInProgress {
			out.Status = t.afterEnding() // ended, not yet swept
		}
	}
	return out
}

// afterEnding is the status that the ending of the task's lease, ended
// by time or by its holder's death and not yet swept, leads to: that
// ending is a failed attempt, so todo (blocked for a task marked as
// waiting on a reopened blocker), or failed at the attempt limit.
func (t *taskItem) afterEnding() Status {
	switch {
	case !t.belowLimit():
		return StatusFailed
	case len(t.WaitingOn) > 0:
		return StatusBlocked
	}
	return StatusTodo
}

// heldMS is how long a lease locked at locked and ending by typ at `at` was
// held: a lease that timed out ended when it expired, not when it was noticed.
func heldMS(typ EventType, locked, expires, at int64) int64 {
	end := at
	if typ == EventTimeout && expires > 0 && expires < end {
		end = expires
	}
	return max(end-locked, 0)
}

// endEvent is the event of the last lease an ending write ended.
func (t *taskItem) endEvent() (eventItem, bool) {
	r := t.endRecord
	if r.EndSeq == 0 {
		return eventItem{}, false
	}
	held := heldMS(r.EndType, r.EndLocked, r.EndExpires, r.EndAt)
	var version int64
	if r.EndType == EventComplete && r.EndVersion != nil {
		version = *r.EndVersion + 1
	}
	return eventItem{
		TaskID: t.TaskID, Seq: r.EndSeq, Type: r.EndType, AgentID: r.EndAgent, RunID: r.EndRun,
		Fence: r.EndFence, At: r.EndAt, HeldMS: &held, By: r.EndBy, Reason: r.EndReason, Outcome: r.EndOutcome,
		Version: version, Write: cmp.Or(r.EndWrite, noWrite),
	}, true
}

// noWrite is the Write of an ending event whose write kept no id (a
// holder's ending naming its lease by fence, a cancel), so that a
// holder's release or completion archived with none at all is known for
// one archived by an earlier version's stream function (endingInTrail).
// The events a takeover records for the lease it ended, and a task's
// failed event, have none either: they are no holder's.
const noWrite = "-"

// endedCheckout is the last lease an ending write ended, as it was but
// for its reason, which the ending does not keep (endUpdate), and its
// holder's name, attempt, and the task as granted (leaseOfRun adds them).
func (t *taskItem) endedCheckout() Checkout {
	r := t.endRecord
	end := fromMS(r.EndLocked + heldMS(r.EndType, r.EndLocked, r.EndExpires, r.EndAt))
	return Checkout{
		TaskID: t.TaskID, AgentID: r.EndAgent, AgentName: r.EndAgent, RunID: r.EndRun, Fence: r.EndFence,
		LockedAt: fromMS(r.EndLocked), ExpiresAt: end, Timeout: end.Sub(fromMS(r.EndLocked)),
	}
}

// replacedCheckout is the lease the latest checkout took over, as it was,
// expiring when it ended (its expiry, or its holder's death), but for its
// holder's name, attempt, and the task as granted (leaseOfRun adds them).
func (t *taskItem) replacedCheckout() Checkout {
	r := t.prevRecord
	at := t.LockedAt
	if r.PrevEndAt != 0 {
		at = r.PrevEndAt
	}
	end := fromMS(r.PrevLocked + heldMS(r.PrevEnd, r.PrevLocked, r.PrevExpires, at))
	return Checkout{
		TaskID: t.TaskID, AgentID: r.PrevAgent, AgentName: r.PrevAgent, RunID: r.PrevRun, Fence: r.PrevFence,
		LockedAt: fromMS(r.PrevLocked), ExpiresAt: end, Timeout: end.Sub(fromMS(r.PrevLocked)),
	}
}

// patchedBy reports whether the PATCH write named id applied to t: it is
// the latest PATCH, or one of the patchWasKept before it (by the prefix
// of its id: patch_was). Past that many PATCHes since, a PATCH sent again
// is not known, and applies again (sends.go).
func (t *taskItem) patchedBy(id string) bool {
	if id == "" {
		return false
	}
	if t.PatchID == id || t.PatchPrev == id {
		return true
	}
	p := patchPrefix(id)
	for w := t.PatchWas; len(w) >= patchWasChunk; w = w[patchWasChunk:] {
		if w[:patchWasChunk] == p {
			return true
		}
	}
	return false
}

// A task keeps, besides its latest PATCH's id (patch), the first
// patchWasChunk characters of the ids of the patchWasKept PATCHes before
// it (patch_was, newest first), so that a PATCH the SDK sent again knows
// its own write up to patchWasKept PATCHes on (patchedBy). An id is 64
// random bits in base64url: 5 characters are 30 of them, so that another
// PATCH's prefix is taken for a PATCH's own about once in 2^28 of the
// rare sendings that need it; the 20 characters cost a task PATCHed five
// times or more 29 bytes (the whole id of one PATCH, patch_prev, cost 21).
const (
	patchWasChunk = 5
	patchWasKept  = 4
)

// patchPrefix is the part of a PATCH's id that patch_was keeps.
func patchPrefix(id string) string { return id[:min(len(id), patchWasChunk)] }

// patchWas is the patch_was a PATCH of t writes: the prefix of t's latest
// PATCH, then those t keeps, newest first, patchWasKept at most. A PATCH
// of an earlier version wrote patch_prev and left patch_was as it was: the
// one before the latest is patch_prev's, and patch_was older.
func (t *taskItem) patchWas() string {
	var w strings.Builder
	for _, id := range []string{t.PatchID, t.PatchPrev} {
		if id == "" {
			continue
		}
		p := patchPrefix(id)
		w.WriteString(p + strings.Repeat("_", patchWasChunk-len(p))) // '_' pads an id too short, none is
	}
	w.WriteString(t.PatchWas)
	s := w.String()
	return s[:min(len(s), patchWasKept*patchWasChunk)]
}

// holderName is the holder's name: a grant to an agent whose name is its
// id stores none.
func (t *taskItem) holderName() string {
	if t.Holder == "" {
		return "" // an ended lease's name stays on the item (clearLease)
	}
	return cmp.Or(t.HolderName, t.Holder)
}

// leaseBy is who made the lease's latest grant or renewal: the holder, or
// the admin who acted for it.
func (t *taskItem) leaseBy() string { return cmp.Or(t.LeaseBy, t.Holder) }

// renewedBy reports whether the renewal write named write renewed the
// lease on t: it is the lease's latest renewal, or the one before it.
func (t *taskItem) renewedBy(write string) bool {
	return t.hasLease() && write != "" && (t.RenewWrite == write || t.RenewPrev == write)
}

// endedRenewalOf reports whether the renewal write named write renewed
// the lease the task's latest ending ended: its lease is gone, and no
// grant has come since (a grant takes the renewals' ids off).
func (t *taskItem) endedRenewalOf(write string) bool {
	return !t.hasLease() && t.EndSeq != 0 && write != "" && (t.RenewWrite == write || t.RenewPrev == write)
}

// renewedCheckout is the lease the latest ending ended, as a renewal of it
// at renewedAt answered: expiring when it was to expire before it ended
// (a renewal after this one, as for a live lease, moves that on), with
// the lease's timeout and its holder's name, which the ending leaves
// (clearLease), but not its reason, which it does not (endUpdate). An
// item ended by an older version keeps neither: the timeout is then the
// time from renewedAt to the expiry.
func (t *taskItem) renewedCheckout(renewedAt int64) Checkout {
	r := t.endRecord
	timeout := t.TimeoutMS
	if timeout == 0 {
		timeout = r.EndExpires - renewedAt
	}
	return Checkout{
		TaskID: t.TaskID, AgentID: r.EndAgent, AgentName: cmp.Or(t.HolderName, r.EndAgent), RunID: r.EndRun, Fence: r.EndFence,
		LockedAt: fromMS(r.EndLocked), ExpiresAt: fromMS(r.EndExpires), Timeout: time.Duration(timeout) * time.Millisecond,
		Title: t.Title, Queue: t.queue(), Priority: t.priority(), Attempt: t.Attempts,
	}
}

// itemEvent is an event that a task item's latest write recorded. frees
// says the task became available by it (or failed), so watchers are
// told; takeover that it is the end of a lease a checkout took over.
type itemEvent struct {
	eventItem
	frees, takeover bool
	// errored: a failed release whose error is in the task's error item
	// errorID (the item's LastErrorID at the ending); the change stream
	// reads it into the event.
	errored bool
	errorID int64
}

// latestEvents are the events of the item's latest transition, which its
// one write recorded: a checkout (with the end of the lease it took over,
// if any), a renewal, or an ending. The change stream archives them; Events
// merges them in while their archive write is in flight.
func (t *taskItem) latestEvents() []itemEvent {
	switch t.LastOp {
	case "":
		return nil
	case EventCheckout:
		var out []itemEvent
		if t.PrevAgent != "" {
			typ, reason := t.PrevEnd, "lease expired"
			if typ == EventAgentDeath {
				reason = reasonHeartbeat
			}
			if t.PrevReason != "" {
				reason = t.PrevReason
			}
			at := t.LockedAt
			if t.PrevEndAt != 0 {
				at = t.PrevEndAt
			}
			held := heldMS(typ, t.PrevLocked, t.PrevExpires, at)
			out = append(out, itemEvent{eventItem: eventItem{
				TaskID: t.TaskID, Seq: t.ESeq - 1, PrevSeq: t.ESeq - 2, PrevAt: t.PriorAt, Type: typ, AgentID: t.PrevAgent, RunID: t.PrevRun,
				Fence: t.PrevFence, At: at, HeldMS: &held, By: BySystem, Reason: reason,
			}, takeover: true})
		}
		if t.PrevAgent == "" && t.UnblockSeq == t.ESeq-1 {
			// A checkout that unblocked the task in its own write
			// (checkout.go): nobody is told, the task was never free.
			out = append(out, itemEvent{eventItem: eventItem{
				TaskID: t.TaskID, Seq: t.ESeq - 1, PrevSeq: t.ESeq - 2, PrevAt: t.PriorAt, Type: EventUnblocked,
				At: t.LockedAt, By: BySystem, Reason: unblockedReason(t.UnblockedBy),
			}})
		}
		if t.hasLease() {
			// A checkout adds two to eseq: its takeover's ending, if any,
			// comes right before it; else the task's previous event does.
			prev, prevAt := t.ESeq-2, t.PriorAt
			if t.PrevAgent != "" || t.UnblockSeq == t.ESeq-1 {
				prev, prevAt = t.ESeq-1, t.LockedAt
				if t.PrevEndAt != 0 {
					prevAt = t.PrevEndAt
				}
			}
			out = append(out, itemEvent{eventItem: eventItem{
				TaskID: t.TaskID, Seq: t.ESeq, PrevSeq: prev, PrevAt: prevAt, Type: EventCheckout, AgentID: t.Holder, RunID: t.RunID,
				Fence: t.Fence, At: t.LockedAt, By: t.leaseBy(), Reason: t.Reason, Write: t.grantWrite(),
			}})
		}
		return out
	case EventRenew:
		if !t.hasLease() {
			return nil
		}
		return []itemEvent{{eventItem: eventItem{
			TaskID: t.TaskID, Seq: t.ESeq, PrevSeq: t.ESeq - 1, PrevAt: t.PriorAt, Type: EventRenew, AgentID: t.Holder, RunID: t.RunID,
			Fence: t.Fence, At: t.LastAt, By: t.leaseBy(),
		}}}
	case EventUnblocked:
		return []itemEvent{{eventItem: eventItem{
			TaskID: t.TaskID, Seq: t.ESeq, PrevSeq: t.ESeq - 1, PrevAt: t.PriorAt, Type: EventUnblocked,
			At: t.LastAt, By: t.unblockedBy(), Reason: unblockedReason(t.UnblockedBy),
		}, frees: true}}
	case EventFailed:
		// The ending of the task's last attempt, and the task's failure.
		ev, ok := t.endEvent()
		if !ok || ev.Seq != t.ESeq-1 {
			return nil
		}
		ev.PrevSeq, ev.PrevAt = ev.Seq-1, t.PriorAt
		fail := eventItem{
			TaskID: t.TaskID, Seq: t.ESeq, PrevSeq: ev.Seq, PrevAt: ev.At, Type: EventFailed, AgentID: ev.AgentID,
			RunID: ev.RunID, Fence: ev.Fence, At: ev.At, By: BySystem, Reason: string(ev.Type),
		}
		return []itemEvent{{eventItem: ev, errored: t.EndErrored, errorID: t.LastErrorID}, {eventItem: fail, frees: true}}
	}
	if t.LastOp == EventCancel && t.EndSeq != t.ESeq {
		// A cancel of a task with no lease: an event of the task alone,
		// which frees nothing (nothing was held) and tells nobody.
		return []itemEvent{{eventItem: eventItem{
			TaskID: t.TaskID, Seq: t.ESeq, PrevSeq: t.ESeq - 1, PrevAt: t.PriorAt, Type: EventCancel,
			At: t.LastAt, By: t.CancelBy, Reason: reasonCancelled,
		}}}
	}
	if ev, ok := t.endEvent(); ok && ev.Seq == t.ESeq {
		// A cancel frees the task of its lease: watchers are told, with
		// reason cancel, though the task is not claimable.
		ev.PrevSeq, ev.PrevAt = ev.Seq-1, t.PriorAt
		// An ending that left the task blocked (it waits on a reopened
		// blocker) frees nothing: its watchers are told at the unblocking.
		return []itemEvent{{eventItem: ev, frees: ev.Type != EventComplete && t.Status != StatusBlocked, errored: t.EndErrored, errorID: t.LastErrorID}}
	}
	return nil
}

// unblockedByPatch, in unblocked_by, says a PATCH of blocked_by unblocked
// the task (no task id starts with "-").
const unblockedByPatch = "-patch"

// unblockedBy is who an unblocked event is by: the caller of the PATCH
// that unblocked the task, else the system (a blocker's completion).
func (t *taskItem) unblockedBy() string {
	if t.UnblockedBy == unblockedByPatch && t.PatchBy != "" {
		return t.PatchBy
	}
	return BySystem
}

// unblockedReason is an unblocked event's reason: the blocker whose
// completion unblocked the task, when known, or the PATCH that did.
func unblockedReason(blocker string) string {
	switch blocker {
	case "":
		return "its last blocker is done"
	case unblockedByPatch:
		return "its blocked_by was changed"
	}
	return "blocker " + blocker + " is done"
}

// heartbeatItem is an agent's latest heartbeat.
type heartbeatItem struct {
	AgentID   string `dynamodbav:"agent_id"`
	ExpiresAt int64  `dynamodbav:"expires_at"`
	LastAt    int64  `dynamodbav:"last_at"`
	// AliveSince is when the agent last came back from the dead (0 if it
	// never died). A lease locked at or before it ended when the agent died:
	// that includes a lease the dead agent took in the very millisecond it
	// came back, which a checkout that read the agent as dead may already be
	// taking over.
	AliveSince int64 `dynamodbav:"alive_since"`
	// DeadAt is set while a death has not been swept: the expiry at which the
	// agent died, kept when it comes back so that the sweep still finds it
	// (the by_expiry index keys it at DeadAt rather than at the new expiry).
	DeadAt int64 `dynamodbav:"dead_at,omitempty"`
	// Removed marks the tombstone an agent's removal leaves: dead for ever.
	// Removal names the removal that left it (RemoveAgent), so that its
	// delete of the agent, sent again, knows its own; a registration of
	// the id again keeps it (restart).
	Removed bool   `dynamodbav:"removed,omitempty"`
	Removal string `dynamodbav:"removal,omitempty"`
	// ReturnWrite is the id of the first write of the agent's latest
	// return from the dead, so that write, sent again with another
	// heartbeat landed on it in between, knows its own (alive.go).
	ReturnWrite string `dynamodbav:"return_write,omitempty"`
	// RegisteredAt is when an id removed before was registered again; watches
	// placed before it belong to the removed agent. A tombstone keeps the
	// registration of the agent it buried (for any agent: its creation),
	// so that a claim receipt from before it is still told apart. Fresh says the new agent
	// has not sent a heartbeat yet (it is not watched).
	RegisteredAt int64 `dynamodbav:"registered_at,omitempty"`
	Fresh        bool  `dynamodbav:"fresh,omitempty"`
	// CreatedAt is when the agent whose first heartbeat made the item was
	// registered (its agent item's created_at), read when the item was
	// made: an id's registration outlives the item that kept it (a
	// tombstone's, or the registered_at of a heartbeat item that expired
	// while its agent was silent), and watches placed before it are an
	// earlier agent's (registration). Only watches, their messages and
	// claim receipts are judged by it.
	CreatedAt int64 `dynamodbav:"created_at,omitempty"`
	// PriorExpires is the expiry the latest ordinary heartbeat's write
	// replaced (0: there was none, or a return from the dead was written
	// since), so that the write, sent again when its answer was lost, can
	// still tell whether it landed late (alive.go).
	PriorExpires int64 `dynamodbav:"prior_expires,omitempty"`
	// PriorLast is the last_at of the heartbeat the latest ordinary one's
	// write replaced (0: none, or a return written since): when it is
	// alive_since, that was a return's write, which may still be made once
	// more (alive.go, returnMayBeMadeAgain).
	PriorLast int64 `dynamodbav:"prior_last,omitempty"`
	// Lowering says a heartbeat is about to move expires_at earlier (or to
	// make a first one): no alive cache may keep what it reads (alive.go).
	Lowering bool `dynamodbav:"lowering,omitempty"`
	// SeenAlive is when a heartbeat identical to a return's first write
	// found that return there (its clock after): the agent was alive by
	// then, and the return, if made once more, counts from no later
	// (alive.go).
	SeenAlive int64 `dynamodbav:"seen_alive,omitempty"`
	// ReturnPending says a return from the dead may still be made once
	// more, moving alive_since (alive.go, returnPending).
	ReturnPending bool `dynamodbav:"return_pending,omitempty"`

	// The sweep's index keys: hb_expires is when the sweep must next look
	// at the agent (its expiry, or a death not swept yet).
	Shard   string `dynamodbav:"hb_shard,omitempty"`
	IndexAt int64  `dynamodbav:"hb_expires,omitempty"`
	TTL     int64  `dynamodbav:"ttl,omitempty"`
}

// registration is when the id was last registered, as far as hb says: a
// watch placed before it, a message of one, or a claim receipt made before
// it, is an earlier agent's.
func (hb *heartbeatItem) registration() int64 {
	return max(hb.RegisteredAt, fromCreation(hb.CreatedAt))
}

// fromCreation is the registration of an agent made at created (its agent
// item's created_at; 0: none) as registration counts it: a watch placed
// before it, or a lease locked at or before it, is an earlier agent's of
// the id. A registration over a tombstone (restart) waits for its own
// millisecond to pass before it answers, so that nothing of the new agent
// is made in it; a plain registration does not, and its agent may watch
// or lock in that millisecond: it counts from the one before. (An earlier
// agent's watch placed in that millisecond, or the one before, would be
// taken for the new agent's; a removal and a registration take longer.)
func fromCreation(created int64) int64 {
	if created == 0 {
		return 0
	}
	return created - 1
}

// dead reports whether the agent is dead by heartbeat at now.
func (hb *heartbeatItem) dead(now time.Time) bool {
	return hb != nil && hb.ExpiresAt <= ms(now)
}

// Reasons recorded on agent_death events, and on cancel events.
const (
	reasonHeartbeat = "holder's heartbeat expired"
	reasonRemoved   = "agent removed"
	reasonCancelled = "cancelled"
)

// removedUpTo is the lock time up to which the agent's leases ended by its
// removal, by its heartbeat item read at readAt: every lease up to the read
// for a removed agent; for an id registered again, those up to the
// registration (the removed agent's); 0 for none.
func (hb *heartbeatItem) removedUpTo(readAt int64) int64 {
	switch {
	case hb == nil:
		return 0
	case hb.Removed:
		return readAt
	}
	return hb.RegisteredAt
}

// diedAt is when the death of the agent hb (read at readAt) ended a lease
// it locked at lockedAt: the expiry of the heartbeat that ran out, or the
// lock itself for a lease taken while dead; 0 when hb says no death ended
// that lease, or does not say when, and the caller stamps the death when
// it was seen. A lease locked since the agent's latest return, and by the
// read, with the agent dead at the read ended at the current expiry. One
// locked before the return ended at dead_at, the earliest death not swept
// yet, if it was locked by then; if it was locked later, a later death (of
// the agent back and dead again) may have ended it, and hb does not say
// when. Nor does a read made before the lease was locked (the death cache
// may judge by a later one, and remember this one): the agent may have
// come back, taken the lease and died again after it.
func (hb *heartbeatItem) diedAt(lockedAt, readAt int64) int64 {
	switch {
	case hb == nil:
		return 0
	case lockedAt <= hb.AliveSince && hb.DeadAt > 0 && lockedAt <= hb.DeadAt && hb.DeadAt <= hb.AliveSince:
		return hb.DeadAt // ended by the death it came back from
	case lockedAt > hb.AliveSince && lockedAt <= readAt && hb.ExpiresAt <= readAt:
		return max(hb.ExpiresAt, lockedAt) // dead now
	}
	return 0
}

// holderAlive reports whether the holder of a lease locked at lockedAt is
// alive by its heartbeat. hb is nil for an agent that never sent one: it is
// not watched and counts as alive.
func holderAlive(hb *heartbeatItem, lockedAt int64, now time.Time) bool {
	if hb == nil {
		return true
	}
	return hb.ExpiresAt > ms(now) && lockedAt > hb.AliveSince
}

// agentItem is a registered agent. Its API key is stored as a separate key
// item (see keyItem) so that authentication is one GetItem by key hash.
type agentItem struct {
	AgentID   string `dynamodbav:"agent_id"`
	Kind      string `dynamodbav:"kind"` // "agent": puts it in the all_agents index
	Name      string `dynamodbav:"name"`
	Admin     bool   `dynamodbav:"admin"`
	KeyHash   string `dynamodbav:"key_hash"`
	CreatedAt int64  `dynamodbav:"created_at"`
}

// keyItem maps an API key's hash to its agent. It lives in the agents table
// under a partition key that no agent id can take ("#key#" + hash: '#' is not
// allowed in ids) and has no "kind", so it stays out of the agent listing.
type keyItem struct {
	ID      string `dynamodbav:"agent_id"`
	Owner   string `dynamodbav:"owner"`
	Name    string `dynamodbav:"name"`
	Admin   bool   `dynamodbav:"admin"`
	KeyHash string `dynamodbav:"key_hash"`
}

// eventItem is one audit event in the events table.
type eventItem struct {
	TaskID string `dynamodbav:"task_id"`
	Seq    int64  `dynamodbav:"seq"`
	// PrevSeq is the seq of the task's event just before this one (0 for
	// the first, and on events archived before it was kept). Seqs have
	// holes (a checkout that took nothing over leaves one), so this link
	// is what tells a reader that no event is missing in between.
	PrevSeq int64 `dynamodbav:"prev_seq,omitempty"`
	// PrevAt is when that event's transition was made (0 when unknown).
	PrevAt  int64     `dynamodbav:"prev_at,omitempty"`
	Type    EventType `dynamodbav:"type"`
	AgentID string    `dynamodbav:"agent_id,omitempty"`
	RunID   string    `dynamodbav:"run_id,omitempty"`
	Fence   int64     `dynamodbav:"fence"`
	At      int64     `dynamodbav:"at"`
	HeldMS  *int64    `dynamodbav:"held_ms,omitempty"`
	By      string    `dynamodbav:"by,omitempty"`
	Reason  string    `dynamodbav:"reason,omitempty"`
	TTL     int64     `dynamodbav:"ttl,omitempty"`
	// Outcome and Error are a release's (Error read from its error item
	// by the stream function when it archives the event).
	Outcome ReleaseOutcome `dynamodbav:"outcome,omitempty"`
	Error   string         `dynamodbav:"error,omitempty"`
	// Version is the task's version a completion left (0: another type,
	// or archived before it was kept), so that the completion repeated
	// after a later ending is answered with it.
	Version int64 `dynamodbav:"version,omitempty"`
	// Freeing says the event freed the task (its watchers are told), and
	// NotBefore until when it left the task waiting, as the freeing's
	// task_available message says: set by the stream function when it
	// archives the event, for a task's first watcher, whose watch may
	// have missed a freeing written before the task's watched flag
	// (watch.go, hiddenFreeing). Not set on events archived before they
	// were kept.
	Freeing   bool  `dynamodbav:"freeing,omitempty"`
	NotBefore int64 `dynamodbav:"not_before,omitempty"`
	// Write is a checkout's grant_write, the id of the write that made
	// the grant, so that a grant the SDK sent again finds its own in the
	// trail once the item no longer names it (resentGrantInTrail); and an
	// ending's end_write, for a release or completion naming no lease
	// (endingInTrail), or noWrite. Not shown; not on events archived
	// before it was kept.
	Write string `dynamodbav:"write,omitempty"`
	// The fleet feed's keys (index by_feed), set by the stream function
	// when it archives the event; see feed.go.
	FeedShard string `dynamodbav:"feed_shard,omitempty"`
	FeedKey   string `dynamodbav:"feed_key,omitempty"`
}

// endsLease reports whether e ended a lease (see Event.EndsLease).
func (e eventItem) endsLease() bool { return e.Type.EndsLease() && e.Fence != 0 }

func (e eventItem) event() Event {
	ev := Event{
		Seq: e.Seq, Type: e.Type, TaskID: e.TaskID, AgentID: e.AgentID, RunID: e.RunID,
		Fence: e.Fence, At: fromMS(e.At), By: e.By, Reason: e.Reason, Outcome: e.Outcome, Error: e.Error,
	}
	if e.HeldMS != nil {
		d := time.Duration(*e.HeldMS) * time.Millisecond
		ev.Held = &d
	}
	return ev
}

// messageItem is an inbox message.
type messageItem struct {
	AgentID   string `dynamodbav:"agent_id"`
	MessageID string `dynamodbav:"message_id"`
	Type      string `dynamodbav:"type"`
	TaskID    string `dynamodbav:"task_id"`
	Reason    string `dynamodbav:"reason"`
	At        int64  `dynamodbav:"at"`
	TTL       int64  `dynamodbav:"ttl"`
	Acked     bool   `dynamodbav:"acked,omitempty"`
	// WatchedAt is when the watch that earned the message was placed (0 on
	// messages written before it was kept): a message whose watch predates
	// its agent id's registration belongs to a removed agent and is not
	// shown. On a lease_lost message it is the moment before the lost lease
	// was locked: a lease locked at or before its agent id's registration
	// again is the removed agent's.
	WatchedAt int64 `dynamodbav:"watched_at,omitempty"`
	// Fence and RunID name the lease the message is about.
	Fence int64  `dynamodbav:"fence,omitempty"`
	RunID string `dynamodbav:"run_id,omitempty"`
	// NotBefore (Unix ms): see Message.NotBefore.
	NotBefore int64 `dynamodbav:"not_before,omitempty"`
}

// message is m as Inbox answers it.
func (m messageItem) message() Message {
	msg := Message{MessageID: m.MessageID, Type: m.Type, TaskID: m.TaskID, Reason: m.Reason, At: fromMS(m.At), Fence: m.Fence, RunID: m.RunID}
	if m.NotBefore != 0 {
		nb := fromMS(m.NotBefore)
		msg.NotBefore = &nb
	}
	return msg
}

// grantWas is what a lease's answer tells of its task (title, queue,
// priority) as it was at the grant, for the fields PATCHed since
// (taskItem.GrantWas): each kept by the first PATCH that changed it.
// Attempt is read only: versions of 2026-12-06 kept the grant's attempt
// here at a reopen, where its grant record keeps it now (splitGrantWrite).
type grantWas struct {
	Title    *string `dynamodbav:"t"`
	Queue    *string `dynamodbav:"q"`
	Priority *int    `dynamodbav:"p"`
	Attempt  *int    `dynamodbav:"a"`
}

// attempt answers the grant's attempt: w's where a reopen of a version
// of 2026-12-06 kept it, else attempts, the task's count (the grant's, as no
// grant came since).
func (w *grantWas) attempt(attempts int) int {
	if w == nil || w.Attempt == nil {
		return attempts
	}
	return *w.Attempt
}

// attemptOf is the attempt the task's grant of fence counted, as the item
// tells it, and whether it can. Every grant adds 1 to the fence and counts
// an attempt, and a reopen (only of a finished task) counts the attempts
// anew: the latest grant's attempt is the task's attempts (or what a
// reopen since kept of it: its record's mark, or, by a version of
// 2026-12-06, grant_was), and a grant back grants before it counted
// back fewer, when that is at least 1. It is not, when a reopen came
// after the grant (the grants since the reopen are no more than back):
// then the attempt is the mark the first reopen after it left on its
// record, which the item keeps for the grant before the latest one alone
// (prev_write), and which a reopen of an earlier version did not leave.
// Else the item cannot tell (ok false), and the task's trail can: the
// grants back to the finish before this one (grantInTrailAt).
func (t *taskItem) attemptOf(fence int64) (attempt int, ok bool) {
	back := t.Fence - fence // grants since
	if fence < 1 || back < 0 {
		return 0, false
	}
	if _, pa := splitGrantWrite(t.PrevWrite); back == 1 && pa > 0 {
		return pa, true // reopened between this grant and the next
	}
	latest := t.GrantWas.attempt(t.Attempts)
	if _, ga := splitGrantWrite(t.GrantWrite); ga > 0 {
		latest = ga // reopened since the latest grant
	}
	if n := latest - int(back); n >= 1 {
		return n, true
	}
	return 0, false
}

// A reopen (a PATCH to todo, or a checkout that reopens a finished task)
// counts the task's attempts anew. So that a grant the SDK sent again,
// known by its write id one grant on or with no grant since, can still
// answer the attempt it counted, the first reopen after a grant keeps
// that attempt on the grant's record: grant_write "<id>~<attempt>", which
// the next grant copies to prev_write and the one after drops, as every
// grant's record (about two bytes, on a reopened task only, for two
// grants). Write ids are base64url, which has no '~'; conditions on them
// match the id as a prefix (notLeftBy).
const attemptMark = "~"

// grantWrite is the write id of the task's latest grant.
func (t *taskItem) grantWrite() string {
	id, _ := splitGrantWrite(t.GrantWrite)
	return id
}

// prevWrite is the write id of the grant before the task's latest one.
func (t *taskItem) prevWrite() string {
	id, _ := splitGrantWrite(t.PrevWrite)
	return id
}

// splitGrantWrite splits a grant_write or prev_write value into the grant's
// write id and the attempt a reopen after it kept (0: none kept).
func splitGrantWrite(v string) (id string, attempt int) {
	id, kept, ok := strings.Cut(v, attemptMark)
	if !ok {
		return v, 0
	}
	n, err := strconv.Atoi(kept)
	if err != nil || n < 1 {
		return id, 0
	}
	return id, n
}

// withAttempt is the grant record v (a write id, or a record a reopen
// marked already) marked with attempt.
func withAttempt(v string, attempt int) string {
	id, _ := splitGrantWrite(v)
	return id + attemptMark + strconv.Itoa(attempt)
}

// at answers title, queue and priority as the grant found them: w's where
// it kept them, else as they are (the task's own).
func (w *grantWas) at(title, queue string, prio int) (string, string, int) {
	if w == nil {
		return title, queue, prio
	}
	if w.Title != nil {
		title = *w.Title
	}
	if w.Queue != nil {
		queue = *w.Queue
	}
	if w.Priority != nil {
		prio = *w.Priority
	}
	return title, queue, prio
}
