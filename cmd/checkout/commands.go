package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/checkout-dev/checkout/client"
	"github.com/checkout-dev/checkout/mcpserver"
)

type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer

	// Global flags; resolve weighs them against profiles and the
	// environment.
	flagURL, flagKey, profileName string
	json                          bool
	// Per-command flags that resolve weighs too (only one command runs).
	agentOpt, runIDOpt string

	resolved *settings
}

const rootLong = `checkout checks tasks out on a checkout server, so that many agents can share
one pool of tasks without doing the same work twice.

  checkout <task-id> [--timeout 30m] [--reason TEXT]   check a task out
  checkout release <task-id>                           give it back
  checkout list                                        who holds what

Commands come before task ids: a task named like a command (or one slip
away from a command's name, like "lsit") is checked out with
"checkout checkout <task-id>" or "checkout -- <task-id>".

Configuration (each flag beats its variable; see checkout config --help for
profiles, which name a server, a key file and an agent):
  CHECKOUT_URL       the server (default ` + defaultURL + `), or --url
  CHECKOUT_API_KEY   your API key, or --api-key
  CHECKOUT_PROFILE   a profile of ~/.config/checkout/config.toml, or --profile
  CHECKOUT_AGENT     the agent to act as (default: the key's own), or --agent
  CHECKOUT_RUN_ID    the run's lease token (default: a fresh one per checkout), or --run-id
  TZ                 show times in this zone (default UTC)

Exit status:
  0  success (also: you already hold the task you checked out)
  1  error: server unreachable, not a checkout server, bad key, forbidden, ...
  2  usage: bad flags, arguments or durations, an unknown command, or input the server refused
  3  denied: the task is held by someone else (or not held by you), or its state
     refused the request (it exists, its version moved on, too many watchers, ...)
  4  not found: no such task, agent or message; nothing checked out; no task available`

const rootExample = `  checkout task-d4e5 --timeout 30m --reason "fix the login bug"
  checkout release task-d4e5
  checkout list
  checkout -- list          # a task literally named "list"
  checkout --profile writer claim`

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "checkout <task-id> | checkout <command>",
		Short:         "Check tasks out and in on a checkout server",
		Long:          rootLong,
		Example:       rootExample,
		Version:       versionInfo(),
		Args:          maxArgs(1, "one task id"),
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetVersionTemplate("{{.Version}}")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return &usageError{fmt.Sprintf("%v (see %s --help)", err, cmd.CommandPath())}
	})
	pf := root.PersistentFlags()
	pf.StringVar(&a.flagURL, "url", "", "server URL (default: $CHECKOUT_URL, the profile's url, or "+defaultURL+")")
	pf.StringVar(&a.flagKey, "api-key", "", "API key (default: $CHECKOUT_API_KEY, or the profile's key_file)")
	pf.StringVar(&a.profileName, "profile", "", "use this profile of the profile file (default: $CHECKOUT_PROFILE, or default_profile)")
	pf.BoolVar(&a.json, "json", false, "print the server's JSON answer")

	co := a.checkoutFlags(root)
	root.ValidArgsFunction = a.completeOpenTasks
	root.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		// A word after "--" is a task id, whatever it looks like.
		if cmd.ArgsLenAtDash() != 0 && nearCommand(cmd, args[0]) != "" {
			return &usageError{fmt.Sprintf("unknown command %q: did you mean %s? (a task named %s: checkout -- %s)",
				args[0], nearCommand(cmd, args[0]), args[0], args[0])}
		}
		return a.checkout(cmd, args[0], co)
	}
	alias := &cobra.Command{
		Use:   "checkout <task-id>",
		Short: "Check a task out (the same as checkout <task-id>; use it for tasks named like a command)",
		Example: `  checkout checkout task-d4e5 --timeout 2h
  checkout checkout release       # a task literally named "release"`,
		Args:              exactArgs(1, "a task id"),
		ValidArgsFunction: a.completeOpenTasks,
	}
	aliasFlags := a.checkoutFlags(alias)
	alias.RunE = func(cmd *cobra.Command, args []string) error { return a.checkout(cmd, args[0], aliasFlags) }

	root.AddCommand(alias, a.releaseCmd(), a.statusCmd(), a.listCmd(), a.renewCmd(), a.completeCmd(),
		a.heartbeatCmd(), a.claimCmd(), a.watchCmd(), a.inboxCmd(), a.eventsCmd(), a.tasksCmd(), a.queuesCmd(),
		a.agentsCmd(), a.mcpCmd(), a.configCmd(), a.versionCmd())

	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		switch c.Name() {
		case "help":
			c.Example = "  checkout help\n  checkout help release\n  checkout release --help"
		case "completion":
			c.Long = `Prints the script that makes your shell complete checkout's commands and
flags, and task ids from the server when an API key is set (open tasks for
checkout and status, live leases for release, renew and complete).`
			c.Example = `  source <(checkout completion bash)                 # bash, this shell
  checkout completion zsh > "${fpath[1]}/_checkout"  # zsh, for good
  checkout completion fish | source                  # fish
  checkout completion powershell | Out-String | Invoke-Expression`
			for _, sh := range c.Commands() {
				sh.Example = "  checkout completion " + sh.Name() + " --help   # how to install it"
			}
		}
	}
	return root
}

