package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/checkout-dev/checkout/client"
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

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05Z") }

func clock(t time.Time) string { return t.UTC().Format("15:04") }

func who(name, id string) string {
	if name == "" || name == id {
		return id
	}
	return fmt.Sprintf("%s (%s)", name, id)
}

func printAcquired(w io.Writer, co client.Checkout) {
	fmt.Fprintf(w, "Checkout acquired: %s\n", co.TaskID)
	fmt.Fprintf(w, "  Agent: %s\n", who(co.AgentName, co.AgentID))
	fmt.Fprintf(w, "  Locked at: %s\n", stamp(co.LockedAt))
	fmt.Fprintf(w, "  Timeout: %s (auto-release at %s)\n", compact(co.Timeout()), clock(co.ExpiresAt))
	if co.Reason != "" {
		fmt.Fprintf(w, "  Reason: %s\n", co.Reason)
	}
}

func printDenied(w io.Writer, taskID string, h client.Checkout, watching bool) {
	fmt.Fprintf(w, "Checkout DENIED: %s\n", taskID)
	fmt.Fprintf(w, "  Held by: %s\n", who(h.AgentName, h.AgentID))
	fmt.Fprintf(w, "  Locked at: %s\n", stamp(h.LockedAt))
	fmt.Fprintf(w, "  Timeout: %s (auto-release at %s)\n", compact(h.Timeout()), clock(h.ExpiresAt))
	if watching {
		fmt.Fprintf(w, "  Watching: your inbox gets a message when it is released\n")
	}
	fmt.Fprintf(w, "  Suggestion: wait or pick another task\n")
}

func printLock(w io.Writer, s client.LockStatus) {
	if !s.Locked || s.Checkout == nil {
		fmt.Fprintf(w, "Task %s: not checked out\n", s.TaskID)
		return
	}
	co := s.Checkout
	fmt.Fprintf(w, "Task %s: checked out\n", s.TaskID)
	fmt.Fprintf(w, "  Agent: %s\n", who(co.AgentName, co.AgentID))
	fmt.Fprintf(w, "  Locked at: %s\n", stamp(co.LockedAt))
	fmt.Fprintf(w, "  Timeout: %s (auto-release at %s)\n", compact(co.Timeout()), clock(co.ExpiresAt))
	fmt.Fprintf(w, "  Remaining: %s\n", compact(co.Remaining()))
	fmt.Fprintf(w, "  Run: %s (fence %d)\n", co.RunID, co.Fence)
	if co.Reason != "" {
		fmt.Fprintf(w, "  Reason: %s\n", co.Reason)
	}
}

// table writes a markdown table; cells have their pipes escaped.
func table(w io.Writer, header []string, rows [][]string) {
	esc := func(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ") }
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
		fmt.Fprintf(w, "  Title: %s\n", t.Title)
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
		fmt.Fprintf(w, "  Checked out by: %s until %s (%s left)\n", who(co.AgentName, co.AgentID), stamp(co.ExpiresAt), compact(co.Remaining()))
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
