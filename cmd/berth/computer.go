package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/berthdev/berth/internal/units"

	"github.com/spf13/cobra"

	"github.com/berthdev/berth/api"
)

func init() { addCommand(newComputerCmd) }

// Exit codes of `berth computer exec` beyond the command's own.
const (
	exitTimedOut  = 124 // the command ran out of time, as with timeout(1)
	exitUncertain = 125 // the command's outcome is unknown
)

// maxWriteInput bounds what `berth computer write` reads; the supervisor
// enforces its own, smaller limit.
const maxWriteInput = 1 << 20

func newComputerCmd() *cobra.Command {
	cmd := asGroup(&cobra.Command{
		Use:   "computer",
		Short: "Connect, start and use an agent's computer",
		Long: `Connect a provider to an agent, then start, use and stop its computer.

Every subcommand acts for the agent named by --agent, or by $BERTH_AGENT.`,
	})
	cmd.PersistentFlags().String("agent", "", "the agent's id (default $BERTH_AGENT)")
	cmd.AddCommand(
		newConnectCmd(),
		newStartCmd(),
		newStatusCmd(),
		newListCmd(),
		newExecCmd(),
		newReadCmd(),
		newWriteCmd(),
		newStopCmd(),
		newCheckpointCmd(),
		newCheckpointsCmd(),
		newDisconnectCmd(),
		newConfirmCleanupCmd(),
	)
	return cmd
}

// agentOf returns the agent the command acts for.
func agentOf(cmd *cobra.Command) (string, error) {
	if a := flagOrEnv(cmd, "agent", "BERTH_AGENT", ""); a != "" {
		return a, nil
	}
	return "", usagef("no agent: pass --agent or set BERTH_AGENT")
}

// agentCmd returns a client and the agent for one of the computer commands.
func agentCmd(cmd *cobra.Command) (*api.Client, string, error) {
	agent, err := agentOf(cmd)
	if err != nil {
		return nil, "", err
	}
	c, err := newClient(cmd)
	return c, agent, err
}

