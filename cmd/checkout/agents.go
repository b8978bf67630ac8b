package main

// The admin's agents commands, and the MCP server over stdio.

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/checkout-dev/checkout/client"
	"github.com/checkout-dev/checkout/mcpserver"
)

func (a *app) agentsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "agents",
		Short:   agentsShort,
		Example: agentsExample,
		Args:    groupArgs,
		RunE:    func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	var id string
	var admin bool
	add := &cobra.Command{
		Use:     "add <name>",
		Short:   agentsAddShort,
		Example: agentsAddExample,
		Args:    exactArgs(1, "name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Client, _ *settings) (func(io.Writer), error) {
				r, err := c.CreateAgent(ctx, client.CreateAgentRequest{Name: args[0], AgentID: id, Admin: admin})
				// Its key is shown only in the answer: an agent made by a
				// request whose answer was lost has a key nobody knows.
				look := "run checkout agents list: if the agent is there, its key was in the lost answer, so remove it (checkout agents remove <agent-id>) and add it again"
				err = lostAnswer(err, "the creation of agent "+args[0], look)
				if id != "" {
					err = restate(err, client.ErrAgentExists, fmt.Sprintf("an agent with id %s already exists", id))
				}
				return func(w io.Writer) {
					fmt.Fprintf(w, "Agent created: %s\n  API key: %s\n  The key is shown only once: store it now.\n", oneLine(who(r.Name, r.AgentID)), r.APIKey)
				}, err
			})
		},
	}
	add.Flags().StringVar(&id, "id", "", "the agent id (default: generated)")
	add.Flags().BoolVar(&admin, "admin", false, "make it an admin")
	list := &cobra.Command{
		Use:     "list",
		Short:   agentsListShort,
		Example: agentsListExample,
		Args:    exactArgs(0, ""),
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
		Short:   agentsRemoveShort,
		Example: agentsRemoveExample,
		Args:    exactArgs(1, "agent id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.call(cmd, func(ctx context.Context, c *client.Client, _ *settings) (func(io.Writer), error) {
				err := lostAnswer(c.RemoveAgent(ctx, args[0]), "the removal of agent "+args[0], "run checkout agents list to see whether it is still there")
				err = restate(err, client.ErrAgentNotFound, fmt.Sprintf("agent %s does not exist", args[0]))
				return func(w io.Writer) { fmt.Fprintf(w, "Agent removed: %s\n", args[0]) }, err
			})
		},
	}
	cmd.AddCommand(add, list, remove)
	return cmd
}

func (a *app) mcpCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "mcp",
		Short:   mcpShort,
		Long:    mcpLong,
		Example: mcpExample,
		Args:    exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, s, err := a.client()
			if err != nil {
				return err
			}
			if s.runID.value != "" {
				// One process is one run: a run shared by two sessions
				// would make both hold each lease.
				fmt.Fprintf(a.stderr, "checkout: checkout mcp ignores %s: each process is one run, with a run id of its own; after a restart, take back your agent's leases with checkout_task adopt=true\n", s.runID.from)
			}
			return mcpserver.Serve(cmd.Context(), c, a.stdin, a.stdout, mcpserver.Options{AgentID: s.agent.value, Version: versionOnly()})
		},
	}
	a.identityFlags(cmd, "the agent to act as")
	return cmd
}
