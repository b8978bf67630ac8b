package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/checkout-dev/checkout/client"
	"github.com/checkout-dev/checkout/mcpserver"
)

type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	url, apiKey    string
	json           bool
}

const rootLong = `checkout checks tasks out on a checkout server, so that many agents can share
one pool of tasks without doing the same work twice.

  checkout <task-id> [--timeout 30m] [--reason TEXT]   check a task out
  checkout release <task-id>                           give it back
  checkout list                                        who holds what

A task literally named like a command is checked out with
"checkout checkout <task-id>" or "checkout -- <task-id>".

Configuration:
  CHECKOUT_URL       the server (default ` + defaultURL + `), or --url
  CHECKOUT_API_KEY   your API key, or --api-key

Exit status:
  0  success
  1  error: server unreachable, bad key, forbidden, ...
  2  usage: bad flags, arguments or durations, or input the server refused
  3  denied: the task is held by someone else (or not held by you)
  4  not found: no such task, agent or message; nothing checked out; no task available`

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "checkout <task-id> | checkout <command>",
		Short:         "Check tasks out and in on a checkout server",
		Long:          rootLong,
		Args:          cobra.MaximumNArgs(1),
		SilenceErrors: true,
		SilenceUsage:  true,
		CompletionOptions: cobra.CompletionOptions{
			DisableDefaultCmd: true,
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err.Error() + " (see checkout --help)"} })
	pf := root.PersistentFlags()
	pf.StringVar(&a.url, "url", envOr("CHECKOUT_URL", defaultURL), "server URL (env CHECKOUT_URL)")
	pf.StringVar(&a.apiKey, "api-key", os.Getenv("CHECKOUT_API_KEY"), "API key (env CHECKOUT_API_KEY)")
	pf.BoolVar(&a.json, "json", false, "print the server's JSON answer")

	co := a.checkoutFlags(root)
	root.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		return a.checkout(cmd, args[0], co)
	}
	alias := &cobra.Command{
		Use:   "checkout <task-id>",
		Short: "Check a task out (the same as checkout <task-id>; use it for tasks named like a command)",
		Args:  exactArgs(1, "a task id"),
	}
	aliasFlags := a.checkoutFlags(alias)
	alias.RunE = func(cmd *cobra.Command, args []string) error { return a.checkout(cmd, args[0], aliasFlags) }

	root.AddCommand(alias, a.releaseCmd(), a.statusCmd(), a.listCmd(), a.renewCmd(), a.completeCmd(),
		a.heartbeatCmd(), a.claimCmd(), a.watchCmd(), a.inboxCmd(), a.eventsCmd(), a.tasksCmd(),
		a.agentsCmd(), a.mcpCmd())
	return root
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return &usageError{fmt.Sprintf("%s needs %s (see checkout %s --help)", cmd.CommandPath(), what, cmd.Name())}
		}
		return nil
	}
}

func (a *app) client() (*client.Client, error) {
	if a.apiKey == "" {
		return nil, &usageError{"no API key: set CHECKOUT_API_KEY or pass --api-key"}
	}
	return client.New(a.url, a.apiKey, client.WithUserAgent("checkout-cli/1")), nil
}

// call runs one request and prints its answer: the server's JSON with
// --json, or what show writes.
func (a *app) call(cmd *cobra.Command, do func(ctx context.Context, c *client.Client) (show func(w io.Writer), err error)) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	var rec client.Response
	ctx := client.RecordResponse(cmd.Context(), &rec)
	show, err := do(ctx, c)
	if a.json {
		if rec.Body != nil {
			fmt.Fprintf(a.stdout, "%s\n", bytes.TrimRight(rec.Body, "\n"))
		}
		var es *exitStatus
		if err != nil && errors.As(err, &es) {
			return es
		}
		return err
	}
	var es *exitStatus
	if show != nil && (err == nil || errors.As(err, &es)) {
		show(a.stdout)
	}
	return err
}

func duration(flag, v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, &usageError{fmt.Sprintf("invalid duration %q for --%s", v, flag)}
	}
	return d, nil
}

type checkoutFlags struct {
	timeout, reason, agent, runID string
	watch                         bool
}

func (a *app) checkoutFlags(cmd *cobra.Command) *checkoutFlags {
	f := &checkoutFlags{}
	fl := cmd.Flags()
	fl.StringVar(&f.timeout, "timeout", "", "lease length, e.g. 30m or 2h (server default 30m)")
	fl.StringVar(&f.reason, "reason", "", "why you take the task")
	fl.StringVar(&f.agent, "agent", "", "check out on behalf of this agent id (admins only)")
	fl.StringVar(&f.runID, "run-id", "", "the run's lease token (default: a fresh one)")
	fl.BoolVar(&f.watch, "watch", false, "if the task is held, be told in your inbox when it is released")
	return f
}

