package main

// The tasks commands: add, list, show, edit, cancel and reopen.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/checkout-dev/checkout/client"
	"github.com/checkout-dev/checkout/lease"
)

func (a *app) tasksCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "tasks",
		Short:   tasksShort,
		Example: tasksExample,
		Args:    groupArgs,
		RunE:    func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	var title, description, queue, metadata string
	var priority int
	var addGraph *graphFlags
	add := &cobra.Command{
		Use:     "add [task-id]",
		Short:   tasksAddShort,
		Example: tasksAddExample,
		Args:    maxArgs(1, "one task id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := client.CreateTaskRequest{Title: title, Description: description, Queue: queue}
			if len(args) == 1 {
				req.TaskID = args[0]
			}
			if cmd.Flags().Changed("priority") {
				req.Priority = &priority
			}
			if metadata != "" {
				m, err := metadataFlag(metadata)
				if err != nil {
					return err
				}
				req.Metadata = m
			}
			if err := addGraph.toCreate(cmd, &req); err != nil {
				return err
			}
			return a.call(cmd, func(ctx context.Context, c *client.Client, _ *settings) (func(io.Writer), error) {
				t, err := c.CreateTask(ctx, req)
				if req.TaskID != "" {
					err = lostAnswer(err, "the creation of task "+req.TaskID, "run checkout tasks show "+req.TaskID+" before adding it again")
					err = restate(err, client.ErrTaskExists, fmt.Sprintf("task %s already exists", req.TaskID))
				} else {
					err = lostAnswer(err, "the new task", "run checkout tasks list before adding it again (a task given an id cannot be created twice)")
				}
				return func(w io.Writer) {
					fmt.Fprintf(w, "Task created: %s (queue %s, priority %d)\n", t.TaskID, t.Queue, t.Priority)
					printWaits(w, t)
				}, err
			})
		},
	}
	add.Flags().StringVar(&title, "title", "", "what the task is")
	add.Flags().StringVar(&description, "description", "", "more about it, up to 8 KiB")
	add.Flags().StringVar(&queue, "queue", "", "the queue claims take it from (server default: default)")
	add.Flags().IntVar(&priority, "priority", 5, "0 to 9, higher is claimed first")
	add.Flags().StringVar(&metadata, "metadata", "", "a JSON object of your own, up to 4 KiB")
	addGraph = graphFlagsOf(add, false)
	edit := a.taskEditCmd()
	cancel := &cobra.Command{
		Use:               "cancel <task-id>",
		Short:             tasksCancelShort,
		Long:              tasksCancelLong,
		Example:           tasksCancelExample,
		Args:              exactArgs(1, "task id"),
		ValidArgsFunction: a.completeOpenTasks,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Client, _ *settings) (func(io.Writer), error) {
				// The task before, to tell a cancel from a task already
				// cancelled, as reopen does.
				var before *client.Task
				if !a.json {
					if t, err := c.GetTask(cmd.Context(), args[0]); err == nil {
						before = &t
					}
				}
				t, err := c.CancelTask(ctx, args[0])
				err = lostAnswer(err, "the cancel of task "+args[0], "run checkout tasks show "+args[0]+" to see")
				return func(w io.Writer) {
					if before != nil && before.Version == t.Version {
						fmt.Fprintf(w, "Task %s is already %s: nothing changed\n", t.TaskID, t.Status)
						return
					}
					fmt.Fprintf(w, "Task cancelled: %s\n", t.TaskID)
				}, err
			})
		},
	}
	reopen := &cobra.Command{
		Use:     "reopen <task-id>",
		Short:   tasksReopenShort,
		Example: tasksReopenExample,
		Args:    exactArgs(1, "task id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Client, _ *settings) (func(io.Writer), error) {
				// The task before, to tell a reopen from a task already
				// todo, which the answer alone does not (best effort; not
				// with --json, which prints the answer).
				var before *client.Task
				if !a.json {
					if t, err := c.GetTask(cmd.Context(), args[0]); err == nil {
						before = &t
					}
				}
				t, err := c.UpdateTask(ctx, args[0], client.UpdateTaskRequest{Status: "todo"})
				err = lostAnswer(err, "the reopening of task "+args[0], "run checkout tasks show "+args[0]+" to see")
				return func(w io.Writer) {
					if before != nil && before.Version == t.Version {
						fmt.Fprintf(w, "Task %s is already %s: nothing changed\n", t.TaskID, t.Status)
						return
					}
					fmt.Fprintf(w, "Task reopened: %s\n", t.TaskID)
					printWaits(w, t)
				}, err
			})
		},
	}
	var status, cursor, listQueue string
	var limit int
	list := &cobra.Command{
		Use:     "list",
		Short:   tasksListShort,
		Long:    tasksListLong,
		Example: tasksListExample,
		Args:    exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkLimit(cmd, limit); err != nil {
				return err
			}
			return a.call(cmd, func(ctx context.Context, c *client.Client, _ *settings) (func(io.Writer), error) {
				// A page may come short, even empty, with a cursor:
				// read on to fill the page asked for.
				p, err := c.FillTaskPage(ctx, client.ListTasksRequest{Status: status, Queue: listQueue, Limit: limit, Cursor: cursor}, listReads)
				return func(w io.Writer) {
					fmt.Fprintln(w, "## Tasks")
					fmt.Fprintln(w)
					if len(p.Tasks) == 0 && p.NextCursor != nil {
						fmt.Fprintf(w, "No tasks in the %d pages read; the listing goes on.\n", listReads)
					} else if len(p.Tasks) == 0 {
						fmt.Fprintln(w, "No tasks.")
					} else {
						rows := make([][]string, len(p.Tasks))
						for i, t := range p.Tasks {
							holder := "-"
							if t.Checkout != nil {
								holder = who(t.Checkout.AgentName, t.Checkout.AgentID)
							}
							// A todo task not to be taken yet (a retry
							// delay, a time it was given) is not open,
							// by the server's clock.
							notBefore := "-"
							if t.Status == client.StatusTodo && t.NotBeforeAhead() {
								notBefore = stamp(*t.NotBefore)
							}
							rows[i] = []string{t.TaskID, t.Status, t.Queue, strconv.Itoa(t.Priority), orDash(t.Title), holder, notBefore}
						}
						table(w, []string{"Task", "Status", "Queue", "Priority", "Title", "Held By", "Not Before"}, rows)
					}
					if p.NextCursor != nil {
						// The cursor keeps its listing's status and queue.
						more := "checkout tasks list"
						if limit != 0 {
							more += " --limit " + strconv.Itoa(limit)
						}
						fmt.Fprintf(w, "\nMore: %s --cursor %s\n", more, *p.NextCursor)
					}
				}, err
			})
		},
	}
	list.Flags().StringVar(&status, "status", "", "only tasks in this status: todo, blocked, in_progress, done, cancelled or failed")
	list.Flags().StringVar(&listQueue, "queue", "", "only tasks in this queue")
	list.Flags().IntVar(&limit, "limit", 0, fmt.Sprintf("page size, 1 to %d (server default %d)", lease.MaxListLimit, lease.DefaultListLimit))
	list.Flags().StringVar(&cursor, "cursor", "", "the next page, from a previous listing")
	show := &cobra.Command{
		Use:               "show <task-id>",
		Short:             tasksShowShort,
		Example:           tasksShowExample,
		Args:              exactArgs(1, "task id"),
		ValidArgsFunction: a.completeOpenTasks,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Client, _ *settings) (func(io.Writer), error) {
				t, err := c.GetTask(ctx, args[0])
				return func(w io.Writer) { printTask(w, t) }, err
			})
		},
	}
	cmd.AddCommand(add, list, show, edit, cancel, reopen)
	return cmd
}

