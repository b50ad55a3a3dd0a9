package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/berthdev/berth/agent/control"
)

// The owner's commands: they speak to the lending agent on this machine
// over its control socket, as the companion app does, so that a machine
// without a screen (a server running the agent as a service) is run from
// a terminal.
func init() {
	addSubcommand("agent", newAgentStatusCmd)
	addSubcommand("agent", newAgentSessionsCmd)
	addSubcommand("agent", newAgentStopCmd)
	addSubcommand("agent", newAgentLendCmd)
	addSubcommand("agent", newAgentSettingsCmd)
	addSubcommand("agent", newAgentApprovalsCmd)
	addSubcommand("agent", func() *cobra.Command { return newAgentDecideCmd(true) })
	addSubcommand("agent", func() *cobra.Command { return newAgentDecideCmd(false) })
	addSubcommand("agent", newAgentUsageCmd)
	addSubcommand("agent", newAgentCleanupsCmd)
	addSubcommand("agent", newAgentCleanupCmd)
}

// controlFlags are the flags that find the agent's control socket.
type controlFlags struct{ data, socket string }

func (f *controlFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.data, "data", defaultAgentData(), "the lending agent's data folder ($"+agentDataEnv+")")
	cmd.Flags().StringVar(&f.socket, "socket", "", "the control socket's path (default: DATA/"+control.SocketName+")")
}

func (f *controlFlags) path() string {
	if f.socket != "" {
		return f.socket
	}
	return filepath.Join(f.data, control.SocketName)
}

// call runs fn with a client of the agent's control socket, and says
// plainly when no agent answers there.
func (f *controlFlags) call(cmd *cobra.Command, fn func(context.Context, *control.Client) error) error {
	path := f.path()
	c := control.NewClient(path)
	defer c.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
	defer cancel()
	err := fn(ctx, c)
	var op *net.OpError
	switch {
	case errors.As(err, &op) && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED)):
		return fmt.Errorf("no lending agent answers at %s: start it with berth agent run (or berth agent service start), or give --data or --socket", path)
	case errors.As(err, &op) && errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%s: permission denied: the control socket is its owner's only; run this as the user the agent runs as", path)
	}
	return err
}

// controlCmd builds an owner's command: fn does the call and prints.
func controlCmd(use, short, long string, args cobra.PositionalArgs, fn func(cmd *cobra.Command, ctx context.Context, c *control.Client, args []string) error) *cobra.Command {
	var f controlFlags
	cmd := &cobra.Command{
		Use: use, Short: short, Long: long, Args: args,
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.call(cmd, func(ctx context.Context, c *control.Client) error { return fn(cmd, ctx, c, args) })
		},
	}
	f.add(cmd)
	return cmd
}

func newAgentStatusCmd() *cobra.Command {
	return controlCmd("status", "Show the lending agent on this machine at a glance",
		`status shows the lending agent running on this machine: lending on or off,
its link to the relay, the paired supervisor, running computers, sessions
waiting for approval, cleanup prompts, today's lending against the daily
budget, the egress proxy and the warm pool.`,
		cobra.NoArgs, func(cmd *cobra.Command, ctx context.Context, c *control.Client, _ []string) error {
			st, err := c.Status(ctx)
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return printJSON(cmd, st)
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			relay := "offline"
			if st.Relay.Online {
				relay = "online"
			}
			if !st.Relay.Since.IsZero() {
				relay += " since " + st.Relay.Since.Local().Format(time.DateTime)
			}
			if st.Relay.LastError != "" {
				relay += " (" + st.Relay.LastError + ")"
			}
			sup := "not paired"
			if st.Supervisor.Paired {
				sup = st.Supervisor.URL + " as " + st.Supervisor.LenderID
			}
			egress := "off"
			switch {
			case st.Egress.On && st.Egress.Listening:
				egress = fmt.Sprintf("on at %s (%d allowed, %d refused)", st.Egress.Address, st.Egress.Allowed, st.Egress.Refused)
			case st.Egress.On:
				egress = "on, not listening"
			}
			fmt.Fprintf(w, "lending:\t%s\n", onOff(st.Lending))
			fmt.Fprintf(w, "supervisor:\t%s\n", sup)
			fmt.Fprintf(w, "relay:\t%s %s\n", st.Relay.URL, relay)
			fmt.Fprintf(w, "computers:\t%d running\n", st.Sessions)
			fmt.Fprintf(w, "approvals:\t%d waiting\n", st.PendingApprovals)
			fmt.Fprintf(w, "cleanups:\t%d open\n", st.Cleanups)
			fmt.Fprintf(w, "today:\t%s of %s\n", seconds(st.TodaySeconds), seconds(st.DailySeconds))
			fmt.Fprintf(w, "egress:\t%s\n", egress)
			fmt.Fprintf(w, "warm pool:\t%d of %d waiting, %d starting, %d claimed\n", st.WarmPool.Waiting, st.WarmPool.Size, st.WarmPool.Creating, st.WarmPool.Claimed)
			fmt.Fprintf(w, "version:\t%s\n", st.Version)
			return w.Flush()
		})
}