// exactArgs checks the number of positional arguments, naming the command's
// own help when it is wrong.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return &usageError{fmt.Sprintf("%s needs %s (see %s --help)", cmd.CommandPath(), what, cmd.CommandPath())}
		}
		return nil
	}
}

func maxArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > n {
			return &usageError{fmt.Sprintf("%s takes at most %s (see %s --help)", cmd.CommandPath(), what, cmd.CommandPath())}
		}
		return nil
	}
}

// groupArgs is the Args of a command that only groups subcommands: a word
// that is not one of them is an unknown command.
func groupArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return unknownCommand(cmd, args[0])
	}
	return nil
}

func (a *app) client() (*client.Client, *settings, error) {
	s, err := a.resolve()
	if err != nil {
		return nil, nil, err
	}
	if s.key.value == "" {
		return nil, nil, &usageError{"no API key: set CHECKOUT_API_KEY, pass --api-key, or use a profile (see checkout config --help)"}
	}
	return client.New(s.url.value, s.key.value, client.WithUserAgent("checkout-cli/1")), s, nil
}

// call runs one request and prints its answer: the server's JSON with
// --json, or what show writes.
func (a *app) call(cmd *cobra.Command, do func(ctx context.Context, c *client.Client, s *settings) (show func(w io.Writer), err error)) error {
	c, s, err := a.client()
	if err != nil {
		return err
	}
	var rec client.Response
	ctx := client.RecordResponse(cmd.Context(), &rec)
	show, err := do(ctx, c, s)
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

// identityFlags are the flags of every lease command: whom it acts as, and
// under which run.
func (a *app) identityFlags(cmd *cobra.Command, agentHelp string) {
	cmd.Flags().StringVar(&a.agentOpt, "agent", "", agentHelp+" (default: $CHECKOUT_AGENT, the profile's agent, or the key's own agent; another agent's id: admins only)")
}

func (a *app) runIDFlag(cmd *cobra.Command, help string) {
	cmd.Flags().StringVar(&a.runIDOpt, "run-id", "", help+" (default: $CHECKOUT_RUN_ID)")
}

type checkoutFlags struct {
	timeout, reason string
	watch           bool
}

func (a *app) checkoutFlags(cmd *cobra.Command) *checkoutFlags {
	f := &checkoutFlags{}
	fl := cmd.Flags()
	fl.StringVar(&f.timeout, "timeout", "", "lease length, e.g. 30m or 2h, 1s to 24h (server default 30m)")
	fl.StringVar(&f.reason, "reason", "", "why you take the task")
	a.identityFlags(cmd, "the agent the checkout is for")
	a.runIDFlag(cmd, "the run's lease token; the same run checking out again gets the same lease")
	fl.BoolVar(&f.watch, "watch", false, "if the task is held, be told in your inbox when it is released")
	return f
}

// alreadyHeld reports whether a lease the server answered with 200 was
// held before this request: a retried checkout of the same run gets its
// lease back unchanged, so less than its timeout is left. (A grant has its
// whole timeout left, give or take the second the answer took.)
func alreadyHeld(co client.Checkout) bool {
	return co.TimeoutSeconds-co.RemainingSeconds > 1
}

// ownLease reports whether a conflict's holder is the agent the checkout
// was for: the server says so, or the agent named is the holder.
func ownLease(ce *client.ConflictError, s *settings) bool {
	return ce.SameAgent || s.agent.value != "" && ce.Holder.AgentID == s.agent.value
}

func (a *app) checkout(cmd *cobra.Command, taskID string, f *checkoutFlags) error {
	timeout, err := duration("timeout", f.timeout)
	if err != nil {
		return err
	}
	return a.call(cmd, func(ctx context.Context, c *client.Client, s *settings) (func(io.Writer), error) {
		co, err := c.Checkout(ctx, taskID, client.CheckoutRequest{
			Timeout: timeout, Reason: f.reason, RunID: s.runID.value, Watch: f.watch, AgentID: s.agent.value,
		})
		var ce *client.ConflictError
		switch {
		case errors.As(err, &ce) && ownLease(ce, s):
			return func(w io.Writer) { printHeld(w, ce.Holder) }, nil
		case errors.As(err, &ce):
			return func(w io.Writer) { printDenied(w, taskID, ce.Holder, f.watch) }, &exitStatus{exitConflict}
		case err != nil:
			return nil, err
		case alreadyHeld(co):
			return func(w io.Writer) { printHeld(w, co) }, nil
		}
		return func(w io.Writer) { printAcquired(w, co, s.runID.value != "") }, nil
	})
}

// holderFlags are the flags of renew, release and complete.
type holderFlags struct {
	fence int64
}

func (a *app) holderFlags(cmd *cobra.Command) *holderFlags {
	f := &holderFlags{}
	a.identityFlags(cmd, "the holder to act as")
	a.runIDFlag(cmd, "only if the lease has this run id")
	cmd.Flags().Int64Var(&f.fence, "fence", 0, "only if the lease has this fence; alone, it adopts your agent's lease of another run")
	return f
}

// runID is the run id a holder request names: --run-id, or
// CHECKOUT_RUN_ID unless --fence names the lease instead (a lease of
// another run is adopted by its fence alone).
func (f *holderFlags) runID(s *settings) string {
	if s.runID.from == "CHECKOUT_RUN_ID" && f.fence != 0 {
		return ""
	}
	return s.runID.value
}

func (a *app) releaseCmd() *cobra.Command {
	var force bool
	var reason string
	cmd := &cobra.Command{
		Use:   "release <task-id>",
		Short: "Release a task you hold (admins: --force releases anyone's)",
		Long: `Gives a task back without finishing it: it goes back to todo at once and the
agents watching it get an inbox message. Only the holder may release it;
an admin may --force anyone's (audited as force_release).`,
		Example: `  checkout release task-d4e5 --reason "blocked on review"
  checkout release task-d4e5 --fence 3          # a lease of your agent's earlier run
  checkout release task-d4e5 --force --reason stuck   # admins`,
		Args:              exactArgs(1, "a task id"),
		ValidArgsFunction: a.completeLeases,
	}
	hf := a.holderFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *client.Client, s *settings) (func(io.Writer), error) {
			req := client.ReleaseRequest{Force: force, Reason: reason, RunID: hf.runID(s), Fence: hf.fence, AgentID: s.agent.value}
			if force {
				req.AgentID, req.RunID = "", ""
			}
			r, err := c.Release(ctx, args[0], req)
			return func(w io.Writer) {
				fmt.Fprintf(w, "Checkout released: %s\n  Released by: %s\n  Held: %s\n", r.TaskID, r.ReleasedBy,
					compact(time.Duration(r.HeldSeconds)*time.Second))
			}, err
		})
	}
	cmd.Flags().BoolVar(&force, "force", false, "release whoever holds it (admins only; audited)")
	cmd.Flags().StringVar(&reason, "reason", "", "why")
	return cmd
}

