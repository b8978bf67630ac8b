package main

// The tasks commands: add, list, show, edit, cancel and reopen.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

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
				req.Metadata = json.RawMessage(metadata)
			}
			return a.call(cmd, func(ctx context.Context, c *client.Client, _ *settings) (func(io.Writer), error) {
				t, err := c.CreateTask(ctx, req)
				return func(w io.Writer) {
					fmt.Fprintf(w, "Task created: %s (queue %s, priority %d)\n", t.TaskID, t.Queue, t.Priority)
				}, err
			})
		},
	}
	add.Flags().StringVar(&title, "title", "", "what the task is")
	add.Flags().StringVar(&description, "description", "", "more about it, up to 8 KiB")
	add.Flags().StringVar(&queue, "queue", "", "the queue claims take it from (server default: default)")
	add.Flags().IntVar(&priority, "priority", 5, "0 to 9, higher is claimed first")
	add.Flags().StringVar(&metadata, "metadata", "", "a JSON object of your own, up to 4 KiB")
	edit := a.taskEditCmd()
	cancel := &cobra.Command{
		Use:               "cancel <task-id>",
		Short:             tasksCancelShort,
		Long:              tasksCancelLong,
		Example:           tasksCancelExample,
		Args:              exactArgs(1, "a task id"),
		ValidArgsFunction: a.completeOpenTasks,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Client, _ *settings) (func(io.Writer), error) {
				t, err := c.CancelTask(ctx, args[0])
				return func(w io.Writer) { fmt.Fprintf(w, "Task cancelled: %s\n", t.TaskID) }, err
			})
		},
	}
	reopen := &cobra.Command{
		Use:     "reopen <task-id>",
		Short:   tasksReopenShort,
		Example: tasksReopenExample,
		Args:    exactArgs(1, "a task id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Client, _ *settings) (func(io.Writer), error) {
				t, err := c.UpdateTask(ctx, args[0], client.UpdateTaskRequest{Status: "todo"})
				return func(w io.Writer) { fmt.Fprintf(w, "Task reopened: %s\n", t.TaskID) }, err
			})
		},
	}
	var status, cursor, listQueue string
	var limit int
	list := &cobra.Command{
		Use:     "list",
		Short:   tasksListShort,
		Example: tasksListExample,
		Args:    exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Client, _ *settings) (func(io.Writer), error) {
				p, err := c.ListTasks(ctx, client.ListTasksRequest{Status: status, Queue: listQueue, Limit: limit, Cursor: cursor})
				return func(w io.Writer) {
					fmt.Fprintln(w, "## Tasks")
					fmt.Fprintln(w)
					if len(p.Tasks) == 0 {
						fmt.Fprintln(w, "No tasks.")
					} else {
						rows := make([][]string, len(p.Tasks))
						for i, t := range p.Tasks {
							holder := "-"
							if t.Checkout != nil {
								holder = who(t.Checkout.AgentName, t.Checkout.AgentID)
							}
							rows[i] = []string{t.TaskID, t.Status, t.Queue, strconv.Itoa(t.Priority), orDash(t.Title), holder}
						}
						table(w, []string{"Task", "Status", "Queue", "Priority", "Title", "Held By"}, rows)
					}
					if p.NextCursor != nil {
						fmt.Fprintf(w, "\nMore: checkout tasks list --cursor %s\n", *p.NextCursor)
					}
				}, err
			})
		},
	}
	list.Flags().StringVar(&status, "status", "", "only tasks in this status: todo, in_progress, done or cancelled")
	list.Flags().StringVar(&listQueue, "queue", "", "only tasks in this queue")
	list.Flags().IntVar(&limit, "limit", 0, fmt.Sprintf("page size, 1 to %d (server default %d)", lease.MaxListLimit, lease.DefaultListLimit))
	list.Flags().StringVar(&cursor, "cursor", "", "the next page, from a previous listing")
	show := &cobra.Command{
		Use:               "show <task-id>",
		Short:             tasksShowShort,
		Example:           tasksShowExample,
		Args:              exactArgs(1, "a task id"),
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

// taskEditCmd is "tasks edit": a PATCH of the fields given as flags.
func (a *app) taskEditCmd() *cobra.Command {
	var title, description, queue, metadata string
	var priority int
	var ifVersion int64
	cmd := &cobra.Command{
		Use:               "edit <task-id>",
		Short:             tasksEditShort,
		Long:              tasksEditLong,
		Example:           tasksEditExample,
		Args:              exactArgs(1, "a task id"),
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
				req.Metadata = json.RawMessage(metadata)
			}
			req.IfVersion = ifVersion
			if req.Title == nil && req.Description == nil && req.Queue == nil && req.Priority == nil && req.Metadata == nil {
				return &usageError{"nothing to change: give --title, --description, --queue, --priority or --metadata"}
			}
			return a.call(cmd, func(ctx context.Context, c *client.Client, _ *settings) (func(io.Writer), error) {
				t, err := c.UpdateTask(ctx, args[0], req)
				return func(w io.Writer) { printTask(w, t) }, err
			})
		},
	}
	cmd.Flags().StringVar(&title, "title", "", "the new title (\"\" clears it)")
	cmd.Flags().StringVar(&description, "description", "", "the new description (\"\" clears it)")
	cmd.Flags().StringVar(&queue, "queue", "", "move it to this queue")
	cmd.Flags().IntVar(&priority, "priority", 5, "0 to 9, higher is claimed first")
	cmd.Flags().StringVar(&metadata, "metadata", "", "replace its metadata with this JSON object")
	cmd.Flags().Int64Var(&ifVersion, "if-version", 0, "only if the task is at this version")
	return cmd
}
