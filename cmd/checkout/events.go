package main

// The events command: one task's trail, or the fleet feed, followed.

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
	"github.com/checkout-dev/checkout/lease"
)

func (a *app) eventsCmd() *cobra.Command {
	var follow bool
	var since, cursor string
	var typeFlags []string
	var interval time.Duration
	var limit int
	cmd := &cobra.Command{
		Use:               "events [task-id]",
		Short:             eventsShort,
		Long:              eventsLong,
		Example:           eventsExample,
		Args:              maxArgs(1, "one task id"),
		ValidArgsFunction: a.completeOpenTasks,
		RunE: func(cmd *cobra.Command, args []string) error {
			types := listFlag(typeFlags)
			if err := checkLimit(cmd, limit); err != nil {
				return err
			}
			fl := cmd.Flags()
			if len(args) == 1 {
				// A task's trail is read whole: a flag of the feed would
				// be ignored.
				for _, name := range []string{"follow", "since", "cursor", "type", "limit", "interval"} {
					if fl.Changed(name) {
						return &usageError{fmt.Sprintf("--%s is for the fleet feed, and a task's trail is read whole: give no task id, or leave --%s out (see checkout events --help)", name, name)}
					}
				}
				return a.taskEvents(cmd, args[0])
			}
			switch {
			case fl.Changed("type") && len(types) == 0:
				// --type "$TYPES" with the variable unset: a filter asked
				// for is not the whole feed.
				return &usageError{fmt.Sprintf("--type %q names no event type: give one, or leave --type out for every type (see checkout events --help)", strings.Join(typeFlags, ","))}
			case fl.Changed("interval") && !follow:
				return &usageError{"--interval is how often --follow asks: add --follow, or leave --interval out (see checkout events --help)"}
			case fl.Changed("interval") && interval <= 0:
				return &usageError{fmt.Sprintf("invalid value %q for --interval: want a duration above 0, such as \"2s\" (see checkout events --help)", fl.Lookup("interval").Value.String())}
			}
			if since != "" && cursor != "" {
				return &usageError{"--since and --cursor both say where the feed starts: give one (see checkout events --help)"}
			}
			req := client.FeedRequest{Limit: limit, Cursor: cursor}
			if since != "" {
				t, err := time.Parse(time.RFC3339Nano, since)
				if err != nil {
					d, derr := time.ParseDuration(since)
					if derr != nil || d <= 0 {
						return &usageError{fmt.Sprintf("invalid --since %q: want an RFC 3339 time or a duration such as 30m", since)}
					}
					t = time.Now().Add(-d)
				}
				if t.IsZero() {
					// Go's zero time (0001-01-01T00:00:00Z) would send no
					// since at all; any time before the events' retention
					// starts the feed at it.
					t = time.Unix(0, 0)
				}
				req.Since = t
			}
			if len(types) > 0 {
				req.Types = types
			}
			if !follow {
				return a.call(cmd, func(ctx context.Context, c *client.Client, _ *settings) (func(io.Writer), error) {
					page, err := c.Feed(ctx, req)
					return func(w io.Writer) {
						fmt.Fprintln(w, "## Events: the fleet")
						fmt.Fprintln(w)
						switch {
						case len(page.Events) == 0 && page.CaughtUp:
							fmt.Fprintln(w, "No events.")
						case len(page.Events) == 0:
							// The page read its most hours of the feed
							// without reaching the present.
							fmt.Fprintln(w, "No events in the hours this page read; later ones may follow: go on with More.")
						default:
							rows := make([][]string, len(page.Events))
							for i, e := range page.Events {
								rows[i] = []string{stamp(e.At), e.Type, e.TaskID, orDash(e.AgentID), fenceCell(e.Fence), held(e), orDash(e.By), eventReason(e)}
							}
							table(w, []string{"At", "Event", "Task", "Agent", "Fence", "Held", "By", "Reason"}, rows)
						}
						if page.NextCursor == "" {
							return
						}
						// The command that goes on from here, with the same filter.
						next := "checkout events --cursor " + page.NextCursor
						if len(req.Types) > 0 {
							next += " --type " + strings.Join(req.Types, ",")
						}
						if limit != 0 {
							next += " --limit " + strconv.Itoa(limit)
						}
						fmt.Fprintf(w, "\nMore: %s (add --follow to keep following)\n", next)
					}, err
				})
			}
			c, _, err := a.client()
			if err != nil {
				return err
			}
			if !a.json {
				a.warnZone()
			}
			show := func(e client.Event) error {
				if a.json {
					// The event as the server sent it, on one line.
					var b bytes.Buffer
					if err := json.Compact(&b, e.Raw); err != nil {
						return err
					}
					b.WriteByte('\n')
					_, err := a.stdout.Write(b.Bytes())
					return err
				}
				_, err := fmt.Fprintf(a.stdout, "%s  %-13s %-24s agent %s  fence %s  held %s  by %s  %s\n",
					stamp(e.At), oneLine(e.Type), oneLine(e.TaskID), oneLine(orDash(e.AgentID)), fenceCell(e.Fence), held(e), oneLine(orDash(e.By)), oneLine(eventReason(e)))
				return err
			}
			// The first page is asked for alone: a server that cannot be
			// reached, or a URL that is no checkout server's, fails the
			// command at once, as any other, rather than leaving an
			// empty stream that looks healthy. After it, an outage is
			// ridden out, and said on stderr.
			first, err := c.Feed(cmd.Context(), req)
			if errors.Is(err, context.Canceled) {
				return nil
			}
			if err != nil {
				return err
			}
			for _, e := range first.Events {
				if err := show(e); err != nil {
					return err
				}
			}
			req = client.FeedRequest{Cursor: first.NextCursor, Limit: req.Limit, Types: req.Types}
			err = c.FollowFeed(cmd.Context(), req, interval, show, client.OnFeedOutage(func(err error) {
				if err != nil {
					fmt.Fprintf(a.stderr, "checkout: %s; still following: asking again until it answers\n", a.describe(err))
					return
				}
				fmt.Fprintln(a.stderr, "checkout: the server answers again; following on from where the feed stopped")
			}))
			if errors.Is(err, context.Canceled) {
				return nil // interrupted: the normal end of a follow
			}
			return err
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep following the fleet feed until interrupted")
	cmd.Flags().StringVar(&since, "since", "", "start of the fleet feed: an RFC 3339 time, or a duration ago such as 30m (default 1h)")
	cmd.Flags().StringVar(&cursor, "cursor", "", "go on from where an earlier page of the fleet feed ended (its More: line gives it)")
	cmd.Flags().StringSliceVar(&typeFlags, "type", nil, "keep only these event types, comma-separated or the flag repeated")
	cmd.Flags().IntVar(&limit, "limit", 0, fmt.Sprintf("events per request, 1 to %d (default %d)", lease.MaxListLimit, lease.DefaultListLimit))
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
		tr, err := c.Trail(ctx, taskID)
		return func(w io.Writer) {
			fmt.Fprintf(w, "## Events: %s\n\n", taskID)
			if len(tr.Events) == 0 {
				fmt.Fprintln(w, "No events.")
			} else {
				rows := make([][]string, len(tr.Events))
				for i, e := range tr.Events {
					rows[i] = []string{stamp(e.At), e.Type, orDash(e.AgentID), orDash(e.RunID), fenceCell(e.Fence), held(e), orDash(e.By), eventReason(e)}
				}
				table(w, []string{"At", "Event", "Agent", "Run", "Fence", "Held", "By", "Reason"}, rows)
			}
			if tr.Pending > 0 {
				fmt.Fprintln(w, "\nMore events are being recorded; ask again in a second.")
			}
		}, err
	})
}
