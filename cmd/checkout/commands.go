package main

// The root command, what every command shares (the client, the identity
// and lease flags, how an answer is printed), and the lease commands:
// checkout, release, fail, status, list, renew, complete, heartbeat, claim,
// watch and inbox. Their help is in help.go.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/checkout-dev/checkout/client"
	"github.com/checkout-dev/checkout/lease"
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

	// helpErr is the error of a help flag given with a word that is no
	// command ("checkout relase --help"): the help is not printed.
	helpErr error
	// jsonOf, when set, makes what --json prints of the server's answer:
	// a command whose outcome is not the answer's as sent sets it.
	jsonOf func(body []byte) []byte

	resolved *settings
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "checkout <task-id> | checkout <command>",
		Short:         rootShort,
		Long:          rootLong,
		Example:       rootExample,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.Args = func(cmd *cobra.Command, args []string) error {
		if err := nearMiss(cmd, args); err != nil {
			return err
		}
		return maxArgs(1, "one task id")(cmd, args)
	}
	// --version is checked here rather than by cobra, which answers it
	// before the arguments: "checkout relase --version" is the unknown
	// command it is without the flag, and --json prints JSON.
	var showVersion bool
	root.Flags().BoolVarP(&showVersion, "version", "v", false, "print the version of this binary (the same as checkout version)")
	// Cobra answers a help flag before it checks the arguments: a word
	// that is no command, with --help, is the unknown command it is
	// without, not the help of the command above it.
	helpOf := root.HelpFunc()
	root.SetHelpFunc(func(cmd *cobra.Command, args []string) {
		if err := notACommand(root, cmd); err != nil {
			a.helpErr = err
			return
		}
		helpOf(cmd, args)
	})
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		if cmd == root {
			// "checkout relase t --force": the slip, not the flag, is the error.
			if near := nearMiss(cmd, cmd.Flags().Args()); near != nil {
				return near
			}
		}
		if cmd.Name() == "release" && (strings.HasPrefix(err.Error(), "unknown flag: --outcome") || strings.HasPrefix(err.Error(), "unknown flag: --error")) {
			// API.md's release body has outcome and error; here a
			// failed attempt is a command of its own.
			return &usageError{fmt.Sprintf("%s: to release as a failed attempt, use checkout fail <task-id> --error TEXT (see checkout fail --help)", flagError(err))}
		}
		return &usageError{fmt.Sprintf("%s (see %s --help)", flagError(err), cmd.CommandPath())}
	})
	pf := root.PersistentFlags()
	pf.StringVar(&a.flagURL, "url", "", "server URL (default: $CHECKOUT_URL, the profile's url, or "+defaultURL+")")
	pf.StringVar(&a.flagKey, "api-key", "", "API key (default: $CHECKOUT_API_KEY, or the profile's key_file)")
	pf.StringVar(&a.profileName, "profile", "", "use this profile of the profile file (default: $CHECKOUT_PROFILE, or default_profile)")
	pf.BoolVar(&a.json, "json", false, "print the server's JSON answer")

	co := a.checkoutFlags(root)
	root.ValidArgsFunction = a.completeOpenTasks
	root.RunE = func(cmd *cobra.Command, args []string) error {
		switch {
		case showVersion && len(args) > 0:
			return &usageError{"--version takes no task id: checkout --version, or checkout <task-id> without it (see checkout --help)"}
		case showVersion:
			return a.printVersion()
		case len(args) == 0 && cmd.Flags().NFlag() == 0 && cmd.Flags().ArgsLenAtDash() < 0:
			return cmd.Help() // plain "checkout"
		case len(args) == 0 || args[0] == "":
			// "checkout $T --timeout 30m" with T unset: not a request for
			// the help, and never a success a script would take for a
			// checkout.
			return exactArgs(1, "task id")(cmd, args)
		}
		return a.checkout(cmd, args[0], co)
	}
	alias := &cobra.Command{
		Use:               "checkout <task-id>",
		Short:             checkoutAliasShort,
		Example:           checkoutAliasExample,
		Args:              exactArgs(1, "task id"),
		ValidArgsFunction: a.completeOpenTasks,
	}
	aliasFlags := a.checkoutFlags(alias)
	alias.RunE = func(cmd *cobra.Command, args []string) error { return a.checkout(cmd, args[0], aliasFlags) }

	root.AddCommand(alias, a.releaseCmd(), a.failCmd(), a.statusCmd(), a.listCmd(), a.renewCmd(), a.completeCmd(),
		a.heartbeatCmd(), a.whoamiCmd(), a.claimCmd(), a.watchCmd(), a.inboxCmd(), a.eventsCmd(), a.tasksCmd(), a.queuesCmd(),
		a.agentsCmd(), a.mcpCmd(), a.configCmd(), a.versionCmd())

	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		switch c.Name() {
		case "help":
			c.Example = "  checkout help\n  checkout help release\n  checkout release --help"
			// A word that is no command is an unknown command, as
			// elsewhere: root (and each group) takes words as arguments,
			// so cobra's help would show the root's (or the group's) help
			// for it, and succeed.
			c.RunE = func(cmd *cobra.Command, args []string) error {
				target, rest, err := cmd.Root().Find(args)
				if err != nil {
					return err
				}
				if len(rest) > 0 {
					return unknownCommand(target, rest[0])
				}
				target.InitDefaultHelpFlag()
				target.InitDefaultVersionFlag()
				return target.Help()
			}
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
			// A word that is not a shell is an error, not the help.
			c.Args = func(cmd *cobra.Command, args []string) error {
				if len(args) > 0 {
					return unknownShell(cmd, args[0])
				}
				return nil
			}
			c.RunE = func(cmd *cobra.Command, args []string) error { return cmd.Help() }
		}
	}
	return root
}

