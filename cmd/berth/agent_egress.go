package main

import (
	"fmt"
	"log/slog"
	"net"

	"github.com/spf13/cobra"

	"github.com/berthdev/berth/agent/lender"
	"github.com/berthdev/berth/egress"
)

func init() { addSubcommand("agent", newAgentEgressProxyCmd) }

// newAgentEgressProxyCmd is the egress proxy the lending agent runs in a
// container under its engine guard (berth agent run --guard engine). It is
// hidden: the agent starts it, with the secret on standard input.
func newAgentEgressProxyCmd() *cobra.Command {
	var listen, blocked, probe string
	var abuse bool
	cmd := &cobra.Command{
		Use:    "egress-proxy",
		Short:  "Serve a lending agent's egress proxy (run by the agent in a container)",
		Hidden: true,
		Long: `egress-proxy serves the lending agent's egress proxy inside the container
the agent starts for its engine guard. It reads the agent's egress secret
from standard input (one line), never from its arguments or environment.
--probe ADDR checks that a proxy answers at ADDR instead.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if probe != "" {
				return lender.ProbeEgressProxy(cmd.Context(), probe)
			}
			prefixes, err := egress.ParseBlockedCIDRs(blocked)
			if err != nil {
				return usagef("--blocked-cidrs: %v", err)
			}
			secret, err := lender.ReadSecret(cmd.InOrStdin())
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("egress proxy: %w", err)
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil)).With("component", "egress")
			return lender.ServeEgressProxy(cmd.Context(), ln, lender.EgressProxyConfig{
				Secret: secret, BlockedCIDRs: prefixes, Abuse: abuse, Logger: log,
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", fmt.Sprintf(":%d", lender.EgressProxyPort), "address to listen on")
	f.StringVar(&blocked, "blocked-cidrs", "", "ranges refused on top of the built-in ones, comma-separated")
	f.BoolVar(&abuse, "abuse", false, "refuse mail ports and mining traffic")
	f.StringVar(&probe, "probe", "", "check that an egress proxy answers at HOST:PORT, and exit")
	return cmd
}
