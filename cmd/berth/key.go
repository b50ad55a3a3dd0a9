package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/berthdev/berth/api"
)

func init() { addCommand(newKeyCmd) }

func newKeyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "key",
		Short: "Create, list and revoke API keys (operator, workspace or agent scope)",
		Long: `API keys open part of the supervisor: an operator key everything (like
SUPERVISOR_TOKEN), a workspace key its own workspace's agents, connections,
usage, cleanups, pairing codes, keys and audit log, an agent key only the
computer tools of its one agent. A key's secret is shown once, when it is
made; the supervisor keeps only its hash. Revoking a key takes effect at once.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newKeyCreateCmd(), newKeyListCmd(), newKeyRevokeCmd())
	return cmd
}

func newKeyCreateCmd() *cobra.Command {
	var req api.CreateKeyRequest
	var expires time.Duration
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Make an API key and print its secret (shown once)",
		Example: `  berth key create --scope agent --agent a1
  berth key create --scope workspace --workspace team-a --name ci --expires 720h`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if req.Name == "" {
				req.Name = req.Scope
				if req.Agent != "" {
					req.Name = req.Agent
				} else if req.Workspace != "" {
					req.Name = req.Workspace
				}
			}
			if expires < 0 {
				return usagef("--expires: must not be negative")
			}
			req.ExpiresInSeconds = int(expires.Seconds())
			return printed(cmd, func(ctx context.Context, c *api.Client) (*api.Key, error) { return c.CreateKey(ctx, req) },
				func(k *api.Key) error {
					fmt.Fprintln(cmd.OutOrStdout(), k.Secret)
					fmt.Fprintf(cmd.ErrOrStderr(), "key %s (%s) made; its secret is shown only this once\n", k.ID, k.Scope)
					return nil
				})
		},
	}
	cmd.Flags().StringVar(&req.Name, "name", "", "the key's name (default: its agent, workspace or scope)")
	cmd.Flags().StringVar(&req.Scope, "scope", api.ScopeAgent, "operator, workspace or agent")
	cmd.Flags().StringVar(&req.Workspace, "workspace", "", "the workspace of a workspace key")
	cmd.Flags().StringVar(&req.Agent, "agent", "", "the agent of an agent key")
	cmd.Flags().DurationVar(&expires, "expires", 0, "make the key expire after this long (e.g. 720h; default: never)")
	cmd.RegisterFlagCompletionFunc("scope", cobra.FixedCompletions([]string{api.ScopeOperator, api.ScopeWorkspace, api.ScopeAgent}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func newKeyListCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List API keys (never their secrets)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return printed(cmd, func(ctx context.Context, c *api.Client) (api.KeyList, error) {
				ks, err := c.Keys(ctx)
				return api.KeyList{Keys: ks}, err
			}, func(list api.KeyList) error {
				ks := list.Keys
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tNAME\tSCOPE\tWORKSPACE\tAGENT\tCREATED\tLAST USED\tSTATUS")
				for _, k := range ks {
					status := "active"
					switch {
					case !k.RevokedAt.IsZero():
						status = "revoked"
					case !k.ExpiresAt.IsZero() && !time.Now().Before(k.ExpiresAt):
						status = "expired"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, k.Scope, dash(k.Workspace), dash(k.Agent),
						k.CreatedAt.UTC().Format(time.RFC3339), when(k.LastUsedAt), status)
				}
				return tw.Flush()
			})
		},
	}
}

func newKeyRevokeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke an API key at once",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			if err := c.RevokeKey(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "key %s revoked\n", args[0])
			return nil
		},
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
