package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/berthdev/berth/api"
)

func init() { addSubcommand("computer", newPreviewCmd) }

func newPreviewCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "preview PORT",
		Short: "Print a URL that opens a port of the agent's computer in a browser",
		Long: `preview asks the supervisor for a URL that reaches PORT inside the agent's
running computer (a web server the agent started there, for example) and
prints it. The URL goes through the supervisor and works until the session
ends. Pages are served under /p/TOKEN/, so an app whose links are relative
works; websockets pass through.`,
		Example: "  berth computer preview --agent a1 8080",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			agent, err := agentOf(cmd)
			if err != nil {
				return err
			}
			port, err := strconv.Atoi(args[0])
			if err != nil || port < 1 || port > 65535 {
				return usagef("PORT %q: want a TCP port, 1 to 65535", args[0])
			}
			return printed(cmd, func(ctx context.Context, c *api.Client) (*api.Preview, error) { return c.Preview(ctx, agent, port) },
				func(p *api.Preview) error {
					_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s\nport %d of agent %s's computer, until %s\n", p.URL, p.Port, agent, when(p.ExpiresAt))
					return err
				})
		},
	}
}