func (a *app) statusCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status <task-id>",
		Short: "Show whether a task is checked out, and by whom",
		Long: `Shows whether a live lease holds the task, whose it is and until when. With
--agent (or a profile's agent) it also says whether that agent is the holder.`,
		Example: `  checkout status task-d4e5
  checkout status task-d4e5 --agent agent-a1b2
  checkout status task-d4e5 --json`,
		Args:              exactArgs(1, "a task id"),
		ValidArgsFunction: a.completeOpenTasks,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Client, s *settings) (func(io.Writer), error) {
				st, err := c.Status(ctx, args[0])
				return func(w io.Writer) { printLock(w, st, s.agent.value) }, err
			})
		},
	}
	a.identityFlags(cmd, "say whether this agent holds it")
	return cmd
}

func (a *app) listCmd() *cobra.Command {
	var agent string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the live checkouts (all, or one agent's)",
		Example: `  checkout list
  checkout list --agent agent-a1b2
  checkout list --json`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Client, _ *settings) (func(io.Writer), error) {
				cos, err := c.ListCheckouts(ctx, agent)
				return func(w io.Writer) { printCheckouts(w, cos) }, err
			})
		},
	}
	cmd.Flags().StringVar(&agent, "agent", "", "only this agent's checkouts")
	return cmd
}