func (a *app) checkout(cmd *cobra.Command, taskID string, f *checkoutFlags) error {
	timeout, err := duration("timeout", f.timeout)
	if err != nil {
		return err
	}
	return a.call(cmd, func(ctx context.Context, c *client.Client) (func(io.Writer), error) {
		co, err := c.Checkout(ctx, taskID, client.CheckoutRequest{
			Timeout: timeout, Reason: f.reason, RunID: f.runID, Watch: f.watch, AgentID: f.agent,
		})
		var ce *client.ConflictError
		if errors.As(err, &ce) {
			return func(w io.Writer) { printDenied(w, taskID, ce.Holder, f.watch) }, &exitStatus{exitConflict}
		}
		if err != nil {
			return nil, err
		}
		return func(w io.Writer) { printAcquired(w, co) }, nil
	})
}

func (a *app) releaseCmd() *cobra.Command {
	var force bool
	var reason, runID string
	var fence int64
	cmd := &cobra.Command{
		Use:   "release <task-id>",
		Short: "Release a task you hold (admins: --force releases anyone's)",
		Args:  exactArgs(1, "a task id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Client) (func(io.Writer), error) {
				r, err := c.Release(ctx, args[0], client.ReleaseRequest{Force: force, Reason: reason, RunID: runID, Fence: fence})
				return func(w io.Writer) {
					fmt.Fprintf(w, "Checkout released: %s\n  Released by: %s\n  Held: %s\n", r.TaskID, r.ReleasedBy,
						compact(time.Duration(r.HeldSeconds)*time.Second))
				}, err
			})
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "release whoever holds it (admins only; audited)")
	cmd.Flags().StringVar(&reason, "reason", "", "why")
	cmd.Flags().StringVar(&runID, "run-id", "", "only if the lease has this run id")
	cmd.Flags().Int64Var(&fence, "fence", 0, "only if the lease has this fence")
	return cmd
}

func (a *app) statusCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "status <task-id>",
		Short: "Show whether a task is checked out, and by whom",
		Args:  exactArgs(1, "a task id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Client) (func(io.Writer), error) {
				s, err := c.Status(ctx, args[0])
				return func(w io.Writer) { printLock(w, s) }, err
			})
		},
	}
}

func (a *app) listCmd() *cobra.Command {
	var agent string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the live checkouts (all, or one agent's)",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Client) (func(io.Writer), error) {
				cos, err := c.ListCheckouts(ctx, agent)
				return func(w io.Writer) { printCheckouts(w, cos) }, err
			})
		},
	}
	cmd.Flags().StringVar(&agent, "agent", "", "only this agent's checkouts")
	return cmd
}

func (a *app) renewCmd() *cobra.Command {
	var timeout, runID string
	var fence int64
	cmd := &cobra.Command{
		Use:   "renew <task-id>",
		Short: "Extend your lease on a task",
		Args:  exactArgs(1, "a task id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := duration("timeout", timeout)
			if err != nil {
				return err
			}
			return a.call(cmd, func(ctx context.Context, c *client.Client) (func(io.Writer), error) {
				co, err := c.Renew(ctx, args[0], client.RenewRequest{Timeout: d, RunID: runID, Fence: fence})
				return func(w io.Writer) {
					fmt.Fprintf(w, "Checkout renewed: %s\n  Timeout: %s (auto-release at %s)\n", co.TaskID,
						compact(co.Timeout()), clock(co.ExpiresAt))
				}, err
			})
		},
	}
	cmd.Flags().StringVar(&timeout, "timeout", "", "new lease length (default: the lease's own)")
	cmd.Flags().StringVar(&runID, "run-id", "", "only if the lease has this run id")
	cmd.Flags().Int64Var(&fence, "fence", 0, "only if the lease has this fence")
	return cmd
}

func (a *app) completeCmd() *cobra.Command {
	var runID string
	var fence int64
	cmd := &cobra.Command{
		Use:   "complete <task-id>",
		Short: "Mark a task you hold as done (ends the lease)",
		Args:  exactArgs(1, "a task id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Client) (func(io.Writer), error) {
				t, err := c.Complete(ctx, args[0], client.CompleteRequest{RunID: runID, Fence: fence})
				return func(w io.Writer) {
					fmt.Fprintf(w, "Task completed: %s\n", t.TaskID)
					if t.DurationSeconds != nil {
						fmt.Fprintf(w, "  Duration: %s\n", compact(time.Duration(*t.DurationSeconds)*time.Second))
					}
				}, err
			})
		},
	}
	cmd.Flags().StringVar(&runID, "run-id", "", "only if the lease has this run id")
	cmd.Flags().Int64Var(&fence, "fence", 0, "only if the lease has this fence")
	return cmd
}