// flagError is what a flag that did not parse says: a value that is not
// of the flag's type names the flag and the type, not the parser's error
// ("strconv.ParseInt: parsing ...").
func flagError(err error) string {
	var ive *pflag.InvalidValueError
	if !errors.As(err, &ive) {
		return err.Error()
	}
	msg := fmt.Sprintf("invalid value %q for --%s", ive.GetValue(), ive.GetFlag().Name)
	if errors.Is(err, strconv.ErrRange) {
		return msg + ": out of range"
	}
	if _, ok := ive.GetFlag().Value.(*fenceValue); ok {
		return msg + ": want a fence, a whole number 1 or more"
	}
	switch ive.GetFlag().Value.Type() {
	case "int", "int8", "int16", "int32", "int64", "count":
		return msg + ": want an integer"
	case "uint", "uint8", "uint16", "uint32", "uint64":
		return msg + ": want an integer, 0 or more"
	case "float32", "float64":
		return msg + ": want a number"
	case "duration":
		return msg + `: want a duration such as "2s" or "1m"`
	case "bool":
		return msg + ": want true or false"
	}
	return msg
}

// nearMiss is the usage error for a first word of root's one typing slip
// away from a command ("checkout relase t"), or nil. A word after "--" is
// a task id, whatever it looks like.
func nearMiss(root *cobra.Command, args []string) error {
	if len(args) == 0 || root.Flags().ArgsLenAtDash() == 0 {
		return nil
	}
	near := nearCommand(root, args[0])
	if near == "" {
		return nil
	}
	return &usageError{fmt.Sprintf("unknown command %q: did you mean %s? (a task named %s: checkout -- %s)", args[0], near, args[0], args[0])}
}

// notACommand is the usage error for the words given to a command that
// has subcommands when the first is no command of it (a slip of one for
// the root, whose other words are task ids), or nil.
func notACommand(root, cmd *cobra.Command) error {
	if !cmd.HasSubCommands() {
		return nil
	}
	words := cmd.Flags().Args()
	if cmd == root {
		return nearMiss(cmd, words)
	}
	if cmd.Args == nil || len(words) == 0 {
		return nil
	}
	return cmd.Args(cmd, words)
}

// exactArgs checks that a command has n positional arguments, none or one
// (what: "task id"), naming the command's own help when it has not.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		var msg string
		switch {
		case len(args) == n && slices.Contains(args, ""):
			// An empty id (an unset variable, quoted) names nothing: the
			// server would answer a path it does not know.
			msg = "needs " + withArticle(what) + ", got an empty one"
		case len(args) == n:
			return nil
		case n == 0:
			msg = "takes no arguments"
		case len(args) < n:
			msg = "needs " + withArticle(what)
		default:
			msg = "takes exactly one " + what
		}
		return &usageError{fmt.Sprintf("%s %s (see %s --help)", cmd.CommandPath(), msg, cmd.CommandPath())}
	}
}

// withArticle is "a task id", "an agent id".
func withArticle(noun string) string {
	if strings.ContainsAny(noun[:1], "aeiou") {
		return "an " + noun
	}
	return "a " + noun
}

func maxArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > n {
			return &usageError{fmt.Sprintf("%s takes at most %s (see %s --help)", cmd.CommandPath(), what, cmd.CommandPath())}
		}
		return nil
	}
}

// checkLimit refuses a --limit given outside 1 to lease.MaxListLimit,
// which the server would refuse, or (0) take for its default.
func checkLimit(cmd *cobra.Command, limit int) error {
	if cmd.Flags().Changed("limit") && (limit < 1 || limit > lease.MaxListLimit) {
		return &usageError{fmt.Sprintf("invalid value %q for --limit: want 1 to %d (see %s --help)", strconv.Itoa(limit), lease.MaxListLimit, cmd.CommandPath())}
	}
	return nil
}

