package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/berthdev/berth/api"
)

func init() { addCommand(newAgentCmd) }

// newAgentCmd is the agent command group; other files add to it with
// addSubcommand("agent", ...).
func newAgentCmd() *cobra.Command {
	cmd := asGroup(&cobra.Command{
		Use:   "agent",
		Short: "Manage agents",
	})
	cmd.AddCommand(newAgentCreateCmd())
	return cmd
}

func newAgentCreateCmd() *cobra.Command {
	var req api.CreateAgentRequest
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create an agent",
		Long: `Create an agent: an AI agent that uses computer tools. It belongs to a
workspace ("default" unless --workspace is given), and the supervisor picks
its id unless --id is given.`,
		Example: "  berth agent create researcher --id research-1 --workspace lab",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Name = args[0]
			return printed(cmd, func(ctx context.Context, c *api.Client) (*api.Agent, error) { return c.CreateAgent(ctx, req) },
				func(a *api.Agent) error {
					_, err := fmt.Fprintf(cmd.OutOrStdout(), "created agent %s (%s) in workspace %s\n", a.ID, a.Name, a.Workspace)
					return err
				})
		},
	}
	cmd.Flags().StringVar(&req.ID, "id", "", "the agent's id (default: chosen by the supervisor)")
	cmd.Flags().StringVar(&req.Workspace, "workspace", "", `the agent's workspace (default "default")`)
	return cmd
}
