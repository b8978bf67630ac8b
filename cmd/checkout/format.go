package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/checkout-dev/checkout/client"
	"github.com/checkout-dev/checkout/lease"
)

// compact formats a duration the way people write it: 30m, 1h30m, 90s, 2h.
// Durations under two minutes that are not whole minutes are given in
// seconds.
func compact(d time.Duration) string {
	d = d.Truncate(time.Second)
	if d <= 0 {
		return "0s"
	}
	if d < 2*time.Minute && d%time.Minute != 0 {
		return fmt.Sprintf("%ds", int64(d/time.Second))
	}
	var b strings.Builder
	if h := d / time.Hour; h > 0 {
		fmt.Fprintf(&b, "%dh", h)
	}
	if m := d % time.Hour / time.Minute; m > 0 {
		fmt.Fprintf(&b, "%dm", m)
	}
	if s := d % time.Minute / time.Second; s > 0 {
		fmt.Fprintf(&b, "%ds", s)
	}
	return b.String()
}

// plural is a count and its noun, the noun plural unless the count is 1:
// "1 attempt", "3 attempts".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// zone is where times are shown: local time when TZ is set, UTC otherwise
// (so that a machine's own zone file never changes what an agent reads).
func zone() *time.Location {
	if os.Getenv("TZ") != "" {
		return time.Local
	}
	return time.UTC
}

// unknownZone is TZ when it names no zone that could be loaded, or "".
// Go then shows local times in UTC, silently; the CLI warns (warnZone).
func unknownZone() string {
	tz := strings.TrimPrefix(os.Getenv("TZ"), ":")
	if tz == "" || tz == "UTC" || time.Local.String() != "UTC" {
		return ""
	}
	return tz
}

// warnZone warns on stderr of a TZ that names no known zone, before the
// times it would have zoned are shown in UTC.
func (a *app) warnZone() {
	if tz := unknownZone(); tz != "" {
		fmt.Fprintf(a.stderr, "checkout: TZ names an unknown time zone %q: times are shown in UTC\n", tz)
	}
}

// stamp is an instant to the second: 2026-03-20T14:35:00Z, or with TZ set
// 2026-03-20T15:35:00+01:00.
func stamp(t time.Time) string {
	if loc := zone(); loc != time.UTC {
		return t.In(loc).Format(time.RFC3339)
	}
	return t.UTC().Format("2006-01-02T15:04:05Z")
}

// when is an instant for people: 2026-03-20 15:05 UTC, or in the TZ zone.
func when(t time.Time) string { return t.In(zone()).Format("2006-01-02 15:04 MST") }

// whenExact is when to the second, for a time a retry waits for (a delay
// may be seconds long) and the end of a short lease: 2026-03-20 15:05:30
// UTC.
func whenExact(t time.Time) string { return t.In(zone()).Format("2006-01-02 15:04:05 MST") }

// shortLease is the timeout under which a lease's end is shown to the
// second: rounded to the minute, it would be off by a good part of the
// lease.
const shortLease = 10 * time.Minute

// leaseEnd is the end of a lease, dated and zoned: 2026-03-20 15:05 UTC,
// or 2026-03-20 14:31:30 UTC for a short lease.
func leaseEnd(co client.Checkout) string {
	if co.Timeout() < shortLease {
		return whenExact(co.ExpiresAt)
	}
	return when(co.ExpiresAt)
}

// expiresAt is the end of a lease, dated and zoned, with how long it has
// left when the server answered: "2026-03-20 15:05 UTC (in 30m)".
func expiresAt(co client.Checkout) string {
	return fmt.Sprintf("%s (in %s)", leaseEnd(co), compact(co.Remaining()))
}

