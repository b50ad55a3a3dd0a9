package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/berthdev/berth/agent/credstore"
	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/app/agentlink"
	"github.com/berthdev/berth/relay/relayclient"
)

func init() { addSubcommand("agent", newAgentPairCmd) }

// configDirEnv overrides where the agent keeps its files (default
// os.UserConfigDir()/berth).
const configDirEnv = "BERTH_CONFIG_DIR"

// credStore returns the agent's credential store, honouring $BERTH_CONFIG_DIR.
func credStore() (*credstore.Store, error) {
	var opts []credstore.Option
	if dir := os.Getenv(configDirEnv); dir != "" {
		opts = append(opts, credstore.WithDir(dir))
	}
	return credstore.New(opts...)
}

func newAgentPairCmd() *cobra.Command {
	var supervisorURL, name string
	var insecure bool
	cmd := &cobra.Command{
		Use:   "pair CODE --supervisor URL",
		Short: "Pair this machine with a supervisor, to lend it",
		Long: `Pair this machine with a supervisor: exchange the one-time code that the
supervisor's operator made (POST /v1/companions/pair-codes; it expires in 10
minutes) for this agent's id and token. The token and the supervisor's URL
are kept in the OS keyring, or, where no keyring works, in an encrypted file
in $` + configDirEnv + ` (default: the user's config directory, berth/). The
token is never printed.

The token travels on this exchange, so a plain http:// supervisor URL is
refused unless its host is loopback (127.0.0.0/8, ::1, localhost); use
https://, or --insecure to allow it anyway.`,
		Example: "  berth agent pair ABCD-EFGH-JK --supervisor https://berth.example.com --name lab-laptop",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := api.New(supervisorURL, "", api.WithUserAgent("berth/"+version))
			if err != nil {
				return usageError{err}
			}
			if err := relayclient.CheckURL(supervisorURL, insecure); err != nil {
				return usagef("--supervisor: %w", err)
			}
			store, err := credStore()
			if err != nil {
				return err
			}
			p, err := agentlink.PairWith(cmd.Context(), c, store, args[0], name)
			if err != nil {
				return err
			}
			where := p.StoredIn
			if jsonOutput(cmd) {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(map[string]string{"agentId": p.LenderID, "supervisorUrl": c.BaseURL(), "storedIn": where})
			}
			kept := "the OS keyring"
			if where == credstore.InFile {
				kept = "an encrypted file in " + store.Dir() + " (no OS keyring available)"
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "paired as companion %s with %s; token kept in %s\n", p.LenderID, c.BaseURL(), kept)
			return err
		},
	}
	cmd.Flags().StringVar(&supervisorURL, "supervisor", "", "the supervisor's URL (required)")
	cmd.Flags().StringVar(&name, "name", "", "this machine's name at the supervisor (default: the name given with the code)")
	cmd.Flags().BoolVar(&insecure, "insecure", false, "allow a plain http:// supervisor URL to a host that is not loopback (the token travels unencrypted)")
	cmd.MarkFlagRequired("supervisor")
	return cmd
}