// listReads is how many pages of a listing a command reads at most to
// fill the page asked for: each page's reads are bounded, so one may come
// short, even empty, with a cursor.
const listReads = 10

// taskEditCmd is "tasks edit": a PATCH of the fields given as flags.
func (a *app) taskEditCmd() *cobra.Command {
	var title, description, queue, metadata string
	var priority int
	var ifVersion int64
	var graph *graphFlags
	cmd := &cobra.Command{
		Use:               "edit <task-id>",
		Short:             tasksEditShort,
		Long:              tasksEditLong,
		Example:           tasksEditExample,
		Args:              exactArgs(1, "task id"),
		ValidArgsFunction: a.completeOpenTasks,
		RunE: func(cmd *cobra.Command, args []string) error {
			var req client.UpdateTaskRequest
			f := cmd.Flags()
			if f.Changed("title") {
				req.Title = &title
			}
			if f.Changed("description") {
				req.Description = &description
			}
			if f.Changed("queue") {
				req.Queue = &queue
			}
			if f.Changed("priority") {
				req.Priority = &priority
			}
			if f.Changed("metadata") {
				m, err := metadataFlag(metadata)
				if err != nil {
					return err
				}
				req.Metadata = m
			}
			if f.Changed("if-version") && ifVersion < 1 {
				// Versions start at 1, and 0 would be no condition at all.
				return &usageError{fmt.Sprintf("invalid value %q for --if-version: want a task version, a whole number 1 or more (see %s --help)",
					strconv.FormatInt(ifVersion, 10), cmd.CommandPath())}
			}
			req.IfVersion = ifVersion
			if err := graph.toUpdate(cmd, &req); err != nil {
				return err
			}
			if req.Title == nil && req.Description == nil && req.Queue == nil && req.Priority == nil && req.Metadata == nil &&
				req.BlockedBy == nil && req.MaxAttempts == nil && req.RetryDelay == nil && req.NotBefore == nil && !req.ClearNotBefore {
				return &usageError{"nothing to change: give --title, --description, --queue, --priority, --metadata, --blocked-by, --max-attempts, --retry-delay or --not-before"}
			}
			return a.call(cmd, func(ctx context.Context, c *client.Client, _ *settings) (func(io.Writer), error) {
				t, err := c.UpdateTask(ctx, args[0], req)
				err = lostAnswer(err, "the change of task "+args[0], "run checkout tasks show "+args[0]+" before sending it again")
				err = restate(err, client.ErrVersionMismatch, fmt.Sprintf("task %s has changed since version %d (--if-version %d): see its version now with checkout tasks show %s",
					args[0], ifVersion, ifVersion, args[0]))
				return func(w io.Writer) { printTask(w, t) }, err
			})
		},
	}
	cmd.Flags().StringVar(&title, "title", "", "the new title (\"\" clears it)")
	cmd.Flags().StringVar(&description, "description", "", "the new description (\"\" clears it)")
	cmd.Flags().StringVar(&queue, "queue", "", "move it to this queue")
	cmd.Flags().IntVar(&priority, "priority", 0, "the new priority, 0 to 9, higher is claimed first (default: unchanged)")
	cmd.Flags().StringVar(&metadata, "metadata", "", "replace its metadata with this JSON object")
	cmd.Flags().Int64Var(&ifVersion, "if-version", 0, "only if the task is at this version (1 or more)")
	graph = graphFlagsOf(cmd, true)
	return cmd
}

