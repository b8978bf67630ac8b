package main

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/checkout-dev/checkout/client"
)

func (a *app) queuesCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "queues",
		Short: "List the queues: their tasks by status and their oldest todo task",
		Long: `Lists every queue with its number of tasks by status and the creation
time of its oldest todo task. The counts follow each change within about a
second; tasks last changed before the server counted queues are not in them
until their next change.`,
		Example: `  checkout queues
  checkout queues --json`,
		Args: groupArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Client, _ *settings) (func(io.Writer), error) {
				qs, err := c.Queues(ctx)
				return func(w io.Writer) { printQueues(w, qs) }, err
			})
		},
	}
}

func printQueues(w io.Writer, qs []client.Queue) {
	fmt.Fprintln(w, "## Queues")
	fmt.Fprintln(w)
	if len(qs) == 0 {
		fmt.Fprintln(w, "No queues yet.")
		return
	}
	rows := make([][]string, len(qs))
	for i, q := range qs {
		oldest := "-"
		if q.OldestTodoAt != nil {
			oldest = stamp(*q.OldestTodoAt)
		}
		n := func(s string) string { return strconv.FormatInt(q.Counts[s], 10) }
		rows[i] = []string{q.Queue, n(client.StatusTodo), n(client.StatusBlocked), n(client.StatusInProgress), n(client.StatusDone),
			n(client.StatusCancelled), n(client.StatusFailed), oldest}
	}
	table(w, []string{"Queue", "Todo", "Blocked", "In Progress", "Done", "Cancelled", "Failed", "Oldest Todo"}, rows)
}