func newConnectCmd() *cobra.Command {
	var (
		req   api.ConnectRequest
		creds []string
	)
	cmd := &cobra.Command{
		Use:   "connect",
		Short: "Connect a provider to the agent",
		Long: `Connect a provider to the agent, with the provider's credentials, the
longest session (--lease) and the daily time budget (--daily), in seconds.

Credentials are key=value pairs (apiKey for most providers; tokenId and
tokenSecret for modal; url and apiKey for a tunnel; none for docker and
local). A value written key=@FILE is read from FILE, which keeps it out of
the process list and the shell history.

With --persistence home the computer keeps its home folder across sessions:
stop, expiry and --idle-sleep seconds without tool calls put it to sleep,
archiving the home in the supervisor's object store, and the next start
wakes it with the home restored. Processes and files outside the home do
not survive a sleep. Checkpoints (berth computer checkpoint) save the home
under a name; --max-checkpoints bounds how many are kept. With --persistence
memory a sleep also suspends the machine, its memory and processes kept on
the provider's disk, and the next start resumes it where it was (the
docker provider with computers under gVisor and the engine's checkpoints).

--desktop-users sets how many callers may hold a desktop computer's desktop
tools at once. --browser-evaluate allows the browser tool evaluate, which
runs any script in the page. A hosted browser (browserbase, browseruse) is
not recorded and uses no proxy unless --browser-recording or
--browser-proxy-country says so.

Connecting does not prove that the account can create a machine: the first
start does.`,
		Example: `  berth computer connect --agent a1 --provider docker --lease 900 --daily 3600
  berth computer connect --agent a1 --provider e2b --credential apiKey=@$HOME/.e2b-key --image desktop
  berth computer connect --agent a1 --provider docker --persistence home --idle-sleep 300 --max-checkpoints 20`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			agent, err := agentOf(cmd)
			if err != nil {
				return err
			}
			req.Agent = agent
			if err := checkPersistence(cmd, &req); err != nil {
				return err
			}
			if req.Credentials, err = parseCredentials(creds); err != nil {
				return err
			}
			return printed(cmd, func(ctx context.Context, c *api.Client) (*api.Connection, error) { return c.Connect(ctx, req) },
				func(conn *api.Connection) error {
					_, err := fmt.Fprintf(cmd.OutOrStdout(), "connected agent %s to %s: image %s, sessions up to %s, %s a day%s\n",
						conn.Agent, conn.Provider, conn.Image, seconds2d(conn.LeaseSeconds), seconds2d(conn.DailySeconds), persistenceText(conn))
					return err
				})
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Provider, "provider", "", "where the computer runs: docker, local, tunnel, e2b, ... (default: the supervisor's DEFAULT_PROVIDER)")
	f.IntVar(&req.LeaseSeconds, "lease", 0, "longest session in seconds, 60..900 (default 900)")
	f.IntVar(&req.DailySeconds, "daily", 0, "daily time budget in seconds, lease..86400 (default 3600)")
	f.StringVar(&req.Image, "image", "", "headless or desktop (default headless)")
	f.StringArrayVar(&creds, "credential", nil, "a provider credential as key=value or key=@FILE (repeatable)")
	f.StringVar(&req.Persistence, "persistence", "", "none (every session starts empty), home (the home folder is kept across sessions) or memory (its processes too, suspended while asleep: docker provider under gVisor) (default none)")
	f.IntVar(&req.IdleSleepSeconds, "idle-sleep", 0, fmt.Sprintf("with --persistence home or memory: seconds without tool calls before the computer sleeps, %d..%d (default %d)",
		api.MinIdleSleepSeconds, api.MaxIdleSleepSeconds, api.DefaultIdleSleepSeconds))
	f.IntVar(&req.MaxCheckpoints, "max-checkpoints", 0, fmt.Sprintf("with --persistence home or memory: how many checkpoints the agent may keep, 1..%d (default %d)",
		api.MaxMaxCheckpoints, api.DefaultMaxCheckpoints))
	f.IntVar(&req.DesktopUsers, "desktop-users", 0, fmt.Sprintf("with --image desktop: how many callers may hold the desktop tools at once, 1..%d (default %d)",
		api.MaxDesktopUsers, api.DefaultDesktopUsers))
	f.BoolVar(&req.BrowserEvaluate, "browser-evaluate", false, "allow the browser tool evaluate (any script in the page)")
	f.BoolVar(&req.BrowserRecording, "browser-recording", false, "hosted browsers: have the provider record each session")
	f.StringVar(&req.BrowserProxyCountry, "browser-proxy-country", "", "hosted browsers: route through the provider's proxy in this country (us, de, ...)")
	cmd.RegisterFlagCompletionFunc("image", cobra.FixedCompletions([]string{"headless", "desktop"}, cobra.ShellCompDirectiveNoFileComp))
	cmd.RegisterFlagCompletionFunc("persistence", cobra.FixedCompletions([]string{api.PersistenceNone, api.PersistenceHome, api.PersistenceMemory}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// checkPersistence checks the persistence flags of connect; the supervisor
// checks their ranges.
func checkPersistence(cmd *cobra.Command, req *api.ConnectRequest) error {
	switch req.Persistence {
	case "", api.PersistenceNone, api.PersistenceHome, api.PersistenceMemory:
	default:
		return usagef("--persistence %q: want %s, %s or %s", req.Persistence, api.PersistenceNone, api.PersistenceHome, api.PersistenceMemory)
	}
	f := cmd.Flags()
	if !api.KeepsHome(req.Persistence) && (f.Changed("idle-sleep") || f.Changed("max-checkpoints")) {
		return usagef("--idle-sleep and --max-checkpoints need --persistence home or memory")
	}
	// The client sends zero as "the default": a connection without
	// checkpoints ("maxCheckpoints": 0) is made through the REST API.
	if f.Changed("desktop-users") && req.DesktopUsers <= 0 {
		return usagef("--desktop-users %d: want 1..%d", req.DesktopUsers, api.MaxDesktopUsers)
	}
	if f.Changed("idle-sleep") && req.IdleSleepSeconds <= 0 {
		return usagef("--idle-sleep %d: want %d..%d seconds", req.IdleSleepSeconds, api.MinIdleSleepSeconds, api.MaxIdleSleepSeconds)
	}
	if f.Changed("max-checkpoints") && req.MaxCheckpoints <= 0 {
		return usagef("--max-checkpoints %d: want 1..%d (for none, connect through the REST API with \"maxCheckpoints\": 0)", req.MaxCheckpoints, api.MaxMaxCheckpoints)
	}
	return nil
}

// persistenceText describes what a persistent connection keeps, or nothing.
func persistenceText(conn *api.Connection) string {
	var s string
	switch conn.Persistence {
	case api.PersistenceHome:
		s = fmt.Sprintf("; keeps its home folder, sleeps after %s without tool calls, up to %d checkpoints",
			seconds2d(conn.IdleSleepSeconds), conn.MaxCheckpoints)
	case api.PersistenceMemory:
		s = fmt.Sprintf("; keeps its home folder and its processes, sleeps (suspended) after %s without tool calls, up to %d checkpoints",
			seconds2d(conn.IdleSleepSeconds), conn.MaxCheckpoints)
	}
	if conn.Image == "desktop" && conn.DesktopUsers > 1 {
		s += fmt.Sprintf("; %d callers may use the desktop at once", conn.DesktopUsers)
	}
	if conn.BrowserEvaluate {
		s += "; browser evaluate allowed"
	}
	if conn.BrowserRecording {
		s += "; sessions recorded"
	}
	if conn.BrowserProxyCountry != "" {
		s += "; proxy in " + conn.BrowserProxyCountry
	}
	return s
}

// parseCredentials turns key=value and key=@FILE pairs into a map.
func parseCredentials(pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, usagef("--credential %q: want key=value or key=@FILE", redact(p))
		}
		if _, dup := m[k]; dup {
			return nil, usagef("--credential %s given twice", k)
		}
		if file, ok := strings.CutPrefix(v, "@"); ok {
			b, err := os.ReadFile(file)
			if err != nil {
				return nil, fmt.Errorf("credential %s: %w", k, err)
			}
			v = strings.TrimRight(string(b), "\r\n")
		}
		m[k] = v
	}
	return m, nil
}

// redact hides the value of a key=value pair.
func redact(pair string) string {
	if k, _, ok := strings.Cut(pair, "="); ok {
		return k + "=…"
	}
	if len(pair) > 4 {
		return pair[:4] + "…"
	}
	return pair
}

func newStartCmd() *cobra.Command {
	var checkpoint string
	cmd := &cobra.Command{
		Use:   "start",
		Short: "Start the agent's computer, or show the one running",
		Long: `Start the agent's computer, or show the one running. A persistent computer
(connected with --persistence home) wakes with its home folder as its last
session left it, or, with --checkpoint, as one of its checkpoints holds it;
a start from a checkpoint is refused while the computer runs. Processes do
not survive a sleep: start again what must run. A computer connected with
--persistence memory is resumed with its processes where it can be.`,
		Example: `  berth computer start --agent a1
  berth computer start --agent a1 --checkpoint before-upgrade`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			agent, err := agentOf(cmd)
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("checkpoint") && checkpoint == "" {
				return usagef("--checkpoint needs a name")
			}
			return printed(cmd, func(ctx context.Context, c *api.Client) (*api.Session, error) {
				var (
					s   *api.Session
					err error
				)
				if checkpoint != "" {
					s, err = c.StartFrom(ctx, agent, checkpoint)
				} else {
					s, err = c.Start(ctx, agent)
				}
				switch {
				case err != nil:
					return nil, err
				case s == nil:
					return nil, errors.New("the supervisor answered without a session")
				case !s.Live():
					return nil, fmt.Errorf("the supervisor answered session %s %s: no computer was started; run berth computer start again", s.ID, s.State)
				}
				return s, nil
			}, func(s *api.Session) error {
				printSession(cmd, agent, s)
				if checkpoint != "" && s.State == api.StateRunning {
					fmt.Fprintf(cmd.OutOrStdout(), "home folder restored from checkpoint %s\n", checkpoint)
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&checkpoint, "checkpoint", "", "start a persistent computer from this checkpoint in place of its last sleep")
	return cmd
}

// printSession prints one line about s, and what a person should do when
// its state needs them.
func printSession(cmd *cobra.Command, agent string, s *api.Session) {
	out := cmd.OutOrStdout()
	if s == nil {
		fmt.Fprintln(out, "no session")
		return
	}
	fmt.Fprintf(out, "session %s\n", sessionLine(s))
	warnSession(cmd, agent, s)
}

func sessionLine(s *api.Session) string {
	line := s.ID + " " + s.State
	if s.Provider != "" {
		line += " on " + s.Provider
		if s.Image != "" {
			line += " (" + s.Image + ")"
		}
	}
	if s.State == api.StateRunning || s.State == api.StateStarting {
		line += fmt.Sprintf(", %s left", seconds2d(s.RemainingSeconds))
		if !s.ExpiresAt.IsZero() {
			line += ", until " + when(s.ExpiresAt)
		}
	}
	return line
}

func warnSession(cmd *cobra.Command, agent string, s *api.Session) {
	switch s.State {
	case api.StateUncertain, api.StateCleanupFailed:
		if s.Message != "" {
			warnf(cmd, "%s", s.Message)
		}
		warnf(cmd, "check provider %s for a machine of this session and remove it, then run: berth computer confirm-cleanup --agent %s", s.Provider, agent)
	default:
		if s.Message != "" {
			warnf(cmd, "%s", s.Message)
		}
	}
}

func newListCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List every agent's computer: provider, image and session",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return printed(cmd, func(ctx context.Context, c *api.Client) ([]api.Computer, error) { return c.Computers(ctx) }, func(list []api.Computer) error {
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "AGENT\tPROVIDER\tIMAGE\tSESSION")
				for _, x := range list {
					sess := "none"
					if x.Session != nil {
						sess = sessionLine(x.Session)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", x.Agent, x.Provider, x.Image, sess)
				}
				return tw.Flush()
			})
		},
	}
}

func newStatusCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the agent's connection, session and budget, and whether it sleeps",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			agent, err := agentOf(cmd)
			if err != nil {
				return err
			}
			return printed(cmd, func(ctx context.Context, c *api.Client) (*api.ComputerStatus, error) { return c.Status(ctx, agent) },
				func(st *api.ComputerStatus) error {
					tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
					conn, b := st.Connection, st.Budget
					fmt.Fprintf(tw, "agent\t%s\n", agent)
					fmt.Fprintf(tw, "provider\t%s\n", conn.Provider)
					fmt.Fprintf(tw, "image\t%s\n", conn.Image)
					fmt.Fprintf(tw, "lease\t%s\n", seconds2d(conn.LeaseSeconds))
					if api.KeepsHome(conn.Persistence) {
						fmt.Fprintf(tw, "persistence\t%s, sleeps after %s without tool calls, up to %d checkpoints\n",
							conn.Persistence, seconds2d(conn.IdleSleepSeconds), conn.MaxCheckpoints)
					}
					switch {
					case st.Session != nil:
						fmt.Fprintf(tw, "session\t%s\n", sessionLine(st.Session))
					case st.State == api.StateSleeping:
						fmt.Fprintf(tw, "session\tnone: sleeping, the next start wakes the home from its archive\n")
					default:
						fmt.Fprintf(tw, "session\tnone\n")
					}
					if a := st.Archive; a != nil {
						fmt.Fprintf(tw, "archive\t%s, made on %s at %s\n", units.Bytes(a.Bytes), a.Image, when(a.CreatedAt))
					}
					fmt.Fprintf(tw, "budget\t%s left of %s today (%s used, %s reserved), resets %s\n",
						seconds2d(b.LeftSeconds), seconds2d(b.DailySeconds), seconds2d(b.UsedSeconds), seconds2d(b.ReservedSeconds), when(b.ResetsAt))
					if err := tw.Flush(); err != nil {
						return err
					}
					if st.Session != nil {
						warnSession(cmd, agent, st.Session)
					}
					return nil
				})
		},
	}
}