// listFlag is a list flag's values (comma-separated, or the flag
// repeated) as items: each trimmed of blanks, and blank ones dropped.
func listFlag(values []string) []string {
	items := []string{}
	for _, v := range values {
		for _, item := range strings.Split(v, ",") {
			if item = strings.TrimSpace(item); item != "" {
				items = append(items, item)
			}
		}
	}
	return items
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
	if s.keyErr != nil {
		return nil, nil, s.keyErr
	}
	if err := checkURL(s.url); err != nil {
		return nil, nil, err
	}
	if err := checkAgent(s.agent); err != nil {
		return nil, nil, err
	}
	if err := checkRunID(s.runID); err != nil {
		return nil, nil, err
	}
	if s.key.value == "" {
		return nil, nil, &usageError{"no API key: set CHECKOUT_API_KEY, pass --api-key, or use a profile (see checkout config --help)"}
	}
	if err := checkKey(s.key); err != nil {
		return nil, nil, err
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
	if rs := (*restated)(nil); s.agent.value != "" && !errors.As(err, &rs) {
		// The agent the command acts as, which the server's sentence
		// does not name.
		err = restate(err, client.ErrAgentNotFound, fmt.Sprintf("agent %s does not exist (from %s)", s.agent.value, s.agent.from))
	}
	if a.json {
		// The server's answer, and only a checkout server's JSON: what
		// another server answered (an HTML page) is not for a JSON reader.
		var nse *client.NotServerError
		if rec.Body != nil && json.Valid(rec.Body) && !errors.As(err, &nse) {
			body := rec.Body
			if a.jsonOf != nil {
				body = a.jsonOf(body)
			}
			fmt.Fprintf(a.stdout, "%s\n", bytes.TrimRight(body, "\n"))
		}
		var es *exitStatus
		if err != nil && errors.As(err, &es) {
			return es
		}
		return err
	}
	var es *exitStatus
	if show != nil && (err == nil || errors.As(err, &es)) {
		a.warnZone()
		show(a.stdout)
	}
	return err
}

// duration reads the duration flag --flag, "" being 0 (not given). It
// checks the server's range for the field here, so that the error names
// the flag and gives examples inside the range (the server's own message
// names the JSON field).
func duration(flag, v string, r lease.DurationRange) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err == nil && r.Whole && d >= r.Min && d <= r.Max && d%time.Second != 0 {
		// "1.5s" is in the range: say what it lacks.
		return 0, &usageError{fmt.Sprintf("invalid duration %q for --%s: want whole seconds, such as %s", v, flag, durationExamples(r))}
	}
	if err != nil || r.Check(d) != nil {
		return 0, durationError(flag, v, r)
	}
	return d, nil
}

func durationError(flag, v string, r lease.DurationRange) error {
	return &usageError{fmt.Sprintf("invalid duration %q for --%s: want %s to %s, such as %s", v, flag, compact(r.Min), compact(r.Max), durationExamples(r))}
}

// durationExamples is two durations inside r, quoted: "90s" or "30m"
// where they fit, else a quarter of the most and the most ("5s" or "20s").
func durationExamples(r lease.DurationRange) string {
	var ex []string
	for _, d := range []time.Duration{90 * time.Second, 30 * time.Minute, r.Max / 4, r.Max} {
		q := strconv.Quote(compact(d))
		if len(ex) < 2 && r.Check(d) == nil && !slices.Contains(ex, q) {
			ex = append(ex, q)
		}
	}
	return strings.Join(ex, " or ")
}

// identityFlags are the flags of every lease command: whom it acts as, and
// under which run.
func (a *app) identityFlags(cmd *cobra.Command, agentHelp string) {
	a.agentFlag(cmd, agentHelp+" (default: the profile's agent with the profile's key, else $CHECKOUT_AGENT, else the key's own agent; another agent's id: admins only)")
}