func (a *app) renewCmd() *cobra.Command {
	var timeout string
	cmd := &cobra.Command{
		Use:   "renew <task-id>",
		Short: "Extend your lease on a task",
		Long: `Extends the lease you hold: it now ends --timeout from now (default: the
lease's own timeout). Renew well before it ends, for example at a third of it.`,
		Example: `  checkout renew task-d4e5
  checkout renew task-d4e5 --timeout 1h
  checkout renew task-d4e5 --fence 3            # a lease of your agent's earlier run`,
		Args:              exactArgs(1, "a task id"),
		ValidArgsFunction: a.completeLeases,
	}
	hf := a.holderFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		d, err := duration("timeout", timeout)
		if err != nil {
			return err
		}
		return a.call(cmd, func(ctx context.Context, c *client.Client, s *settings) (func(io.Writer), error) {
			co, err := c.Renew(ctx, args[0], client.RenewRequest{Timeout: d, RunID: hf.runID(s), Fence: hf.fence, AgentID: s.agent.value})
			return func(w io.Writer) {
				fmt.Fprintf(w, "Checkout renewed: %s\n", co.TaskID)
				timeoutLine(w, co)
			}, err
		})
	}
	cmd.Flags().StringVar(&timeout, "timeout", "", "new lease length from now (default: the lease's own)")
	return cmd
}

func (a *app) completeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "complete <task-id>",
		Short: "Mark a task you hold as done (ends the lease)",
		Example: `  checkout complete task-d4e5
  checkout complete task-d4e5 --fence 3         # a lease of your agent's earlier run`,
		Args:              exactArgs(1, "a task id"),
		ValidArgsFunction: a.completeLeases,
	}
	hf := a.holderFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *client.Client, s *settings) (func(io.Writer), error) {
			t, err := c.Complete(ctx, args[0], client.CompleteRequest{RunID: hf.runID(s), Fence: hf.fence, AgentID: s.agent.value})
			return func(w io.Writer) {
				fmt.Fprintf(w, "Task completed: %s\n", t.TaskID)
				if t.DurationSeconds != nil {
					fmt.Fprintf(w, "  Duration: %s\n", compact(time.Duration(*t.DurationSeconds)*time.Second))
				}
			}, err
		})
	}
	return cmd
}

func (a *app) heartbeatCmd() *cobra.Command {
	var ttl string
	cmd := &cobra.Command{
		Use:   "heartbeat",
		Short: "Tell the server you are alive (after the first one, missing them ends your leases)",
		Example: `  checkout heartbeat
  while sleep 30; do checkout heartbeat --ttl 90s; done`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := duration("ttl", ttl)
			if err != nil {
				return err
			}
			return a.call(cmd, func(ctx context.Context, c *client.Client, _ *settings) (func(io.Writer), error) {
				h, err := c.Heartbeat(ctx, d)
				return func(w io.Writer) {
					fmt.Fprintf(w, "Heartbeat: %s\n  Alive until: %s\n", h.AgentID, stamp(h.ExpiresAt))
				}, err
			})
		},
	}
	cmd.Flags().StringVar(&ttl, "ttl", "", "how long this heartbeat keeps you alive, 1s to 1h (server default 90s)")
	return cmd
}

