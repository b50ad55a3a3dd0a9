package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/berthdev/berth/internal/units"

	"github.com/spf13/cobra"

	"github.com/berthdev/berth/api"
)

func newCheckpointCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "checkpoint NAME",
		Short: "Save the home folder of the agent's persistent computer as a checkpoint",
		Long: `Save the home folder of the agent's running persistent computer (connected
with --persistence home) under NAME; the computer keeps running. A
checkpoint holds the files of the home folder only, no processes. Start
from it later with berth computer start --checkpoint NAME; list them with
berth computer checkpoints and delete them with berth computer checkpoints
delete NAME.

NAME is 1 to 64 letters, digits, '.', '_' and '-', starting with a letter or
digit, and must not be taken.`,
		Example: "  berth computer checkpoint --agent a1 before-upgrade",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 2 && args[0] == "delete" {
				return usagef("to delete a checkpoint, run: berth computer checkpoints delete %s", args[1])
			}
			return cobra.ExactArgs(1)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			agent, err := agentOf(cmd)
			if err != nil {
				return err
			}
			name := args[0]
			return printed(cmd, func(ctx context.Context, c *api.Client) (*api.Archive, error) { return c.Checkpoint(ctx, agent, name) },
				func(a *api.Archive) error {
					_, err := fmt.Fprintf(cmd.OutOrStdout(), "checkpoint %s of agent %s: %s, made on %s at %s\n",
						a.Name, agent, units.Bytes(a.Bytes), a.Image, when(a.CreatedAt))
					return err
				})
		},
	}
}

func newCheckpointsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "checkpoints",
		Short: "List the checkpoints of the agent's persistent computer",
		Long: `List the checkpoints of the agent's persistent computer, oldest first: name,
size of the archive (compressed, before encryption), when it was made and
the image it was made on. berth computer checkpoints delete NAME deletes one.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			agent, err := agentOf(cmd)
			if err != nil {
				return err
			}
			return printed(cmd, func(ctx context.Context, c *api.Client) ([]api.Archive, error) { return c.Checkpoints(ctx, agent) },
				func(list []api.Archive) error {
					if len(list) == 0 {
						_, err := fmt.Fprintf(cmd.OutOrStdout(), "agent %s has no checkpoints\n", agent)
						return err
					}
					tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
					fmt.Fprintln(tw, "NAME\tSIZE\tCREATED\tIMAGE")
					for _, a := range list {
						fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", a.Name, units.Bytes(a.Bytes), when(a.CreatedAt), a.Image)
					}
					return tw.Flush()
				})
		},
	}
	cmd.AddCommand(newCheckpointDeleteCmd())
	return cmd
}

func newCheckpointDeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "delete NAME",
		Short:   "Delete one of the agent's checkpoints",
		Example: "  berth computer checkpoints delete --agent a1 before-upgrade",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, agent, err := agentCmd(cmd)
			if err != nil {
				return err
			}
			name := args[0]
			ctx, raw := answerContext(cmd)
			if err := c.DeleteCheckpoint(ctx, agent, name); err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return printAnswer(cmd, raw, map[string]any{"agent": agent, "checkpoint": name, "deleted": true})
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "deleted checkpoint %s of agent %s\n", name, agent)
			return err
		},
	}
}
