package main

import (
	"context"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/checkout-dev/checkout/client"
	"github.com/checkout-dev/checkout/lease"
)

// Shell completion of task ids asks the server, when a key is set: open
// tasks for the commands that take one, the live leases for those that act
// on a lease (the agent's own when the agent is known). A server that does
// not answer within two seconds completes nothing.

func (a *app) completionClient(cmd *cobra.Command) (*client.Client, *settings, bool) {
	s, err := a.resolve()
	if err != nil || s.key.value == "" || checkURL(s.url) != nil {
		return nil, nil, false
	}
	return client.New(s.url.value, s.key.value, client.WithUserAgent("checkout-cli/1"),
		client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 1})), s, true
}

// completeOpenTasks completes the ids of tasks that are not done,
// cancelled or failed.
func (a *app) completeOpenTasks(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	c, _, ok := a.completionClient(cmd)
	if !ok {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Second)
	defer cancel()
	var out []cobra.Completion
	for _, status := range []string{client.StatusTodo, client.StatusInProgress, client.StatusBlocked} {
		page, err := c.ListTasks(ctx, client.ListTasksRequest{Status: status, Limit: lease.MaxListLimit})
		if err != nil {
			break
		}
		for _, t := range page.Tasks {
			if strings.HasPrefix(t.TaskID, toComplete) {
				out = append(out, cobra.CompletionWithDesc(t.TaskID, oneLine(describeTask(t))))
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, cobra.ShellCompDirectiveNoFileComp
}

func describeTask(t client.Task) string {
	d := t.Status
	if t.Title != "" {
		d += ": " + t.Title
	}
	if t.Checkout != nil {
		d += " (held by " + who(t.Checkout.AgentName, t.Checkout.AgentID) + ")"
	}
	return d
}

// completeLeases completes the ids of tasks with a live lease.
func (a *app) completeLeases(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	c, s, ok := a.completionClient(cmd)
	if !ok {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Second)
	defer cancel()
	cos, err := c.ListCheckouts(ctx, s.agent.value)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []cobra.Completion
	for _, co := range cos {
		if strings.HasPrefix(co.TaskID, toComplete) {
			out = append(out, cobra.CompletionWithDesc(co.TaskID, oneLine("held by "+who(co.AgentName, co.AgentID))))
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}