func (a *app) heartbeatCmd() *cobra.Command {
	var ttl string
	cmd := &cobra.Command{
		Use:   "heartbeat",
		Short: "Tell the server you are alive (after the first one, missing them ends your leases)",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := duration("ttl", ttl)
			if err != nil {
				return err
			}
			return a.call(cmd, func(ctx context.Context, c *client.Client) (func(io.Writer), error) {
				h, err := c.Heartbeat(ctx, d)
				return func(w io.Writer) {
					fmt.Fprintf(w, "Heartbeat: %s\n  Alive until: %s\n", h.AgentID, stamp(h.ExpiresAt))
				}, err
			})
		},
	}
	cmd.Flags().StringVar(&ttl, "ttl", "", "how long this heartbeat keeps you alive (server default 90s)")
	return cmd
}

func (a *app) claimCmd() *cobra.Command {
	var timeout, reason, runID, agent string
	cmd := &cobra.Command{
		Use:   "claim",
		Short: "Check out the oldest open task",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := duration("timeout", timeout)
			if err != nil {
				return err
			}
			return a.call(cmd, func(ctx context.Context, c *client.Client) (func(io.Writer), error) {
				co, err := c.Claim(ctx, client.ClaimRequest{Timeout: d, Reason: reason, RunID: runID, AgentID: agent})
				return func(w io.Writer) { printAcquired(w, co) }, err
			})
		},
	}
	cmd.Flags().StringVar(&timeout, "timeout", "", "lease length (server default 30m)")
	cmd.Flags().StringVar(&reason, "reason", "", "why you take the task")
	cmd.Flags().StringVar(&runID, "run-id", "", "the run's lease token (default: a fresh one)")
	cmd.Flags().StringVar(&agent, "agent", "", "claim on behalf of this agent id (admins only)")
	return cmd
}

func (a *app) watchCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "watch <task-id>",
		Short: "Get an inbox message when a task becomes available",
		Args:  exactArgs(1, "a task id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Client) (func(io.Writer), error) {
				err := c.Watch(ctx, args[0])
				return func(w io.Writer) {
					fmt.Fprintf(w, "Watching: %s\n  Your inbox gets a message when it becomes available (see checkout inbox)\n", args[0])
				}, err
			})
		},
	}
}

func (a *app) inboxCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "inbox",
		Short: "List your inbox: tasks you watched that became available",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Client) (func(io.Writer), error) {
				msgs, err := c.Inbox(ctx)
				return func(w io.Writer) {
					fmt.Fprintln(w, "## Inbox")
					fmt.Fprintln(w)
					if len(msgs) == 0 {
						fmt.Fprintln(w, "No messages.")
						return
					}
					rows := make([][]string, len(msgs))
					for i, m := range msgs {
						rows[i] = []string{m.MessageID, m.TaskID, m.Type, orDash(m.Reason), stamp(m.At)}
					}
					table(w, []string{"Message", "Task", "Type", "Reason", "At"}, rows)
				}, err
			})
		},
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "delete <message-id>",
		Short: "Delete an inbox message",
		Args:  exactArgs(1, "a message id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Client) (func(io.Writer), error) {
				err := c.DeleteMessage(ctx, args[0])
				return func(w io.Writer) { fmt.Fprintf(w, "Message deleted: %s\n", args[0]) }, err
			})
		},
	})
	return cmd
}

func (a *app) eventsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "events <task-id>",
		Short: "Show a task's audit trail, oldest first",
		Args:  exactArgs(1, "a task id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Client) (func(io.Writer), error) {
				evs, err := c.Events(ctx, args[0])
				return func(w io.Writer) {
					fmt.Fprintf(w, "## Events: %s\n\n", args[0])
					if len(evs) == 0 {
						fmt.Fprintln(w, "No events.")
						return
					}
					rows := make([][]string, len(evs))
					for i, e := range evs {
						held := "-"
						if e.HeldSeconds != nil {
							held = compact(time.Duration(*e.HeldSeconds) * time.Second)
						}
						rows[i] = []string{stamp(e.At), e.Type, e.AgentID, e.RunID, strconv.FormatInt(e.Fence, 10), held, orDash(e.By), orDash(e.Reason)}
					}
					table(w, []string{"At", "Event", "Agent", "Run", "Fence", "Held", "By", "Reason"}, rows)
				}, err
			})
		},
	}
}