func newAgentSessionsCmd() *cobra.Command {
	return controlCmd("sessions", "List the computers running on this machine",
		`sessions lists the computers the lending agent runs: the session, the AI
agent and workspace using it, the image, its state, the time left on its
lease, and live CPU and memory.`,
		cobra.NoArgs, func(cmd *cobra.Command, ctx context.Context, c *control.Client, _ []string) error {
			ss, err := c.Sessions(ctx)
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return printJSON(cmd, ss)
			}
			if len(ss) == 0 {
				_, err := fmt.Fprintln(cmd.OutOrStdout(), "no computers running")
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "SESSION\tAGENT\tWORKSPACE\tIMAGE\tSTATE\tLEFT\tCPU\tMEMORY")
			for _, s := range ss {
				state := s.State
				if s.StateReason != "" {
					state += " (" + s.StateReason + ")"
				}
				mem := "-"
				if s.StatsError == "" {
					mem = fmt.Sprintf("%d/%d MB", s.MemoryBytes>>20, s.MemoryLimitBytes>>20)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%.0f%%\t%s\n", s.SessionID, s.Agent, s.Workspace, s.Image, state,
					seconds(s.TimeLeftSeconds), s.CPUPercent, mem)
			}
			return w.Flush()
		})
}

func newAgentStopCmd() *cobra.Command {
	return controlCmd("stop SESSION", "Stop a computer running on this machine",
		`stop ends a session on this machine and removes its computer; the agent
using it gets session_gone on its next call. SESSION is the session id
(s_...) or the computer id that berth agent sessions shows.`,
		cobra.ExactArgs(1), func(cmd *cobra.Command, ctx context.Context, c *control.Client, args []string) error {
			ss, err := c.Sessions(ctx)
			if err != nil {
				return err
			}
			id := args[0]
			for _, s := range ss {
				if s.SessionID == id {
					id = s.ID
				}
			}
			s, err := c.StopSession(ctx, id)
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return printJSON(cmd, s)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "stopped %s (%s)\n", s.SessionID, s.State)
			return err
		})
}

func newAgentLendCmd() *cobra.Command {
	return controlCmd("lend on|off", "Turn lending on or off",
		`lend turns the lending switch: off refuses every new start (lending_paused)
and leaves running computers alone until their leases end or they are
stopped.`,
		cobra.ExactArgs(1), func(cmd *cobra.Command, ctx context.Context, c *control.Client, args []string) error {
			on, err := parseOnOff(args[0])
			if err != nil {
				return usagef("lend: %v", err)
			}
			s, err := c.SetLending(ctx, on)
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return printJSON(cmd, s)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "lending %s\n", onOff(s.Lending))
			return err
		})
}

func newAgentSettingsCmd() *cobra.Command {
	cmd := controlCmd("settings [KEY=VALUE ...]", "Show or change the owner's limits",
		`settings shows the owner's limits; given KEY=VALUE pairs it changes those
and leaves the rest. A value out of range is refused with its limit, and
nothing is changed. Keys:

  lending=on|off                 the lending switch
  maxComputers=N                 computers at once (1..64)
  cpus=N                         CPUs per computer (0.1..64)
  memoryMB=N                     memory per computer (256..65536)
  dailySeconds=N                 daily lending budget (60..86400)
  hours=HH:MM-HH:MM|any          when lending is allowed, in timeZone
  days=mon,tue,...|all           the weekdays the hours apply to
  timeZone=ZONE                  an IANA zone; empty is the machine's
  desktop=on|off                 computers with a screen
  approval=on|off                each new session waits for the owner
  approvalTimeoutSeconds=N       the wait before refusing (10..3600)
  egress=on|off                  the egress proxy, computers' only way out
  warmPoolSize=N                 headless computers kept started (0..maxComputers)
  warmPoolMax=N                  most kept started when bursts of starts ask for more (warmPoolSize..maxComputers; 0: fixed)`,
		cobra.ArbitraryArgs, func(cmd *cobra.Command, ctx context.Context, c *control.Client, args []string) error {
			var s control.Settings
			var err error
			if len(args) == 0 {
				s, err = c.Settings(ctx)
			} else {
				var u control.SettingsUpdate
				if u, err = parseSettings(ctx, c, args); err != nil {
					return err
				}
				s, err = c.UpdateSettings(ctx, u)
			}
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return printJSON(cmd, s)
			}
			return printOwnerSettings(cmd.OutOrStdout(), s)
		})
	cmd.Example = "  berth agent settings\n  berth agent settings maxComputers=2 desktop=off hours=09:00-18:00 days=mon,tue,wed,thu,fri"
	return cmd
}