func (a *app) claimCmd() *cobra.Command {
	var timeout, reason, wait string
	var queues []string
	cmd := &cobra.Command{
		Use:   "claim",
		Short: "Check out the best open task of some queues",
		Long: `Checks out the open task of the given queues (default: the "default" queue)
with the highest priority, the oldest first within a priority. With --wait it
waits up to that long (at most 20s) for a task to become available. With a
run id (--run-id or CHECKOUT_RUN_ID) that already holds a lease, the claim is
that lease again: a retried claim is the same claim.`,
		Example: `  checkout claim
  checkout claim --queue backend --wait 20s
  checkout claim --queue backend --queue research --timeout 10m --reason "next in line"
  checkout claim --agent agent-c3d4             # admins: for another agent`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := duration("timeout", timeout)
			if err != nil {
				return err
			}
			w, err := duration("wait", wait)
			if err != nil {
				return err
			}
			return a.call(cmd, func(ctx context.Context, c *client.Client, s *settings) (func(io.Writer), error) {
				co, err := c.Claim(ctx, client.ClaimRequest{Timeout: d, Reason: reason, RunID: s.runID.value, AgentID: s.agent.value, Queues: queues, Wait: w})
				if err == nil && alreadyHeld(co) {
					return func(w io.Writer) { printHeld(w, co) }, nil
				}
				return func(w io.Writer) { printAcquired(w, co, s.runID.value != "") }, err
			})
		},
	}
	cmd.Flags().StringVar(&timeout, "timeout", "", "lease length, 1s to 24h (server default 30m)")
	cmd.Flags().StringVar(&reason, "reason", "", "why you take the task")
	cmd.Flags().StringArrayVar(&queues, "queue", nil, "claim from this queue (repeat for several; default: the default queue)")
	cmd.Flags().StringVar(&wait, "wait", "", "wait up to this long for a task, up to 20s (default: answer at once)")
	a.identityFlags(cmd, "the agent the claim is for")
	a.runIDFlag(cmd, "the run's lease token")
	return cmd
}

func (a *app) watchCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "watch <task-id>",
		Short: "Get an inbox message when a task becomes available",
		Example: `  checkout watch task-d4e5
  checkout task-d4e5 --watch     # check out, or watch when it is held`,
		Args:              exactArgs(1, "a task id"),
		ValidArgsFunction: a.completeOpenTasks,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Client, _ *settings) (func(io.Writer), error) {
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
		Example: `  checkout inbox
  checkout inbox delete 1774017480000.1.task-d4e5`,
		Args: groupArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Client, _ *settings) (func(io.Writer), error) {
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
		Use:     "delete <message-id>",
		Short:   "Delete an inbox message",
		Example: `  checkout inbox delete 1774017480000.1.task-d4e5`,
		Args:    exactArgs(1, "a message id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Client, _ *settings) (func(io.Writer), error) {
				err := c.DeleteMessage(ctx, args[0])
				return func(w io.Writer) { fmt.Fprintf(w, "Message deleted: %s\n", args[0]) }, err
			})
		},
	})
	return cmd
}