// metadataFlag is --metadata as the request's JSON. Its syntax is checked
// here, so that the error names the flag; that it is an object, and small
// enough, the server checks.
func metadataFlag(v string) (json.RawMessage, error) {
	var m json.RawMessage
	if err := json.Unmarshal([]byte(v), &m); err != nil {
		return nil, &usageError{"--metadata is not valid JSON: " + err.Error()}
	}
	return m, nil
}

// graphFlags are the work graph's flags of tasks add and tasks edit: what
// the task waits for, how often it may be tried, and when.
type graphFlags struct {
	blockedBy   []string
	maxAttempts int
	retryDelay  string
	notBefore   string
}

func graphFlagsOf(cmd *cobra.Command, edit bool) *graphFlags {
	g := &graphFlags{}
	f := cmd.Flags()
	blocked := fmt.Sprintf("a task this one waits for: it is blocked until they are all done (repeat it, or give a comma list; up to %d)", lease.MaxBlockers)
	notBefore := "not claimable before this time: RFC 3339 (2026-03-20T15:00:00Z), or a duration from now by this machine's clock (10m)"
	if edit {
		blocked = "replace the tasks this one waits for (repeat it, or give a comma list; \"\" clears them; a todo or blocked task only)"
		notBefore += "; \"\" clears it"
	}
	f.StringSliceVar(&g.blockedBy, "blocked-by", nil, blocked)
	maxAttempts := fmt.Sprintf("attempts before the task fails, 1 to %d (server default %d)", lease.MaxMaxAttempts, lease.DefaultMaxAttempts)
	if edit {
		maxAttempts = fmt.Sprintf("attempts before the task fails, 1 to %d", lease.MaxMaxAttempts)
	}
	f.IntVar(&g.maxAttempts, "max-attempts", 0, maxAttempts)
	// On edit a flag left out leaves the value as it is: the server's
	// default is only a new task's.
	retryDelay := fmt.Sprintf("wait after a failed attempt, doubling with each further failure, 0s to %s (server default %s)",
		compact(lease.MaxRetryWait), compact(lease.DefaultRetryDelay))
	if edit {
		retryDelay = fmt.Sprintf("the new wait after a failed attempt, doubling with each further failure, 0s to %s", compact(lease.MaxRetryWait))
	}
	f.StringVar(&g.retryDelay, "retry-delay", "", retryDelay)
	f.StringVar(&g.notBefore, "not-before", "", notBefore)
	return g
}