func newExecCmd() *cobra.Command {
	var timeout int
	cmd := &cobra.Command{
		Use:   "exec [flags] [--] COMMAND...",
		Short: "Run a shell command on the agent's computer",
		Long: `Run a shell command on the agent's computer. The words of COMMAND are joined
with spaces and run by the computer's shell, as ssh does, so quote what the
remote shell should see as one word. Flags go before COMMAND.

The command's stdout and stderr are printed to berth's, and berth exits with
the command's exit code: 124 when it timed out, and 125 when its outcome is
uncertain (the computer or its link failed mid-call; it may or may not have
run, so inspect the computer before repeating it). A background process must
redirect its output, or the call waits for it.`,
		Example: `  berth computer exec --agent a1 -- ls -la /tmp
  berth computer exec --agent a1 --timeout 60 -- 'make test > test.log 2>&1'`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			command := strings.Join(args, " ")
			if strings.TrimSpace(command) == "" {
				return usagef("empty command")
			}
			c, agent, err := agentCmd(cmd)
			if err != nil {
				return err
			}
			ctx, raw := answerContext(cmd)
			res, err := c.Exec(ctx, agent, api.ExecRequest{Command: command, TimeoutSeconds: timeout})
			if err != nil {
				if ctx.Err() != nil {
					return &exitError{code: exitInterrupted, msg: "interrupted; the command may still be running on the computer"}
				}
				return err
			}
			if jsonOutput(cmd) {
				if err := printAnswer(cmd, raw, res); err != nil {
					return err
				}
			} else {
				io.WriteString(cmd.OutOrStdout(), res.Stdout)
				io.WriteString(cmd.ErrOrStderr(), res.Stderr)
			}
			return execOutcome(cmd, timeout, res)
		},
	}
	cmd.Flags().SetInterspersed(false)
	cmd.Flags().IntVar(&timeout, "timeout", 0, "seconds the command may run, at most 120 and never past the session's end (default: the supervisor's)")
	return cmd
}

