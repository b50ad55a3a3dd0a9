package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/berthdev/berth/internal/units"

	"github.com/spf13/cobra"

	"github.com/berthdev/berth/api"
)

func init() { addCommand(newUsageCmd) }

func newUsageCmd() *cobra.Command {
	var by, from, to string
	cmd := &cobra.Command{
		Use:   "usage",
		Short: "Show session time by provider or by workspace, and stored archives",
		Long: `Show session time by provider or by workspace, for the sessions started in
a period. --from and --to take an RFC 3339 time or a YYYY-MM-DD day (UTC);
a day given to --to is included. Without them the supervisor picks the
period.

Then, for persistent computers, the archives stored now per agent and
workspace (sleep archive and checkpoints), in bytes before encryption.`,
		Example: "  berth usage --by workspace --from 2025-01-01 --to 2025-01-31",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := api.UsageRequest{By: by}
			if by != api.ByProvider && by != api.ByWorkspace {
				return usagef("--by %q: want %s or %s", by, api.ByProvider, api.ByWorkspace)
			}
			var err error
			if req.From, err = parseWhen("--from", from, false); err != nil {
				return err
			}
			if req.To, err = parseWhen("--to", to, true); err != nil {
				return err
			}
			if !req.From.IsZero() && !req.To.IsZero() && !req.To.After(req.From) {
				return usagef("--to must be after --from")
			}
			return printed(cmd, func(ctx context.Context, c *api.Client) (*api.Usage, error) { return c.Usage(ctx, req) },
				func(u *api.Usage) error { return printUsage(cmd, u) })
		},
	}
	cmd.Flags().StringVar(&by, "by", api.ByProvider, "group by provider or workspace")
	cmd.Flags().StringVar(&from, "from", "", "start of the period (RFC 3339 or YYYY-MM-DD)")
	cmd.Flags().StringVar(&to, "to", "", "end of the period (RFC 3339, or YYYY-MM-DD included)")
	cmd.RegisterFlagCompletionFunc("by", cobra.FixedCompletions([]string{api.ByProvider, api.ByWorkspace}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// parseWhen parses an RFC 3339 time or a YYYY-MM-DD day in UTC. A day that
// ends a period stands for its end, the next midnight.
func parseWhen(flag, s string, end bool) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		if end {
			t = t.AddDate(0, 0, 1)
		}
		return t, nil
	}
	return time.Time{}, usagef("%s %q: want an RFC 3339 time (2025-01-02T15:04:05Z) or a day (2025-01-02)", flag, s)
}

func printUsage(cmd *cobra.Command, u *api.Usage) error {
	out := cmd.OutOrStdout()
	if !u.From.IsZero() || !u.To.IsZero() {
		fmt.Fprintf(out, "sessions started from %s to %s\n", when(u.From), when(u.To))
	}
	if err := printSessionTime(cmd, u); err != nil {
		return err
	}
	return printStored(cmd, u.Stored)
}

func printSessionTime(cmd *cobra.Command, u *api.Usage) error {
	out := cmd.OutOrStdout()
	if len(u.Rows) == 0 {
		_, err := fmt.Fprintln(out, "no sessions")
		return err
	}
	by := u.By
	if by == "" {
		by = api.ByProvider
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\tSESSIONS\tSECONDS\tTIME\n", strings.ToUpper(by))
	var sessions, seconds int64
	for _, r := range u.Rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", r.Key, r.Sessions, r.Seconds, seconds2d(r.Seconds))
		sessions += r.Sessions
		seconds += r.Seconds
	}
	if len(u.Rows) > 1 {
		fmt.Fprintf(tw, "TOTAL\t%d\t%d\t%s\n", sessions, seconds, seconds2d(seconds))
	}
	return tw.Flush()
}

// printStored prints the archives of persistent computers stored now, when
// there are any.
func printStored(cmd *cobra.Command, rows []api.StoredRow) error {
	if len(rows) == 0 {
		return nil
	}
	out := cmd.OutOrStdout()
	fmt.Fprintln(out, "\narchives of persistent computers stored now")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tWORKSPACE\tARCHIVES\tBYTES\tSIZE")
	var archives, bytes int64
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", r.Agent, r.Workspace, r.Archives, r.Bytes, units.Bytes(r.Bytes))
		archives += r.Archives
		bytes += r.Bytes
	}
	if len(rows) > 1 {
		fmt.Fprintf(tw, "TOTAL\t\t%d\t%d\t%s\n", archives, bytes, units.Bytes(bytes))
	}
	return tw.Flush()
}

// when formats a time of the API for people; a zero time is open-ended.
func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// seconds2d formats seconds as a duration, such as 1h2m3s.
func seconds2d[T int | int64](s T) string {
	return (time.Duration(s) * time.Second).String()
}