// timeoutLine writes the skill's Timeout line, "Timeout: 30m
// (auto-release at 15:05)", which agents are taught to read and scripts
// parse (to the second for a short lease: "Timeout: 90s (auto-release at
// 14:31:30)"), and after it the same end dated and zoned, with the time
// left, on a line of its own: "Expires at: 2026-03-20 15:05 UTC (in 30m)".
func timeoutLine(w io.Writer, co client.Checkout) {
	clock := "15:04"
	if co.Timeout() < shortLease {
		clock = "15:04:05"
	}
	fmt.Fprintf(w, "  Timeout: %s (auto-release at %s)\n", compact(co.Timeout()), co.ExpiresAt.In(zone()).Format(clock))
	fmt.Fprintf(w, "  Expires at: %s\n", expiresAt(co))
}

func who(name, id string) string {
	if name == "" || name == id {
		return id
	}
	return fmt.Sprintf("%s (%s)", name, id)
}

// printAcquired reports a new lease in the skill's layout, and after its
// lines the task a claim got (its title and queue). runFromUser says the
// run id was the caller's (--run-id or CHECKOUT_RUN_ID); otherwise the
// line says how to keep using the generated one. lastError is the error the task's latest
// failed attempt was given back with, shown under a retry's attempt.
func printAcquired(w io.Writer, co client.Checkout, runFromUser bool, lastError string) {
	fmt.Fprintf(w, "Checkout acquired: %s\n", co.TaskID)
	fmt.Fprintf(w, "  Agent: %s\n", oneLine(who(co.AgentName, co.AgentID)))
	fmt.Fprintf(w, "  Locked at: %s\n", stamp(co.LockedAt))
	timeoutLine(w, co)
	if co.Title != "" {
		fmt.Fprintf(w, "  Title: %s\n", oneLine(co.Title))
	}
	if co.Queue != "" {
		fmt.Fprintf(w, "  Queue: %s, priority %d\n", co.Queue, co.Priority)
	}
	if co.Reason != "" {
		fmt.Fprintf(w, "  Reason: %s\n", oneLine(co.Reason))
	}
	if co.Attempt > 1 {
		earlier := plural(co.Attempt-1, "earlier attempt") + " failed"
		if co.Attempt == 2 {
			earlier = "an earlier attempt failed"
		}
		fmt.Fprintf(w, "  Attempt: %d (%s or ended without completing it)\n", co.Attempt, earlier)
		if lastError != "" {
			fmt.Fprintf(w, "  Last error: %s\n", oneLine(lastError))
		}
	}
	if runFromUser {
		fmt.Fprintf(w, "  Run: %s, fence %d\n", co.RunID, co.Fence)
	} else {
		fmt.Fprintf(w, "  Run: %s, fence %d (export CHECKOUT_RUN_ID=%s to act as this run)\n", co.RunID, co.Fence, co.RunID)
	}
}

// printHeld reports a lease the caller already holds: its checkout again
// is not denied.
func printHeld(w io.Writer, co client.Checkout) {
	fmt.Fprintf(w, "You already hold %s (run %s, fence %d, until %s)\n", co.TaskID, co.RunID, co.Fence, leaseEnd(co))
	fmt.Fprintf(w, "  Agent: %s\n", oneLine(who(co.AgentName, co.AgentID)))
	fmt.Fprintf(w, "  Locked at: %s\n", stamp(co.LockedAt))
	timeoutLine(w, co)
	if co.Reason != "" {
		fmt.Fprintf(w, "  Reason: %s\n", oneLine(co.Reason))
	}
	fmt.Fprintf(w, "  Run: export CHECKOUT_RUN_ID=%s to act as this run, or give --fence %d to renew, release and complete\n", co.RunID, co.Fence)
}