func (a *app) agentFlag(cmd *cobra.Command, help string) {
	cmd.Flags().StringVar(&a.agentOpt, "agent", "", help)
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
// granted before this command sent its request, which took took (its
// retries included): a checkout or claim of the same run again gets its
// lease back unchanged. It is judged on the server's clock, whatever the
// local one says: when it answered, that clock was past expires_at less
// remaining_seconds (whole seconds, rounded down) less a second, and a
// grant made for this command is at most took older than that answer. (A
// renewal resets the time left, so that says nothing; a lease granted
// within about a second before the command is taken for its grant.) Only
// a run id the user gave can have held a lease before: under one the
// command generated, the lease is its own grant, however long the
// client's tries took when an answer was lost.
func alreadyHeld(co client.Checkout, s *settings, took time.Duration) bool {
	answeredAfter := co.ExpiresAt.Add(-co.Remaining() - time.Second)
	return s.runID.value != "" && co.LockedAt.Before(answeredAfter.Add(-took))
}

// runID is the run id of a checkout or claim: the user's, or one
// generated for this command.
func runID(s *settings) string {
	if s.runID.value != "" {
		return s.runID.value
	}
	return client.NewRunID()
}

// ownLease reports whether a conflict's holder is the agent the checkout
// was for: the server says so, or the agent named is the holder.
func ownLease(ce *client.ConflictError, s *settings) bool {
	return ce.SameAgent || s.agent.value != "" && ce.Holder.AgentID == s.agent.value
}

func (a *app) checkout(cmd *cobra.Command, taskID string, f *checkoutFlags) error {
	timeout, err := duration("timeout", f.timeout, lease.TimeoutRange)
	if err != nil {
		return err
	}
	return a.call(cmd, func(ctx context.Context, c *client.Client, s *settings) (func(io.Writer), error) {
		sent := time.Now()
		co, err := c.Checkout(ctx, taskID, client.CheckoutRequest{
			Timeout: timeout, Reason: f.reason, RunID: runID(s), Watch: f.watch, AgentID: s.agent.value,
		})
		took := time.Since(sent)
		var ce *client.ConflictError
		var be *client.BlockedError
		var ne *client.NotReadyError
		var se *client.StatusMismatchError
		switch {
		case errors.As(err, &be):
			return func(w io.Writer) { printBlocked(w, taskID, be, f.watch) }, &exitStatus{exitConflict}
		case errors.As(err, &ne):
			if f.watch {
				a.jsonOf = notWatchingJSON
			}
			return func(w io.Writer) { printNotReady(w, taskID, ne, f.watch) }, &exitStatus{exitConflict}
		case errors.As(err, &se):
			if f.watch {
				a.jsonOf = notWatchingJSON
			}
			return func(w io.Writer) { printFinished(w, taskID, se.Status, f.watch) }, &exitStatus{exitConflict}
		case errors.As(err, &ce) && ownLease(ce, s):
			// Not a denial: --json prints the lease you hold, as a
			// checkout that got it answers, not the conflict.
			a.jsonOf = holderJSON
			return func(w io.Writer) { printHeld(w, ce.Holder) }, nil
		case errors.As(err, &ce):
			return func(w io.Writer) { printDenied(w, taskID, ce, f.watch) }, &exitStatus{exitConflict}
		case err != nil:
			return nil, lostAnswer(err, "the checkout of task "+taskID,
				"you may hold it now: run the same command again, which answers with your lease if you got it, and takes the task if not")
		case alreadyHeld(co, s, took):
			return func(w io.Writer) { printHeld(w, co) }, nil
		}
		lastErr, err := a.granted(cmd.Context(), c, co)
		if err != nil {
			return nil, err
		}
		return func(w io.Writer) { printAcquired(w, co, s.runID.value != "", lastErr) }, nil
	})
}

// notWatchingJSON is a refused checkout's answer with "watching": false
// added, for a checkout with --watch the server placed no watch for (a
// task finished or waiting for its time), as its answer says of a held or
// blocked task whose watch list was full.
func notWatchingJSON(body []byte) []byte {
	var fields map[string]json.RawMessage
	b := bytes.TrimRight(body, " \t\r\n")
	if json.Unmarshal(b, &fields) != nil || fields["watching"] != nil || len(b) < 2 {
		return body
	}
	if len(fields) == 0 {
		return []byte(`{"watching":false}`)
	}
	return append(append(bytes.Clone(b[:len(b)-1]), `,"watching":false`...), '}')
}

// holderJSON is the holder of a conflict answer: the lease itself.
func holderJSON(body []byte) []byte {
	var answer struct {
		Holder json.RawMessage `json:"holder"`
	}
	if json.Unmarshal(body, &answer) != nil || len(answer.Holder) == 0 || string(answer.Holder) == "null" {
		return body
	}
	return answer.Holder
}

// granted reads the task of a lease just granted as co, once, for two
// things. First, whether the lease is live: an agent whose heartbeats have
// run out is dead until its next one, and a lease it takes meanwhile is
// granted but not live: it keeps nobody off the task (API.md), so it is no
// checkout to work under, and err says so. Second, for a lease that is not
// its task's first attempt, lastError: the error the task's latest failed
// attempt was given back with, for its new taker to read. A first attempt,
// or --json (which prints the grant's answer alone), needs only the lock
// (GET .../checkout); a later attempt reads the task, whose checkout is
// the same live lease. A task that cannot be read leaves the grant as it
// is, with no last error. The read goes out under ctx without the --json
// recorder: --json prints the grant's own answer.
func (a *app) granted(ctx context.Context, c *client.Client, co client.Checkout) (lastError string, err error) {
	var live *client.Checkout
	if a.json || co.Attempt <= 1 {
		s, err := c.Status(ctx, co.TaskID)
		if err != nil {
			return "", nil
		}
		live = s.Checkout
	} else {
		t, err := c.GetTask(ctx, co.TaskID)
		if err != nil {
			return "", nil
		}
		live, lastError = t.Checkout, t.LastError
	}
	switch {
	case live != nil && live.Fence == co.Fence:
		return lastError, nil
	case live != nil:
		return "", &failure{fmt.Sprintf("task %s was granted (fence %d), but another lease took it over at once (%s, fence %d): do not work on it",
			co.TaskID, co.Fence, oneLine(who(live.AgentName, live.AgentID)), live.Fence), exitConflict}
	}
	return "", &failure{fmt.Sprintf("task %s was granted (fence %d), but the lease is not live: agent %s is dead by heartbeat (its last heartbeat ran out, and a lease it takes before its next one keeps nobody off the task), or the lease has already ended; do not work on it: send checkout heartbeat, then take the task again",
		co.TaskID, co.Fence, co.AgentID), exitConflict}
}

// holderFlags are the flags of renew, release and complete.
type holderFlags struct {
	fence int64
}

func (a *app) holderFlags(cmd *cobra.Command) *holderFlags {
	f := &holderFlags{}
	a.identityFlags(cmd, "the holder to act as")
	a.runIDFlag(cmd, "only if the lease has this run id")
	cmd.Flags().Var((*fenceValue)(&f.fence), "fence", "only if the lease has this fence (1 or more); alone, it adopts your agent's lease of another run")
	return f
}

// fenceValue is the --fence flag: a fence is 1 or more, so 0, which the
// server refuses, is refused here as a usage error rather than taken for
// no fence at all.
type fenceValue int64

func (v *fenceValue) String() string {
	if *v == 0 {
		return ""
	}
	return strconv.FormatInt(int64(*v), 10)
}

func (v *fenceValue) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 {
		return strconv.ErrSyntax
	}
	*v = fenceValue(n)
	return nil
}