// settingKeys are the keys berth agent settings takes, in the order it
// prints them.
var settingKeys = []string{"lending", "maxComputers", "cpus", "memoryMB", "dailySeconds", "hours", "days",
	"timeZone", "desktop", "approval", "approvalTimeoutSeconds", "egress", "warmPoolSize", "warmPoolMax"}

// parseSettings turns KEY=VALUE pairs into an update. hours and days
// change one part of the window, so the other part is read first.
func parseSettings(ctx context.Context, c *control.Client, args []string) (control.SettingsUpdate, error) {
	var u control.SettingsUpdate
	var hours *control.Hours
	window := func() (*control.Hours, error) {
		if hours == nil {
			cur, err := c.Settings(ctx)
			if err != nil {
				return nil, err
			}
			hours = &cur.Hours
		}
		return hours, nil
	}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || !slices.Contains(settingKeys, k) {
			return u, usagef("%q: want KEY=VALUE with KEY one of %s", a, strings.Join(settingKeys, ", "))
		}
		bad := func(want string) error { return usagef("%s=%q: want %s", k, v, want) }
		switch k {
		case "lending", "desktop", "approval", "egress":
			on, err := parseOnOff(v)
			if err != nil {
				return u, bad("on or off")
			}
			switch k {
			case "lending":
				u.Lending = &on
			case "desktop":
				u.Desktop = &on
			case "approval":
				u.Approval = &on
			case "egress":
				u.Egress = &on
			}
		case "maxComputers", "approvalTimeoutSeconds", "warmPoolSize", "warmPoolMax":
			n, err := strconv.Atoi(v)
			if err != nil {
				return u, bad("a whole number")
			}
			switch k {
			case "maxComputers":
				u.MaxComputers = &n
			case "approvalTimeoutSeconds":
				u.ApprovalTimeoutSeconds = &n
			case "warmPoolSize":
				u.WarmPoolSize = &n
			case "warmPoolMax":
				u.WarmPoolMax = &n
			}
		case "memoryMB", "dailySeconds":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return u, bad("a whole number")
			}
			if k == "memoryMB" {
				u.MemoryMB = &n
			} else {
				u.DailySeconds = &n
			}
		case "cpus":
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return u, bad("a number such as 1.5")
			}
			u.CPUs = &n
		case "timeZone":
			u.TimeZone = &v
		case "hours":
			h, err := window()
			if err != nil {
				return u, err
			}
			if v == "any" {
				h.From, h.To = "", ""
			} else if h.From, h.To, ok = strings.Cut(v, "-"); !ok {
				return u, bad("HH:MM-HH:MM, or any")
			}
			u.Hours = h
		case "days":
			h, err := window()
			if err != nil {
				return u, err
			}
			h.Days = nil
			if v != "all" && v != "" {
				h.Days = strings.Split(v, ",")
			}
			u.Hours = h
		}
	}
	return u, nil
}

func printOwnerSettings(out io.Writer, s control.Settings) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	hours := "any time"
	if s.Hours.From != "" || s.Hours.To != "" {
		hours = s.Hours.From + "-" + s.Hours.To
	}
	days := "all"
	if len(s.Hours.Days) > 0 {
		days = strings.Join(s.Hours.Days, ",")
	}
	zone := s.TimeZone
	if zone == "" {
		zone = "the machine's (" + time.Local.String() + ")"
	}
	for _, row := range [][2]string{
		{"lending", onOff(s.Lending)},
		{"maxComputers", strconv.Itoa(s.MaxComputers)},
		{"cpus", strconv.FormatFloat(s.CPUs, 'f', -1, 64)},
		{"memoryMB", strconv.FormatInt(s.MemoryMB, 10)},
		{"dailySeconds", fmt.Sprintf("%d (%s)", s.DailySeconds, seconds(s.DailySeconds))},
		{"hours", hours},
		{"days", days},
		{"timeZone", zone},
		{"desktop", onOff(s.Desktop)},
		{"approval", onOff(s.Approval)},
		{"approvalTimeoutSeconds", strconv.Itoa(s.ApprovalTimeoutSeconds)},
		{"egress", onOff(s.Egress)},
		{"warmPoolSize", strconv.Itoa(s.WarmPoolSize)},
		{"warmPoolMax", strconv.Itoa(max(s.WarmPoolMax, s.WarmPoolSize))},
	} {
		fmt.Fprintf(w, "%s\t%s\n", row[0], row[1])
	}
	return w.Flush()
}