func (a *app) eventsCmd() *cobra.Command {
	var follow bool
	var since, types string
	var interval time.Duration
	var limit int
	cmd := &cobra.Command{
		Use:   "events [task-id]",
		Short: "Show a task's audit trail, or every transition across the fleet",
		Long: `With a task id: that task's audit trail, oldest first.

Without one: the fleet feed, every transition of every task, oldest first,
from --since (default: the last hour). With --follow it keeps going,
printing each transition once, in order, about two seconds after it
happened, until interrupted; with --json each event is one JSON line.`,
		Example: `  checkout events task-d4e5
  checkout events task-d4e5 --json
  checkout events --since 2026-03-20T14:00:00Z
  checkout events --follow --type release,timeout,agent_death,force_release
  checkout events --follow --json | jq -c .`,
		Args:              maxArgs(1, "one task id"),
		ValidArgsFunction: a.completeOpenTasks,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				if follow || since != "" || types != "" {
					return &usageError{"--follow, --since and --type are for the fleet feed: give no task id (see checkout events --help)"}
				}
				return a.taskEvents(cmd, args[0])
			}
			req := client.FeedRequest{Limit: limit}
			if since != "" {
				t, err := time.Parse(time.RFC3339Nano, since)
				if err != nil {
					d, derr := time.ParseDuration(since)
					if derr != nil || d <= 0 {
						return &usageError{fmt.Sprintf("invalid --since %q: want an RFC 3339 time or a duration such as 30m", since)}
					}
					t = time.Now().Add(-d)
				}
				req.Since = t
			}
			if types != "" {
				req.Types = strings.Split(types, ",")
			}
			if !follow {
				return a.call(cmd, func(ctx context.Context, c *client.Client, _ *settings) (func(io.Writer), error) {
					page, err := c.Feed(ctx, req)
					return func(w io.Writer) {
						fmt.Fprintln(w, "## Events: the fleet")
						fmt.Fprintln(w)
						if len(page.Events) == 0 {
							fmt.Fprintln(w, "No events.")
							return
						}
						rows := make([][]string, len(page.Events))
						for i, e := range page.Events {
							rows[i] = []string{stamp(e.At), e.Type, e.TaskID, orDash(e.AgentID), strconv.FormatInt(e.Fence, 10), held(e), orDash(e.By), orDash(e.Reason)}
						}
						table(w, []string{"At", "Event", "Task", "Agent", "Fence", "Held", "By", "Reason"}, rows)
						fmt.Fprintf(w, "\nMore: checkout events --follow, or the API with cursor=%s\n", page.NextCursor)
					}, err
				})
			}
			c, _, err := a.client()
			if err != nil {
				return err
			}
			err = c.FollowFeed(cmd.Context(), req, interval, func(e client.Event) error {
				if a.json {
					b, err := json.Marshal(e)
					if err != nil {
						return err
					}
					_, err = fmt.Fprintf(a.stdout, "%s\n", b)
					return err
				}
				_, err := fmt.Fprintf(a.stdout, "%s  %-13s %-24s agent %s  fence %d  held %s  by %s  %s\n",
					stamp(e.At), e.Type, e.TaskID, orDash(e.AgentID), e.Fence, held(e), orDash(e.By), orDash(e.Reason))
				return err
			})
			if errors.Is(err, context.Canceled) {
				return nil // interrupted: the normal end of a follow
			}
			return err
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep following the fleet feed until interrupted")
	cmd.Flags().StringVar(&since, "since", "", "start of the fleet feed: an RFC 3339 time, or a duration ago such as 30m (default 1h)")
	cmd.Flags().StringVar(&types, "type", "", "keep only these event types, comma-separated")
	cmd.Flags().IntVar(&limit, "limit", 0, "events per request, 1 to 1000 (default 100)")
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "with --follow: how often to ask once caught up")
	return cmd
}

func held(e client.Event) string {
	if e.HeldSeconds == nil {
		return "-"
	}
	return compact(time.Duration(*e.HeldSeconds) * time.Second)
}

func (a *app) taskEvents(cmd *cobra.Command, taskID string) error {
	return a.call(cmd, func(ctx context.Context, c *client.Client, _ *settings) (func(io.Writer), error) {
		evs, err := c.Events(ctx, taskID)
		return func(w io.Writer) {
			fmt.Fprintf(w, "## Events: %s\n\n", taskID)
			if len(evs) == 0 {
				fmt.Fprintln(w, "No events.")
				return
			}
			rows := make([][]string, len(evs))
			for i, e := range evs {
				rows[i] = []string{stamp(e.At), e.Type, e.AgentID, e.RunID, strconv.FormatInt(e.Fence, 10), held(e), orDash(e.By), orDash(e.Reason)}
			}
			table(w, []string{"At", "Event", "Agent", "Run", "Fence", "Held", "By", "Reason"}, rows)
		}, err
	})
}