func (*fenceValue) Type() string { return "int" }

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
		Use:               "release <task-id>",
		Short:             releaseShort,
		Long:              releaseLong,
		Example:           releaseExample,
		Args:              exactArgs(1, "task id"),
		ValidArgsFunction: a.completeLeases,
	}
	hf := a.holderFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if force && cmd.Flags().Changed("agent") {
			// The server's force release ends whoever's lease is live, and
			// would end another agent's than the one named.
			return &usageError{"--force releases whoever holds the task, whatever --agent names: to release that agent's lease only, leave --force out (an admin releases as the holder with --agent), or pin the force release with --fence or --run-id (see checkout release --help)"}
		}
		return a.call(cmd, func(ctx context.Context, c *client.Client, s *settings) (func(io.Writer), error) {
			req := client.ReleaseRequest{Force: force, Reason: reason, RunID: hf.runID(s), Fence: hf.fence, AgentID: s.agent.value}
			if force {
				// The admin's own identity names no lease of the holder's:
				// --agent and CHECKOUT_RUN_ID (the admin's own run) are left
				// out. A --run-id given pins the force release to that run,
				// as --fence does: a stuck run's lease, not one another run
				// took meanwhile.
				req.AgentID = ""
				if s.runID.from != "--run-id" {
					req.RunID = ""
				}
			}
			r, err := c.Release(ctx, args[0], req)
			err = lostAnswer(err, "the release of task "+args[0],
				namesLease(req.RunID != "" || req.Fence != 0, "checkout status "+args[0]+" to see whether it is still held"))
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

// failCmd is "fail": a release of the caller's lease as a failed attempt,
// with what went wrong.
func (a *app) failCmd() *cobra.Command {
	var errText string
	cmd := &cobra.Command{
		Use:               "fail <task-id>",
		Short:             failShort,
		Long:              failLong,
		Example:           failExample,
		Args:              exactArgs(1, "task id"),
		ValidArgsFunction: a.completeLeases,
	}
	hf := a.holderFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *client.Client, s *settings) (func(io.Writer), error) {
			req := client.ReleaseRequest{RunID: hf.runID(s), Fence: hf.fence, AgentID: s.agent.value}
			r, err := c.Fail(ctx, args[0], errText, req)
			if err != nil {
				return nil, lostAnswer(err, "the failed attempt's release of task "+args[0],
					namesLease(req.RunID != "" || req.Fence != 0, "checkout status "+args[0]+" to see whether you still hold it"))
			}
			// What becomes of the task, best effort (not with --json, which
			// prints the release's own answer).
			var task *client.Task
			if !a.json {
				if t, err := c.GetTask(cmd.Context(), args[0]); err == nil {
					task = &t
				}
			}
			return func(w io.Writer) { printFailed(w, r, errText, task) }, nil
		})
	}
	cmd.Flags().StringVar(&errText, "error", "", fmt.Sprintf("what went wrong, up to %d KiB (longer is cut); the task keeps it as its last error", lease.MaxErrorLen>>10))
	return cmd
}