// printDenied reports a conflict in the skill's layout, with a Retry after
// line: how long until the lease can end without its holder, and what ends
// it then (its expiry, or the holder's heartbeat running out). askedWatch
// is --watch: whether the caller watches is what the server said
// (ce.Watching), since a full watch list (or a watch that could not be
// placed) leaves it off.
func printDenied(w io.Writer, taskID string, ce *client.ConflictError, askedWatch bool) {
	h := ce.Holder
	fmt.Fprintf(w, "Checkout DENIED: %s\n", taskID)
	fmt.Fprintf(w, "  Held by: %s\n", oneLine(who(h.AgentName, h.AgentID)))
	fmt.Fprintf(w, "  Locked at: %s\n", stamp(h.LockedAt))
	timeoutLine(w, h)
	end := "the lease expires"
	if ce.HeartbeatExpiresAt != nil && ce.HeartbeatExpiresAt.Before(h.ExpiresAt) {
		end = "the holder's heartbeat runs out at " + stamp(*ce.HeartbeatExpiresAt) + " unless it sends another"
	}
	fmt.Fprintf(w, "  Retry after: %s (%s)\n", compact(ce.RetryAfter), end)
	watchLine(w, askedWatch, ce.Watching, "released")
	fmt.Fprintf(w, "  Suggestion: wait or pick another task\n")
}

// watchLine says, for a refused checkout, whether the caller watches the
// task as the server said: on its watch list, or not on it although it
// asked (the list was full, or the watch could not be placed just now).
// Nothing when it did not ask.
func watchLine(w io.Writer, asked, watching bool, when string) {
	switch {
	case watching:
		fmt.Fprintf(w, "  Watching: your inbox gets a message when it is %s\n", when)
	case asked:
		fmt.Fprintf(w, "  Watching: no, the task's watch list is full (%d watchers) or could not take the watch just now, so no message will come\n", lease.MaxWatchers)
	}
}

// printLock shows a task's lock; me, when known, is the agent the command
// acts as, so that its own lease is said to be its own.
func printLock(w io.Writer, s client.LockStatus, me string) {
	if !s.Locked || s.Checkout == nil {
		fmt.Fprintf(w, "Task %s: not checked out\n", s.TaskID)
		return
	}
	co := s.Checkout
	fmt.Fprintf(w, "Task %s: checked out\n", s.TaskID)
	agent := oneLine(who(co.AgentName, co.AgentID))
	switch {
	case me != "" && co.AgentID == me:
		agent += ": you"
	case me != "":
		agent += ": not you (" + me + ")"
	}
	fmt.Fprintf(w, "  Agent: %s\n", agent)
	fmt.Fprintf(w, "  Locked at: %s\n", stamp(co.LockedAt))
	timeoutLine(w, *co)
	fmt.Fprintf(w, "  Run: %s (fence %d)\n", co.RunID, co.Fence)
	if co.Reason != "" {
		fmt.Fprintf(w, "  Reason: %s\n", oneLine(co.Reason))
	}
}