func newAgentApprovalsCmd() *cobra.Command {
	return controlCmd("approvals", "List the sessions waiting for the owner's approval",
		`approvals lists the new sessions waiting for the owner (with approval=on):
who asks, for which image, and until when; decide with berth agent approve
or berth agent deny.`,
		cobra.NoArgs, func(cmd *cobra.Command, ctx context.Context, c *control.Client, _ []string) error {
			as, err := c.Approvals(ctx)
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return printJSON(cmd, as)
			}
			if len(as) == 0 {
				_, err := fmt.Fprintln(cmd.OutOrStdout(), "no sessions waiting")
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tAGENT\tWORKSPACE\tIMAGE\tREFUSED AT")
			for _, a := range as {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", a.ID, a.Agent, a.Workspace, a.Image, a.Deadline.Local().Format(time.TimeOnly))
			}
			return w.Flush()
		})
}

func newAgentDecideCmd(approve bool) *cobra.Command {
	use, short := "deny ID", "Refuse a session waiting for approval"
	if approve {
		use, short = "approve ID", "Let a session waiting for approval start"
	}
	return controlCmd(use, short, "", cobra.ExactArgs(1),
		func(cmd *cobra.Command, ctx context.Context, c *control.Client, args []string) error {
			var a control.Approval
			var err error
			if approve {
				a, err = c.Approve(ctx, args[0])
			} else {
				a, err = c.Deny(ctx, args[0])
			}
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return printJSON(cmd, a)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", a.ID, a.State)
			return err
		})
}

func newAgentUsageCmd() *cobra.Command {
	var days int
	cmd := controlCmd("usage", "Show this machine's lending history",
		`usage shows how long this machine lent computers, day by day in the
owner's time zone, and the totals by AI agent and by workspace.`,
		cobra.NoArgs, func(cmd *cobra.Command, ctx context.Context, c *control.Client, _ []string) error {
			if days < 1 || days > 90 {
				return usagef("--days: %d is outside 1..90", days)
			}
			u, err := c.Usage(ctx, days)
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return printJSON(cmd, u)
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "today\t%s of %s\t(%s)\n", seconds(u.Today.Seconds), seconds(u.DailySeconds), u.TimeZone)
			fmt.Fprintln(w, "\nDAY\tLENT\tSESSIONS")
			for _, d := range u.Days {
				fmt.Fprintf(w, "%s\t%s\t%d\n", d.Day, seconds(d.Seconds), d.Sessions)
			}
			for _, t := range []struct {
				name string
				rows []control.UsageRow
			}{{"AGENT", u.ByAgent}, {"WORKSPACE", u.ByWorkspace}} {
				fmt.Fprintf(w, "\n%s\tLENT\tSESSIONS\n", t.name)
				for _, r := range t.rows {
					fmt.Fprintf(w, "%s\t%s\t%d\n", r.Key, seconds(r.Seconds), r.Sessions)
				}
			}
			return w.Flush()
		})
	cmd.Flags().IntVar(&days, "days", 14, "how many days, today included (1..90)")
	return cmd
}

func newAgentCleanupsCmd() *cobra.Command {
	return controlCmd("cleanups", "List what Berth left on this machine's Docker engine",
		`cleanups lists the containers, volumes and networks the agent found after
a restart and could not match to a running session; resolve each with
berth agent cleanup remove ID or berth agent cleanup keep ID.`,
		cobra.NoArgs, func(cmd *cobra.Command, ctx context.Context, c *control.Client, _ []string) error {
			ps, err := c.Cleanups(ctx)
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return printJSON(cmd, ps)
			}
			if len(ps) == 0 {
				_, err := fmt.Fprintln(cmd.OutOrStdout(), "nothing left behind")
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tKIND\tNAME\tSESSION\tREASON")
			for _, p := range ps {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", p.ID, p.Kind, p.Name, p.Session, p.Reason)
			}
			return w.Flush()
		})
}

func newAgentCleanupCmd() *cobra.Command {
	return controlCmd("cleanup remove|keep ID", "Remove a leftover, or keep it and stop asking",
		"", cobra.ExactArgs(2), func(cmd *cobra.Command, ctx context.Context, c *control.Client, args []string) error {
			var p control.CleanupPrompt
			var err error
			switch args[0] {
			case "remove":
				p, err = c.RemoveLeftover(ctx, args[1])
			case "keep":
				p, err = c.KeepLeftover(ctx, args[1])
			default:
				return usagef("cleanup: %q: want remove or keep", args[0])
			}
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return printJSON(cmd, p)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s %s: %s\n", p.Kind, p.Name, p.State)
			return err
		})
}

func parseOnOff(v string) (bool, error) {
	switch strings.ToLower(v) {
	case "on", "true", "yes":
		return true, nil
	case "off", "false", "no":
		return false, nil
	}
	return false, fmt.Errorf("%q: want on or off", v)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// seconds prints a duration of whole seconds as 1h2m3s.
func seconds(n int64) string { return (time.Duration(n) * time.Second).String() }