func printFailed(w io.Writer, r client.Released, errText string, t *client.Task) {
	fmt.Fprintf(w, "Attempt failed: %s\n  Released by: %s\n  Held: %s\n", r.TaskID, r.ReleasedBy, compact(time.Duration(r.HeldSeconds)*time.Second))
	if errText != "" {
		fmt.Fprintf(w, "  Error: %s\n", oneLine(truncateText(errText, 200)))
	}
	if t == nil {
		return
	}
	switch {
	case t.Status == client.StatusFailed:
		used := "its " + plural(t.MaxAttempts, "attempt")
		if t.MaxAttempts == 1 {
			used = "its only attempt"
		}
		fmt.Fprintf(w, "  Task failed: it used %s (checkout tasks reopen %s tries again)\n", used, t.TaskID)
	case t.MaxAttempts > 0:
		fmt.Fprintf(w, "  Attempts: %d of %d\n", t.Attempts, t.MaxAttempts)
		if t.NotBeforeAhead() {
			fmt.Fprintf(w, "  Retry after: %s\n", whenExact(*t.NotBefore))
		}
	}
}

// truncateText cuts s to n bytes at a character's start, marking the cut.
func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

func (a *app) statusCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:               "status <task-id>",
		Short:             statusShort,
		Long:              statusLong,
		Example:           statusExample,
		Args:              exactArgs(1, "task id"),
		ValidArgsFunction: a.completeOpenTasks,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Client, s *settings) (func(io.Writer), error) {
				st, err := c.Status(ctx, args[0])
				// A task nobody holds may still not be free to take: say
				// what it waits for (best effort; --json prints the lock's
				// own answer).
				var task *client.Task
				if err == nil && !st.Locked && !a.json {
					if t, err := c.GetTask(cmd.Context(), args[0]); err == nil {
						task = &t
					}
				}
				return func(w io.Writer) {
					printLock(w, st, s.agent.value)
					if task != nil {
						printNotFree(w, *task)
					}
				}, err
			})
		},
	}
	// Reading who holds a task is any agent's: --agent only names whose
	// lease to call "you".
	a.agentFlag(cmd, "say whether this agent holds the task (default: the profile's agent with the profile's key, else $CHECKOUT_AGENT; without one, status does not say)")
	return cmd
}

func (a *app) listCmd() *cobra.Command {
	var agent string
	cmd := &cobra.Command{
		Use:     "list",
		Short:   listShort,
		Example: listExample,
		Args:    exactArgs(0, ""),
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
		Use:               "renew <task-id>",
		Short:             renewShort,
		Long:              renewLong,
		Example:           renewExample,
		Args:              exactArgs(1, "task id"),
		ValidArgsFunction: a.completeLeases,
	}
	hf := a.holderFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		d, err := duration("timeout", timeout, lease.TimeoutRange)
		if err != nil {
			return err
		}
		return a.call(cmd, func(ctx context.Context, c *client.Client, s *settings) (func(io.Writer), error) {
			co, err := c.Renew(ctx, args[0], client.RenewRequest{Timeout: d, RunID: hf.runID(s), Fence: hf.fence, AgentID: s.agent.value})
			err = lostAnswer(err, "the renewal of task "+args[0], "run the same command again: renewing twice does no harm")
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
		Use:               "complete <task-id>",
		Short:             completeShort,
		Example:           completeExample,
		Args:              exactArgs(1, "task id"),
		ValidArgsFunction: a.completeLeases,
	}
	hf := a.holderFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *client.Client, s *settings) (func(io.Writer), error) {
			req := client.CompleteRequest{RunID: hf.runID(s), Fence: hf.fence, AgentID: s.agent.value}
			t, err := c.Complete(ctx, args[0], req)
			err = lostAnswer(err, "the completion of task "+args[0],
				namesLease(req.RunID != "" || req.Fence != 0, "checkout tasks show "+args[0]+" (status done if it was)"))
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
		Use:     "heartbeat",
		Short:   heartbeatShort,
		Example: heartbeatExample,
		Args:    exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := duration("ttl", ttl, lease.TTLRange)
			if err != nil {
				return err
			}
			return a.call(cmd, func(ctx context.Context, c *client.Client, _ *settings) (func(io.Writer), error) {
				h, err := c.Heartbeat(ctx, d)
				err = lostAnswer(err, "the heartbeat", "run the same command again")
				return func(w io.Writer) {
					fmt.Fprintf(w, "Heartbeat: %s\n  Alive until: %s\n", h.AgentID, stamp(h.ExpiresAt))
				}, err
			})
		},
	}
	cmd.Flags().StringVar(&ttl, "ttl", "", fmt.Sprintf("how long this heartbeat keeps you alive, %s to %s (server default %s)", compact(lease.MinHeartbeatTTL), compact(lease.MaxHeartbeatTTL), compact(lease.DefaultHeartbeatTTL)))
	return cmd
}