func (a *app) tasksCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tasks",
		Short: "Create, list and show tasks",
		Example: `  checkout tasks add task-d4e5 --title "Fix login bug"
  checkout tasks list --status todo
  checkout tasks show task-d4e5`,
		Args: groupArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	var title, description, queue, metadata string
	var priority int
	add := &cobra.Command{
		Use:   "add [task-id]",
		Short: "Create a task (the server picks the id when none is given)",
		Example: `  checkout tasks add task-d4e5 --title "Fix login bug"
  checkout tasks add --title "Write release notes"   # the server picks the id
  checkout tasks add bug-17 --title "Login fails" --queue backend --priority 9 --description "Since 2.3"`,
		Args: maxArgs(1, "one task id"),
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
		Use:   "cancel <task-id>",
		Short: "Cancel a task (a live lease on it: its holder or an admin only)",
		Long: `Cancels a task. If it is checked out, only its holder or an admin may, and
the lease ends (a cancel event); its watchers are told.`,
		Example:           `  checkout tasks cancel task-d4e5`,
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
		Short:   "Reopen a done or cancelled task (it becomes todo)",
		Example: `  checkout tasks reopen task-d4e5`,
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
		Use:   "list",
		Short: "List tasks, one page at a time",
		Example: `  checkout tasks list
  checkout tasks list --status todo --limit 20
  checkout tasks list --cursor <next-cursor>`,
		Args: exactArgs(0, "no arguments"),
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
	list.Flags().IntVar(&limit, "limit", 0, "page size, 1 to 1000 (server default 100)")
	list.Flags().StringVar(&cursor, "cursor", "", "the next page, from a previous listing")
	show := &cobra.Command{
		Use:               "show <task-id>",
		Short:             "Show one task",
		Example:           `  checkout tasks show task-d4e5`,
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
		Use:   "edit <task-id>",
		Short: "Change a task's title, description, queue, priority or metadata",
		Long: `Changes the fields given and leaves the others; a checked-out task keeps its
lease. With --if-version the change is made only if the task is still at that
version (see "tasks show"); otherwise the answer is version_mismatch.`,
		Example: `  checkout tasks edit task-d4e5 --priority 9
  checkout tasks edit task-d4e5 --queue research --title "Look into login" --if-version 4`,
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

func (a *app) agentsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agents",
		Short: "Register, list and remove agents (admins only)",
		Example: `  checkout agents add researcher --id agent-a1b2
  checkout agents list
  checkout agents remove agent-a1b2`,
		Args: groupArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	var id string
	var admin bool
	add := &cobra.Command{
		Use:   "add <name>",
		Short: "Register an agent and print its API key (shown once)",
		Example: `  checkout agents add researcher --id agent-a1b2
  checkout agents add ops --admin`,
		Args: exactArgs(1, "a name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Client, _ *settings) (func(io.Writer), error) {
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
		Use:     "list",
		Short:   "List the registered agents",
		Example: `  checkout agents list`,
		Args:    exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Client, _ *settings) (func(io.Writer), error) {
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
		Use:     "remove <agent-id>",
		Short:   "Remove an agent: its key stops working and its leases end",
		Example: `  checkout agents remove agent-a1b2`,
		Args:    exactArgs(1, "an agent id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Client, _ *settings) (func(io.Writer), error) {
				err := c.RemoveAgent(ctx, args[0])
				return func(w io.Writer) { fmt.Fprintf(w, "Agent removed: %s\n", args[0]) }, err
			})
		},
	}
	cmd.AddCommand(add, list, remove)
	return cmd
}

func (a *app) mcpCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the checkout tools to an MCP client over stdio",
		Long: `Runs a Model Context Protocol server on stdin/stdout, acting as the agent
whose key the settings give (CHECKOUT_API_KEY, --api-key or a profile)
against the server they name. Its tools: checkout_task, claim_task,
renew_task, complete_task, release_task, task_status, list_checkouts,
list_tasks, get_task, watch_task, read_inbox, ack_message and heartbeat.

One process is one agent run: its checkouts share one run id. A process
that restarted finds the leases its agent took under the old run; it adopts
one with checkout_task adopt=true, or by giving the lease's fence to
renew_task, release_task or complete_task.`,
		Example: `  checkout mcp
  checkout mcp --profile researcher
  CHECKOUT_URL=http://127.0.0.1:3100 CHECKOUT_API_KEY=ck_... checkout mcp`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, s, err := a.client()
			if err != nil {
				return err
			}
			return mcpserver.Serve(cmd.Context(), c, a.stdin, a.stdout, mcpserver.Options{AgentID: s.agent.value, Version: versionOnly()})
		},
	}
	a.identityFlags(cmd, "the agent to act as")
	return cmd
}