// table writes a markdown table, one row a line: cells are shown by
// oneLine (they hold what agents wrote: titles, names, reasons), with
// their pipes escaped too.
func table(w io.Writer, header []string, rows [][]string) {
	esc := func(s string) string { return strings.ReplaceAll(oneLine(s), "|", `\|`) }
	line := func(cells []string) {
		for i := range cells {
			cells[i] = esc(cells[i])
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	line(append([]string(nil), header...))
	seps := make([]string, len(header))
	for i, h := range header {
		seps[i] = strings.Repeat("-", max(3, len(h)))
	}
	fmt.Fprintf(w, "|%s|\n", "-"+strings.Join(seps, "-|-")+"-")
	for _, r := range rows {
		line(r)
	}
}

func printCheckouts(w io.Writer, cos []client.Checkout) {
	fmt.Fprintln(w, "## Active Checkouts")
	fmt.Fprintln(w)
	if len(cos) == 0 {
		fmt.Fprintln(w, "No active checkouts.")
		return
	}
	rows := make([][]string, len(cos))
	for i, co := range cos {
		rows[i] = []string{co.TaskID, who(co.AgentName, co.AgentID), stamp(co.LockedAt), compact(co.Timeout()), compact(co.Remaining())}
	}
	table(w, []string{"Task", "Agent", "Locked At", "Timeout", "Remaining"}, rows)
}

func printTask(w io.Writer, t client.Task) {
	fmt.Fprintf(w, "Task %s: %s\n", t.TaskID, t.Status)
	if t.Title != "" {
		fmt.Fprintf(w, "  Title: %s\n", oneLine(t.Title))
	}
	fmt.Fprintf(w, "  Queue: %s, priority %d (version %d)\n", t.Queue, t.Priority, t.Version)
	if t.Description != "" {
		printLines(w, "  Description: ", t.Description)
	}
	if len(t.Metadata) > 0 {
		b, _ := json.Marshal(t.Metadata)
		fmt.Fprintf(w, "  Metadata: %s\n", jsonLine(b))
	}
	fmt.Fprintf(w, "  Created at: %s\n", stamp(t.CreatedAt))
	if t.StartedAt != nil {
		fmt.Fprintf(w, "  Started at: %s\n", stamp(*t.StartedAt))
	}
	if t.CompletedAt != nil {
		fmt.Fprintf(w, "  Completed at: %s\n", stamp(*t.CompletedAt))
	}
	if t.DurationSeconds != nil {
		fmt.Fprintf(w, "  Duration: %s\n", compact(time.Duration(*t.DurationSeconds)*time.Second))
	}
	if co := t.Checkout; co != nil {
		fmt.Fprintf(w, "  Checked out by: %s, auto-release at %s\n", oneLine(who(co.AgentName, co.AgentID)), expiresAt(*co))
	}
	if len(t.Blocks) > 0 {
		fmt.Fprintf(w, "  Blocks: %s\n", strings.Join(t.Blocks, ", "))
	}
	if t.MaxAttempts > 0 {
		fmt.Fprintf(w, "  Attempts: %d of %d (retry delay %s)\n", t.Attempts, t.MaxAttempts, compact(t.RetryDelay()))
	}
	printWaits(w, t)
	if t.LastError != "" {
		fmt.Fprintf(w, "  Last error: %s\n", oneLine(t.LastError))
	}
}

// printWaits writes what a task waits for: its blockers with their
// statuses, and the time before which it is not handed out (which the
// server keeps once it has passed: then it says so).
func printWaits(w io.Writer, t client.Task) {
	if len(t.BlockedBy) > 0 {
		fmt.Fprintf(w, "  Blocked by: %s\n", blockerList(t.BlockedBy))
	}
	switch {
	case t.NotBeforeAhead():
		notBeforeLine(w, *t.NotBefore)
	case t.NotBefore != nil:
		fmt.Fprintf(w, "  Not before: %s (passed)\n", whenExact(*t.NotBefore))
	}
}

// notBeforeLine writes the time before which a task is not handed out,
// in the one style every command shows it in.
func notBeforeLine(w io.Writer, t time.Time) {
	fmt.Fprintf(w, "  Not before: %s (no checkout or claim until then)\n", whenExact(t))
}

// printNotFree says why a task nobody holds cannot be taken, if it
// cannot: its status, what it waits for, or until when.
func printNotFree(w io.Writer, t client.Task) {
	switch t.Status {
	case client.StatusTodo, client.StatusInProgress:
	default:
		fmt.Fprintf(w, "  Status: %s\n", t.Status)
	}
	var open []client.Blocker
	for _, b := range t.BlockedBy {
		if b.Status != client.StatusDone {
			open = append(open, b)
		}
	}
	if len(open) > 0 {
		fmt.Fprintf(w, "  Blocked by: %s\n", blockerList(open))
	}
	if t.NotBeforeAhead() && t.Status == client.StatusTodo {
		notBeforeLine(w, *t.NotBefore)
	}
}

// blockerList is "task-1 (in_progress), task-0 (done)".
func blockerList(bs []client.Blocker) string {
	parts := make([]string, len(bs))
	for i, b := range bs {
		parts[i] = fmt.Sprintf("%s (%s)", b.TaskID, b.Status)
	}
	return strings.Join(parts, ", ")
}

// printBlocked reports a checkout refused because the task waits for
// blockers that are not done, in the layout of a denial.
func printBlocked(w io.Writer, taskID string, be *client.BlockedError, askedWatch bool) {
	fmt.Fprintf(w, "Checkout DENIED: %s\n", taskID)
	fmt.Fprintf(w, "  Blocked by: %s\n", blockerList(be.BlockedBy))
	watchLine(w, askedWatch, be.Watching, "unblocked")
	fmt.Fprintf(w, "  Suggestion: pick another task; this one becomes todo by itself once its blockers are done\n")
}

// printNotReady reports a checkout refused because the task may not be
// granted yet (the wait after a failed attempt, or a time it was given).
// The service places no watch on such a task (a watch waits for a
// freeing): asked for one, the denial says so.
func printNotReady(w io.Writer, taskID string, ne *client.NotReadyError, askedWatch bool) {
	fmt.Fprintf(w, "Checkout DENIED: %s\n", taskID)
	notBeforeLine(w, ne.NotBefore)
	if askedWatch {
		fmt.Fprintf(w, "  Watching: no, a task waiting for its time is watched by nobody, so no message will come; check out again then\n")
	}
	fmt.Fprintf(w, "  Suggestion: wait or pick another task\n")
}

// printFinished reports a checkout refused for the task's status (a
// checkout takes a todo or in_progress task), in the layout of a denial;
// askedWatch is --watch, which placed no watch.
func printFinished(w io.Writer, taskID, status string, askedWatch bool) {
	fmt.Fprintf(w, "Checkout DENIED: %s\n", taskID)
	line, suggestion := status, "pick another task"
	switch status {
	case client.StatusFailed:
		line = "failed (it used all its attempts)"
		suggestion = fmt.Sprintf("reopen it with checkout tasks reopen %s to try again, or pick another task", taskID)
	case client.StatusDone, client.StatusCancelled:
		suggestion = fmt.Sprintf("pick another task (checkout tasks reopen %s would make it todo again)", taskID)
	}
	fmt.Fprintf(w, "  Status: %s\n", line)
	if askedWatch {
		// The service places no watch on a task it refuses for its
		// status: no message would come.
		fmt.Fprintf(w, "  Watching: no, a checkout watches only a held or blocked task, so no message will come (checkout watch %s is told once it is reopened, taken and freed again)\n", taskID)
	}
	fmt.Fprintf(w, "  Suggestion: %s\n", suggestion)
}

// printWatching reports a watch and when its message comes: the next
// time the task is freed, which for a task nobody holds is not now. t is
// the task as read after the watch, or nil.
func printWatching(w io.Writer, taskID string, t *client.Task) {
	fmt.Fprintf(w, "Watching: %s\n", taskID)
	msg := "when it becomes available"
	switch {
	case t == nil, t.Status == client.StatusInProgress:
	case t.Status == client.StatusTodo && t.Checkout == nil && t.NotBeforeAhead():
		notBeforeLine(w, *t.NotBefore)
		msg = "when it is next freed, not when this wait ends"
	case t.Status == client.StatusTodo && t.Checkout == nil:
		fmt.Fprintf(w, "  It is free now: checkout %s takes it. Your inbox gets a message when it is next freed (see checkout inbox)\n", taskID)
		return
	case t.Status == client.StatusBlocked:
		msg = "when it is unblocked"
	default: // done, cancelled or failed
		msg = fmt.Sprintf("only once it is reopened, taken and freed again (it is %s)", t.Status)
	}
	fmt.Fprintf(w, "  Your inbox gets a message %s (see checkout inbox)\n", msg)
}

// eventReason is an event's reason, with a release's outcome and error.
func eventReason(e client.Event) string {
	var parts []string
	if e.Reason != "" {
		parts = append(parts, e.Reason)
	}
	if e.Outcome != "" {
		parts = append(parts, "outcome "+e.Outcome)
	}
	if e.Error != "" {
		parts = append(parts, "error: "+e.Error)
	}
	return orDash(strings.Join(parts, "; "))
}

// fenceCell is a fence in a table, "-" for an event without a lease (an
// unblocked event): fences start at 1.
func fenceCell(fence int64) string {
	if fence == 0 {
		return "-"
	}
	return strconv.FormatInt(fence, 10)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