func (a *app) whoamiCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "whoami",
		Short:   whoamiShort,
		Example: whoamiExample,
		Args:    exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Client, _ *settings) (func(io.Writer), error) {
				id, err := c.Whoami(ctx)
				return func(w io.Writer) {
					fmt.Fprintf(w, "Agent: %s\n  Admin: %t\n", oneLine(who(id.Name, id.AgentID)), id.Admin)
				}, err
			})
		},
	}
}

func (a *app) claimCmd() *cobra.Command {
	var timeout, reason, wait string
	var queues []string
	cmd := &cobra.Command{
		Use:     "claim",
		Short:   claimShort,
		Long:    claimLong,
		Example: claimExample,
		Args:    exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := duration("timeout", timeout, lease.TimeoutRange)
			if err != nil {
				return err
			}
			w, err := duration("wait", wait, lease.WaitRange)
			if err != nil {
				return err
			}
			given := queues
			var queues []string // nil: the server's default queue
			if cmd.Flags().Changed("queue") {
				queues = listFlag(given)
			}
			if cmd.Flags().Changed("queue") && len(queues) == 0 {
				// --queue "" (an unset variable) names no queue: leaving
				// it out would claim from the default queue instead.
				return &usageError{fmt.Sprintf("--queue %q names no queue: give a queue, or leave --queue out to claim from the default queue", strings.Join(given, ","))}
			}
			return a.call(cmd, func(ctx context.Context, c *client.Client, s *settings) (func(io.Writer), error) {
				// The run id, generated here when none is given, so that a
				// claim whose answer was lost can be asked again for the
				// lease it may have taken.
				runID := runID(s)
				// Interrupted on its way, the claim is seen through and the
				// task it took given back: behind API Gateway the server
				// goes on with it after the command has gone.
				note := context.AfterFunc(ctx, func() {
					fmt.Fprintln(a.stderr, "checkout: interrupted: waiting for the claim's answer, to give back a task it takes (interrupt again to quit at once)")
				})
				sent := time.Now()
				co, err := c.ClaimOrGiveBack(ctx, client.ClaimRequest{Timeout: d, Reason: reason, RunID: runID, AgentID: s.agent.value, Queues: queues, Wait: w})
				took := time.Since(sent)
				note()
				if se := (*client.StoppedClaimError)(nil); errors.As(err, &se) {
					return nil, stoppedClaim(se)
				}
				err = lostAnswer(err, "the claim under run "+runID,
					fmt.Sprintf("it may have taken a task: run checkout claim --run-id %s (with the same --queue), which answers with that run's lease if it took one, and claims a task if not (a claim under another run leaves that task held by you until its lease times out)", runID))
				err = restate(err, client.ErrNoTaskAvailable, noTaskAvailable(queues, w))
				if err == nil && leaseEnded(cmd.Context(), c, co) {
					return nil, &failure{fmt.Sprintf("run %s already claimed %s (fence %d), and its lease on %s has ended (at %s): nothing is checked out; claim under another run id (a new --run-id, or without CHECKOUT_RUN_ID) to take a task",
						co.RunID, co.TaskID, co.Fence, co.TaskID, stamp(co.ExpiresAt)), exitNotFound}
				}
				if err == nil && alreadyHeld(co, s, took) {
					return func(w io.Writer) { printHeld(w, co) }, nil
				}
				if err != nil {
					return nil, err
				}
				lastErr, err := a.granted(cmd.Context(), c, co)
				if err != nil {
					return nil, err
				}
				return func(w io.Writer) { printAcquired(w, co, s.runID.value != "", lastErr) }, nil
			})
		},
	}
	cmd.Flags().StringVar(&timeout, "timeout", "", "lease length, 1s to 24h (server default 30m)")
	cmd.Flags().StringVar(&reason, "reason", "", "why you take the task")
	cmd.Flags().StringSliceVar(&queues, "queue", nil, "claim from this queue (several: comma-separated, blanks trimmed, or the flag repeated; default: the default queue)")
	cmd.Flags().StringVar(&wait, "wait", "", "wait up to this long for a task, up to "+compact(lease.MaxClaimWait)+" (default: answer at once)")
	a.identityFlags(cmd, "the agent the claim is for")
	a.runIDFlag(cmd, "the run's lease token")
	return cmd
}