// execOutcome warns about what the result does not show by itself and
// turns it into berth's exit code.
func execOutcome(cmd *cobra.Command, timeout int, res *api.ExecResult) error {
	if res.Truncated {
		warnf(cmd, "the output was truncated; redirect it to a file and read that to see all of it")
	}
	if res.TimedOut {
		if timeout > 0 {
			warnf(cmd, "the command timed out after %d s", timeout)
		} else {
			warnf(cmd, "the command timed out")
		}
	}
	if res.Uncertain {
		warnf(cmd, "the command's outcome is uncertain: the computer or its link failed mid-call, and it may or may not have run. Inspect the computer before repeating anything with side effects.")
	}
	if res.Advice != "" {
		warnf(cmd, "%s", res.Advice)
	}
	code := res.ExitCode
	switch {
	case res.Uncertain:
		code = exitUncertain
	case res.TimedOut:
		code = exitTimedOut
	case code < 0 || code > 255:
		code = exitFailure
	}
	if code == 0 {
		return nil
	}
	return &exitError{code: code}
}

func newReadCmd() *cobra.Command {
	var (
		offset int64
		all    bool
	)
	cmd := &cobra.Command{
		Use:   "read PATH",
		Short: "Print a UTF-8 file of the agent's computer",
		Long: `Print a UTF-8 file of the agent's computer. One call answers a bounded part
of a long file; berth then says on stderr where the rest starts (--offset),
and --all reads on until the end.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := args[0]
			if offset < 0 {
				return usagef("--offset must not be negative")
			}
			c, agent, err := agentCmd(cmd)
			if err != nil {
				return err
			}
			ctx, raw := answerContext(cmd)
			for {
				res, err := c.ReadFile(ctx, agent, api.ReadFileRequest{Path: path, Offset: offset})
				if err != nil {
					return err
				}
				if jsonOutput(cmd) {
					err = printAnswer(cmd, raw, res)
				} else {
					_, err = io.WriteString(cmd.OutOrStdout(), res.Content)
				}
				if err != nil || !res.Truncated {
					return err
				}
				if res.NextOffset <= offset {
					return fmt.Errorf("the supervisor marked %s truncated at offset %d without a later offset to continue from", path, offset)
				}
				if !all {
					warnf(cmd, "%s continues at offset %d: pass --offset %d for the next part, or --all", path, res.NextOffset, res.NextOffset)
					return nil
				}
				offset = res.NextOffset
			}
		},
	}
	cmd.Flags().Int64Var(&offset, "offset", 0, "where to start reading, as answered by a truncated read")
	cmd.Flags().BoolVar(&all, "all", false, "follow truncated reads to the end of the file")
	return cmd
}

func newWriteCmd() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "write PATH",
		Short: "Write a UTF-8 file on the agent's computer",
		Long: `Write a UTF-8 file on the agent's computer, from --file or from stdin. The
computer verifies the write; berth prints the size and SHA-256 on disk and
checks them against what it sent.`,
		Example: `  berth computer write --agent a1 notes.txt --file ./notes.txt
  echo hello | berth computer write --agent a1 /tmp/hello.txt`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := args[0]
			agent, err := agentOf(cmd)
			if err != nil {
				return err
			}
			content, err := writeInput(cmd, file)
			if err != nil {
				return err
			}
			return printed(cmd, func(ctx context.Context, c *api.Client) (*api.WriteFileResult, error) {
				res, err := c.WriteFile(ctx, agent, api.WriteFileRequest{Path: path, Content: content})
				if err != nil {
					return nil, err
				}
				if err := checkWrite(content, res); err != nil {
					return nil, fmt.Errorf("%s: %w", path, err)
				}
				return res, nil
			}, func(res *api.WriteFileResult) error {
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "wrote %d bytes to %s, sha256 %s\n", res.Bytes, path, res.SHA256)
				return err
			})
		},
	}
	cmd.Flags().StringVar(&file, "file", "", "local file to send (default: stdin)")
	return cmd
}

// writeInput reads what `berth computer write` sends: file, or stdin.
func writeInput(cmd *cobra.Command, file string) (string, error) {
	var r io.Reader
	name := file
	if file == "" {
		name = "stdin"
		r = cmd.InOrStdin()
		if f, ok := r.(*os.File); ok {
			if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
				warnf(cmd, "reading the content from the terminal; end it with Ctrl-D (or pass --file)")
			}
		}
	} else {
		f, err := os.Open(file)
		if err != nil {
			return "", err
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxWriteInput+1))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", name, err)
	}
	if len(b) > maxWriteInput {
		return "", fmt.Errorf("%s: larger than %d bytes; computer write takes text files of up to 16,000 characters", name, maxWriteInput)
	}
	if !utf8.Valid(b) {
		return "", errors.New(name + ": not valid UTF-8; computer write takes text files only")
	}
	return string(b), nil
}

// checkWrite compares what the computer verified on disk with what was sent.
func checkWrite(content string, res *api.WriteFileResult) error {
	sum := sha256.Sum256([]byte(content))
	want := hex.EncodeToString(sum[:])
	if res.Bytes != int64(len(content)) || (res.SHA256 != "" && !strings.EqualFold(res.SHA256, want)) {
		return fmt.Errorf("the computer has %d bytes with sha256 %s, but %d bytes with sha256 %s were sent",
			res.Bytes, res.SHA256, len(content), want)
	}
	return nil
}

func newStopCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "stop",
		Short: "Stop and discard the agent's computer (a persistent one sleeps, keeping its home)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			agent, err := agentOf(cmd)
			if err != nil {
				return err
			}
			return printed(cmd, func(ctx context.Context, c *api.Client) (*api.Session, error) { return c.Stop(ctx, agent) },
				func(s *api.Session) error { printSession(cmd, agent, s); return nil })
		},
	}
}

func newDisconnectCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "disconnect",
		Short: "Stop the agent's computer, then remove its connection and credentials",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, agent, err := agentCmd(cmd)
			if err != nil {
				return err
			}
			ctx, raw := answerContext(cmd)
			if err := c.Disconnect(ctx, agent); err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return printAnswer(cmd, raw, map[string]any{"agent": agent, "disconnected": true})
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "disconnected agent %s\n", agent)
			return err
		},
	}
}

func newConfirmCleanupCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "confirm-cleanup",
		Short: "Confirm that a person removed the machine of an uncertain session",
		Long: `Confirm that you checked the provider and removed any machine left by the
agent's uncertain session (one whose machine id was lost when it started),
or by a session whose automatic cleanup keeps failing. The supervisor then
closes the session. Confirm only after checking: a machine left running at
the provider is no longer tracked by Berth.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			agent, err := agentOf(cmd)
			if err != nil {
				return err
			}
			return printed(cmd, func(ctx context.Context, c *api.Client) (*api.Session, error) { return c.ConfirmCleanup(ctx, agent) },
				func(s *api.Session) error {
					if s == nil {
						_, err := fmt.Fprintf(cmd.OutOrStdout(), "cleanup confirmed for agent %s\n", agent)
						return err
					}
					_, err := fmt.Fprintf(cmd.OutOrStdout(), "cleanup confirmed; session %s\n", sessionLine(s))
					return err
				})
		},
	}
}