func (a *app) tasksCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "tasks", Short: "Create, list and show tasks", Args: exactArgs(0, "a subcommand: add, list or show")}
	cmd.RunE = func(cmd *cobra.Command, args []string) error { return cmd.Help() }
	var title string
	add := &cobra.Command{
		Use:   "add [task-id]",
		Short: "Create a task (the server picks the id when none is given)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := client.CreateTaskRequest{Title: title}
			if len(args) == 1 {
				req.TaskID = args[0]
			}
			return a.call(cmd, func(ctx context.Context, c *client.Client) (func(io.Writer), error) {
				t, err := c.CreateTask(ctx, req)
				return func(w io.Writer) { fmt.Fprintf(w, "Task created: %s\n", t.TaskID) }, err
			})
		},
	}
	add.Flags().StringVar(&title, "title", "", "what the task is")
	var status, cursor string
	var limit int
	list := &cobra.Command{
		Use:   "list",
		Short: "List tasks, one page at a time",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Client) (func(io.Writer), error) {
				p, err := c.ListTasks(ctx, client.ListTasksRequest{Status: status, Limit: limit, Cursor: cursor})
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
							rows[i] = []string{t.TaskID, t.Status, orDash(t.Title), holder}
						}
						table(w, []string{"Task", "Status", "Title", "Held By"}, rows)
					}
					if p.NextCursor != nil {
						fmt.Fprintf(w, "\nMore: checkout tasks list --cursor %s\n", *p.NextCursor)
					}
				}, err
			})
		},
	}
	list.Flags().StringVar(&status, "status", "", "only tasks in this status: todo, in_progress, done or cancelled")
	list.Flags().IntVar(&limit, "limit", 0, "page size, 1 to 1000 (server default 100)")
	list.Flags().StringVar(&cursor, "cursor", "", "the next page, from a previous listing")
	show := &cobra.Command{
		Use:   "show <task-id>",
		Short: "Show one task",
		Args:  exactArgs(1, "a task id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Client) (func(io.Writer), error) {
				t, err := c.GetTask(ctx, args[0])
				return func(w io.Writer) { printTask(w, t) }, err
			})
		},
	}
	cmd.AddCommand(add, list, show)
	return cmd
}

func (a *app) agentsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "agents", Short: "Register, list and remove agents (admins only)", Args: exactArgs(0, "a subcommand: add, list or remove")}
	cmd.RunE = func(cmd *cobra.Command, args []string) error { return cmd.Help() }
	var id string
	var admin bool
	add := &cobra.Command{
		Use:   "add <name>",
		Short: "Register an agent and print its API key (shown once)",
		Args:  exactArgs(1, "a name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Client) (func(io.Writer), error) {
				r, err := c.CreateAgent(ctx, client.CreateAgentRequest{Name: args[0], AgentID: id, Admin: admin})
				return func(w io.Writer) {
					fmt.Fprintf(w, "Agent created: %s\n  API key: %s\n  The key is shown only once: store it now.\n", who(r.Name, r.AgentID), r.APIKey)
				}, err
			})
		},
	}
	add.Flags().StringVar(&id, "id", "", "the agent id (default: generated)")
	add.Flags().BoolVar(&admin, "admin", false, "make it an admin")
	list := &cobra.Command{
		Use:   "list",
		Short: "List the registered agents",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Client) (func(io.Writer), error) {
				agents, err := c.ListAgents(ctx)
				return func(w io.Writer) {
					fmt.Fprintln(w, "## Agents")
					fmt.Fprintln(w)
					rows := make([][]string, len(agents))
					for i, ag := range agents {
						alive, last := "-", "-"
						if ag.Alive != nil {
							alive = strconv.FormatBool(*ag.Alive)
						}
						if ag.LastHeartbeatAt != nil {
							last = stamp(*ag.LastHeartbeatAt)
						}
						rows[i] = []string{ag.AgentID, ag.Name, strconv.FormatBool(ag.Admin), last, alive}
					}
					table(w, []string{"Agent", "Name", "Admin", "Last Heartbeat", "Alive"}, rows)
				}, err
			})
		},
	}
	remove := &cobra.Command{
		Use:   "remove <agent-id>",
		Short: "Remove an agent: its key stops working and its leases end",
		Args:  exactArgs(1, "an agent id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Client) (func(io.Writer), error) {
				err := c.RemoveAgent(ctx, args[0])
				return func(w io.Writer) { fmt.Fprintf(w, "Agent removed: %s\n", args[0]) }, err
			})
		},
	}
	cmd.AddCommand(add, list, remove)
	return cmd
}

func (a *app) mcpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "mcp",
		Short: "Serve the checkout tools to an MCP client over stdio",
		Long: `Runs a Model Context Protocol server on stdin/stdout with the tools
checkout_task, release_task, renew_task, complete_task, task_status,
list_checkouts, claim_task and heartbeat, acting as the agent whose key is in
CHECKOUT_API_KEY (or --api-key) against CHECKOUT_URL (or --url).`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			return mcpserver.Serve(cmd.Context(), c, a.stdin, a.stdout)
		},
	}
}
