package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/agent/credstore"
	"github.com/berthdev/berth/agent/lender"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/docker"
	"github.com/berthdev/berth/relay/relayclient"
)

func init() { addSubcommand("agent", newAgentRunCmd) }

// agentDataEnv overrides the lending agent's data folder.
const agentDataEnv = "BERTH_AGENT_DATA"

// defaultAgentData is the user's data folder for the lending agent:
// $XDG_DATA_HOME/berth/agent, or ~/.local/share/berth/agent.
func defaultAgentData() string {
	if v := os.Getenv(agentDataEnv); v != "" {
		return v
	}
	if v := os.Getenv("XDG_DATA_HOME"); v != "" {
		return filepath.Join(v, "berth", "agent")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "share", "berth", "agent")
	}
	return "berth-agent"
}

func newAgentRunCmd() *cobra.Command {
	var data, socket, relayURL, turnRelay, logLevel, guard string
	var insecure, unguarded bool
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Lend this machine: run computers for the paired supervisor",
		Long: `run is the lending agent. It connects out to the relay that the supervisor
named when this machine paired (berth agent pair), with the token kept then,
and runs the supervisor's computers on this machine's Docker engine, hardened
as the docker provider's are, within the owner's limits (lending on/off, at
most N computers, CPU and memory per computer, a daily budget, allowed hours,
desktop on/off, approval of each session). The limits, the ledger of
sessions and the control socket (mode 0600, for the companion app) live in
--data. Docker settings come from the environment (DOCKER_SOCKET,
COMPUTER_IMAGE_HEADLESS, COMPUTER_IMAGE_DESKTOP, COMPUTER_PIDS, ...).

--guard chooses how lent computers are kept from this machine: host (the
default on Linux) closes it to them with iptables and serves their egress
proxy on the docker0 address; engine (the default on macOS and Windows,
where Docker Desktop's VM holds the engine) gives them no route out of
their internal networks and runs the egress proxy as a container joined to
each, from $EGRESS_IMAGE (default berth/supervisor:latest). On Linux the
engine guard keeps the iptables rules too. Either way, an agent that cannot
set its guard up does not lend (unless --unguarded, for the iptables rules).

Computers keep running when the relay goes away or the agent stops; the
next start adopts them, removes what has ended, and lists what it cannot
place as cleanup prompts.

The agent's token travels on the relay link, so a plain ws:// relay URL is
refused unless its host is loopback (127.0.0.0/8, ::1, localhost); use
wss://, or --insecure to allow it anyway (logged as a warning at each start).`,
		Example: "  berth agent run\n  berth agent run --data /var/lib/berth-agent --relay wss://relay.example.com/v1/agents/connect",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := lender.ResolveGuard(guard, runtime.GOOS); err != nil {
				return usagef("--guard: %v", err)
			}
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
				return usagef("--log-level: %v", err)
			}
			store, err := credStore()
			if err != nil {
				return err
			}
			creds, err := store.Load()
			if errors.Is(err, credstore.ErrNotFound) {
				return usagef("this machine is not paired: run berth agent pair CODE --supervisor URL first")
			}
			if err != nil {
				return err
			}
			if relayURL == "" {
				relayURL = creds.RelayURL
			}
			if relayURL == "" {
				return usagef("the supervisor named no relay when this machine paired: give --relay wss://HOST/v1/agents/connect")
			}
			if err := relayclient.CheckURL(relayURL, insecure); err != nil {
				return usagef("relay: %w", err)
			}
			dopts, err := docker.OptionsFromConfig(providers.Config{Getenv: os.Getenv})
			if err != nil {
				return usageError{err}
			}
			if socket == "" {
				socket = filepath.Join(data, control.SocketName)
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: lvl}))
			return lender.RunAgent(cmd.Context(), lender.AgentOptions{
				LenderID: creds.LenderID, Token: creds.Token, RelayURL: relayURL, Insecure: insecure, SupervisorURL: creds.SupervisorURL, TURNRelay: turnRelay, Unguarded: unguarded,
				Guard: guard, EgressImage: os.Getenv(lender.EgressImageEnv),
				DataDir: data, Socket: socket, Docker: dopts, Logger: log, Version: version,
				Ready: func(*lender.Lender) {
					fmt.Fprintf(cmd.OutOrStdout(), "berth agent: lending as %s to %s through %s\n  control socket: %s\n",
						creds.LenderID, creds.SupervisorURL, relayURL, socket)
				},
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&data, "data", defaultAgentData(), "folder for the ledger, the owner's limits and the control socket ($"+agentDataEnv+")")
	f.StringVar(&socket, "socket", "", "the control socket's path (default: DATA/"+control.SocketName+")")
	f.StringVar(&relayURL, "relay", "", "the relay's websocket URL (default: the one named at pairing)")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&turnRelay, "turn-relay", "", "the supervisor's TURN relay for live view of lent desktops, HOST:PORT (default: the supervisor's own host, when public)")
	f.StringVar(&guard, "guard", lender.GuardAuto, "how lent computers are kept from this machine: host (iptables, Linux), engine (internal networks and an egress proxy container; Docker Desktop) or auto (host on Linux, engine elsewhere)")
	f.BoolVar(&unguarded, "unguarded", false, "lend even when the host firewall cannot close this machine to lent computers (they can then reach every service it listens on)")
	f.BoolVar(&insecure, "insecure", false, "allow a plain ws:// relay URL to a host that is not loopback (the token travels unencrypted)")
	return cmd
}