// blockers is --blocked-by as ids: commas split, blanks dropped.
func (g *graphFlags) blockers() []string {
	return listFlag(g.blockedBy)
}

func (g *graphFlags) delay() (*time.Duration, error) {
	d, err := time.ParseDuration(g.retryDelay)
	if err != nil || lease.RetryDelayRange.Check(d) != nil {
		return nil, durationError("retry-delay", g.retryDelay, lease.RetryDelayRange)
	}
	return &d, nil
}

// parseNotBefore reads --not-before: an RFC 3339 time, or a duration from
// now.
func parseNotBefore(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(d), nil
	}
	return time.Time{}, &usageError{fmt.Sprintf("invalid --not-before %q: want an RFC 3339 time such as 2026-03-20T15:00:00Z or a duration from now such as 10m", v)}
}

func (g *graphFlags) toCreate(cmd *cobra.Command, req *client.CreateTaskRequest) error {
	f := cmd.Flags()
	if f.Changed("blocked-by") {
		req.BlockedBy = g.blockers()
	}
	if f.Changed("max-attempts") {
		req.MaxAttempts = &g.maxAttempts
	}
	if f.Changed("retry-delay") {
		d, err := g.delay()
		if err != nil {
			return err
		}
		req.RetryDelay = d
	}
	if g.notBefore != "" {
		t, err := parseNotBefore(g.notBefore, time.Now())
		if err != nil {
			return err
		}
		req.NotBefore = &t
	}
	return nil
}

func (g *graphFlags) toUpdate(cmd *cobra.Command, req *client.UpdateTaskRequest) error {
	f := cmd.Flags()
	if f.Changed("blocked-by") {
		ids := g.blockers()
		req.BlockedBy = &ids
	}
	if f.Changed("max-attempts") {
		req.MaxAttempts = &g.maxAttempts
	}
	if f.Changed("retry-delay") {
		d, err := g.delay()
		if err != nil {
			return err
		}
		req.RetryDelay = d
	}
	switch {
	case f.Changed("not-before") && g.notBefore == "":
		req.ClearNotBefore = true
	case f.Changed("not-before"):
		t, err := parseNotBefore(g.notBefore, time.Now())
		if err != nil {
			return err
		}
		req.NotBefore = &t
	}
	return nil
}
