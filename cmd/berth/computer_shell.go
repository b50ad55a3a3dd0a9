package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/berthdev/berth/api"
)

func init() { addSubcommand("computer", newComputerShellCmd) }

// exitShellLost is berth's exit code when a terminal ended without its
// command's exit (the session ended, or the link broke), as ssh's 255.
const exitShellLost = 255

func newComputerShellCmd() *cobra.Command {
	var link bool
	cmd := &cobra.Command{
		Use:   "shell [flags] [-- COMMAND...]",
		Short: "Open an interactive terminal on the agent's computer",
		Long: `Open an interactive terminal on the agent's running computer, as
"docker exec -it" does: the computer user's login shell, or COMMAND when
given (its words joined with spaces and run by the computer's shell).

When stdin is a terminal, it is put in raw mode for the session (every key,
^C included, goes to the computer) and restored at the end; the remote
terminal follows the local one's size. When stdin is not a terminal, its
data is sent as typed and its end as ^D.

berth exits with the command's exit code, or 255 when the terminal ended
without it: the session ended (stopped, expired, slept) or the link broke.
A session has at most 4 terminals open at once.

With --link, berth prints a link instead: a page that opens the login shell
in a browser (xterm.js, served by the supervisor). The link works once,
within two minutes, and acts as the key that asked for it.`,
		Example: `  berth computer shell --agent a1
  berth computer shell --agent a1 -- top
  echo 'uname -a' | berth computer shell --agent a1
  berth computer shell --agent a1 --link`,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, agent, err := agentCmd(cmd)
			if err != nil {
				return err
			}
			if link {
				if len(args) > 0 {
					return usagef("--link opens the login shell; it takes no COMMAND")
				}
				l, err := c.TerminalLink(cmd.Context(), agent)
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), l.URL)
				warnf(cmd, "the link works once, until %s", l.ExpiresAt.Local().Format(time.TimeOnly))
				return nil
			}
			return runShell(cmd, c, agent, strings.Join(args, " "))
		},
	}
	cmd.Flags().SetInterspersed(false)
	cmd.Flags().BoolVar(&link, "link", false, "print a one-time link to a terminal page in a browser instead")
	return cmd
}

// runShell runs one terminal session between the local terminal (or
// stdin and stdout) and the agent's computer.
func runShell(cmd *cobra.Command, c *api.Client, agent, command string) error {
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	in, out := cmd.InOrStdin(), cmd.OutOrStdout()
	fd, tty := -1, false
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fd, tty = int(f.Fd()), true
	}
	req := api.TerminalRequest{Command: command}
	if tty {
		if w, h, err := term.GetSize(fd); err == nil && w > 0 && h > 0 {
			req.Cols, req.Rows = min(w, api.MaxTerminalCols), min(h, api.MaxTerminalRows)
		}
	}
	t, err := c.Terminal(ctx, agent, req, out)
	if err != nil {
		return err
	}
	defer t.Close()
	if tty {
		old, err := term.MakeRaw(fd)
		if err != nil {
			return err
		}
		defer term.Restore(fd, old)
		winch := make(chan os.Signal, 1)
		notifyResize(winch)
		defer signal.Stop(winch)
		go func() {
			for {
				select {
				case <-t.Done():
					return
				case <-winch:
					if w, h, err := term.GetSize(fd); err == nil && w > 0 && h > 0 {
						t.Resize(min(w, api.MaxTerminalCols), min(h, api.MaxTerminalRows))
					}
				}
			}
		}()
	}
	go func() {
		if _, err := io.Copy(t, in); err == nil && !tty {
			t.CloseInput()
		}
	}()
	select {
	case <-t.Done():
	case <-ctx.Done():
	}
	// The deferred Restore runs before berth prints any message.
	exit, err := t.Wait()
	return shellOutcome(cmd.Context(), exit, err)
}

// shellOutcome turns how a terminal ended into berth's exit.
func shellOutcome(ctx context.Context, exit api.TerminalExit, err error) error {
	switch {
	case ctx.Err() != nil:
		return &exitError{code: exitInterrupted, msg: "interrupted; the terminal was closed"}
	case err != nil:
		return &exitError{code: exitShellLost, msg: err.Error()}
	case exit.Code != "":
		return &exitError{code: exitShellLost, msg: exit.Message + " (" + exit.Code + ")"}
	case exit.ExitCode == 0:
		return nil
	case exit.ExitCode < 0 || exit.ExitCode > 255:
		return &exitError{code: exitFailure}
	}
	return &exitError{code: exit.ExitCode}
}