// stoppedClaim is the failure of a claim interrupted on its way
// (ClaimOrGiveBack): what became of the task it may have taken.
func stoppedClaim(se *client.StoppedClaimError) error {
	switch {
	case se.Held != nil:
		why := oneLine(se.Held.Error())
		if errors.Is(se.Held, client.ErrUndecided) {
			why = "its answer was lost (" + whyLost(se.Held) + ")"
		}
		return &failure{fmt.Sprintf("interrupted: the claim under run %s was seen through to give back the task it took, but %s: it may hold a task: run checkout claim --run-id %s (with the same --queue), which answers with that run's lease if it holds one (then release it), and claims a task if not",
			se.RunID, why, se.RunID), exitError}
	case se.GivenBack != nil:
		return &failure{fmt.Sprintf("interrupted: the claim under run %s had taken task %s (fence %d), which was given back (released): nothing is checked out",
			se.RunID, se.GivenBack.TaskID, se.GivenBack.Fence), exitError}
	}
	return &failure{fmt.Sprintf("interrupted: the claim under run %s took no task: nothing is checked out", se.RunID), exitError}
}

// leaseEnded reports whether a lease a claim answered with has ended: a
// claim retried under the run id of an earlier one is answered with that
// run's lease as it is now, and, once it has ended, as it was, expiring
// when it ended. Only such a lease has no whole second left; the task's
// lock status then says whether it is still this run's.
func leaseEnded(ctx context.Context, c *client.Client, co client.Checkout) bool {
	if co.RemainingSeconds > 0 {
		return false
	}
	s, err := c.Status(ctx, co.TaskID)
	if err != nil {
		return false
	}
	h := s.Checkout
	return !s.Locked || h == nil || h.AgentID != co.AgentID || h.RunID != co.RunID || h.Fence != co.Fence
}

// noTaskAvailable says that a claim of queues found nothing, in wait.
func noTaskAvailable(queues []string, wait time.Duration) string {
	in := "queue default"
	switch {
	case len(queues) == 1:
		in = "queue " + queues[0]
	case len(queues) > 1:
		in = "queues " + strings.Join(queues, ", ")
	}
	if wait > 0 {
		return fmt.Sprintf("no task became available to claim in %s within %s", in, compact(wait))
	}
	return "no task is available to claim in " + in
}

func (a *app) watchCmd() *cobra.Command {
	return &cobra.Command{
		Use:               "watch <task-id>",
		Short:             watchShort,
		Long:              watchLong,
		Example:           watchExample,
		Args:              exactArgs(1, "task id"),
		ValidArgsFunction: a.completeOpenTasks,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Client, _ *settings) (func(io.Writer), error) {
				if err := c.Watch(ctx, args[0]); err != nil {
					return nil, lostAnswer(err, "the watch of task "+args[0], "run the same command again: watching twice does no harm")
				}
				// When the message comes depends on the task's state (best
				// effort; --json prints the watch's own answer).
				var task *client.Task
				if !a.json {
					if t, err := c.GetTask(cmd.Context(), args[0]); err == nil {
						task = &t
					}
				}
				return func(w io.Writer) { printWatching(w, args[0], task) }, nil
			})
		},
	}
}

func (a *app) inboxCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "inbox",
		Short:   inboxShort,
		Long:    inboxLong,
		Example: inboxExample,
		Args:    groupArgs,
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
					// "Ready at" only when a message has it still ahead on
					// the server's clock: a task left waiting by its freeing
					// (a failed attempt's retry delay).
					waits := slices.ContainsFunc(msgs, client.Message.NotBeforeAhead)
					// "Fence" and "Run" when a lease was lost: which of the
					// agent's leases of the task it was.
					lost := slices.ContainsFunc(msgs, func(m client.Message) bool { return m.Type == client.MessageLeaseLost })
					head := []string{"Message", "Task", "Type", "Reason", "At"}
					if lost {
						head = append(head, "Fence", "Run")
					}
					if waits {
						head = append(head, "Ready at")
					}
					rows := make([][]string, len(msgs))
					for i, m := range msgs {
						rows[i] = []string{m.MessageID, m.TaskID, m.Type, orDash(m.Reason), stamp(m.At)}
						if lost {
							fence := "-"
							if m.Fence != 0 {
								fence = strconv.FormatInt(m.Fence, 10)
							}
							rows[i] = append(rows[i], fence, orDash(m.RunID))
						}
						if waits {
							ready := "-"
							if m.NotBeforeAhead() {
								ready = stamp(*m.NotBefore)
							}
							rows[i] = append(rows[i], ready)
						}
					}
					table(w, head, rows)
				}, err
			})
		},
	}
	cmd.AddCommand(&cobra.Command{
		Use:     "delete <message-id>",
		Short:   inboxDeleteShort,
		Example: inboxDeleteExample,
		Args:    exactArgs(1, "message id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Client, _ *settings) (func(io.Writer), error) {
				err := lostAnswer(c.DeleteMessage(ctx, args[0]), "the deletion of message "+args[0], "run checkout inbox to see whether it is still there")
				return func(w io.Writer) { fmt.Fprintf(w, "Message deleted: %s\n", args[0]) }, err
			})
		},
	})
	return cmd
}
