// Command berth is Berth's one binary: the server roles as subcommands, and
// the client commands that drive a supervisor over its REST API.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/berthdev/berth/api"
)

func main() {
	ctx, stop := signalContext()
	code := execute(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// signalContext returns a context that the first SIGINT or SIGTERM cancels,
// so that commands can end gracefully; a second signal exits at once.
func signalContext() (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-done:
			return
		}
		select {
		case <-sigs:
			os.Exit(exitInterrupted)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel()
	}
}

// Exit codes.
const (
	exitFailure     = 1
	exitUsage       = 2
	exitInterrupted = 130
)

// registration is a subcommand that a file adds to the root command, or to
// one of the root's subcommands when parent is set.
type registration struct {
	parent string
	build  func() *cobra.Command
}

var registrations []registration

// addCommand adds a top-level subcommand; each command file calls it from
// its init function: func init() { addCommand(newDevCmd) }.
func addCommand(build func() *cobra.Command) {
	registrations = append(registrations, registration{build: build})
}

// addSubcommand adds a subcommand under the top-level command named parent
// (for example "agent"), which must be registered too.
func addSubcommand(parent string, build func() *cobra.Command) {
	registrations = append(registrations, registration{parent: parent, build: build})
}

// newRootCmd builds the berth command with every registered subcommand.
func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "berth",
		Short: "Linux computers for AI agents",
		Long: `berth runs Berth's parts (the supervisor and the other server roles) and
drives a supervisor over its REST API.

Client commands find the supervisor at --url or $BERTH_URL (default ` + defaultURL + `)
and authenticate with $SUPERVISOR_TOKEN (or --token).`,
		Version:       version,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	asGroup(root)
	root.SetVersionTemplate("berth {{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	pf := root.PersistentFlags()
	pf.String("url", "", "supervisor URL (default $BERTH_URL, else "+defaultURL+")")
	pf.String("token", "", "operator token (default $SUPERVISOR_TOKEN; a flag is visible to other local users)")
	pf.Bool("json", false, "print the supervisor's answers as JSON")

	for _, r := range registrations {
		if r.parent == "" {
			root.AddCommand(r.build())
		}
	}
	for _, r := range registrations {
		if r.parent == "" {
			continue
		}
		parent, _, err := root.Find([]string{r.parent})
		if err != nil || parent == root {
			panic(fmt.Sprintf("berth: subcommand of unknown command %q", r.parent))
		}
		parent.AddCommand(r.build())
	}
	return root
}

// execute runs berth with args and returns its exit code.
func execute(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	ran := false
	markRun(root, &ran)

	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	var exit *exitError
	var usage usageError
	switch {
	case errors.As(err, &exit):
		if exit.msg != "" {
			fmt.Fprintf(stderr, "berth: %s\n", exit.msg)
		}
		return exit.code
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		fmt.Fprintln(stderr, "berth: interrupted")
		return exitInterrupted
	case errors.As(err, &usage) || !ran:
		fmt.Fprintf(stderr, "berth: %v\nRun '%s --help' for usage.\n", err, cmd.CommandPath())
		return exitUsage
	case unreachable(err) && !isServerRole(cmd):
		fmt.Fprintf(stderr, "berth: cannot reach the supervisor (is it running? set --url or $BERTH_URL): %v\n", err)
		return exitFailure
	default:
		fmt.Fprintf(stderr, "berth: %v\n", err)
		return exitFailure
	}
}

// markRun makes every command of the tree set *ran when its run function
// starts, so that errors before it (arguments, required flags) count as
// usage errors.
func markRun(cmd *cobra.Command, ran *bool) {
	switch run, runE := cmd.Run, cmd.RunE; {
	case runE != nil:
		cmd.RunE = func(c *cobra.Command, args []string) error {
			*ran = true
			return runE(c, args)
		}
	case run != nil:
		cmd.Run = func(c *cobra.Command, args []string) {
			*ran = true
			run(c, args)
		}
	}
	for _, sub := range cmd.Commands() {
		markRun(sub, ran)
	}
}

// unreachable reports whether err is a failure to connect to the supervisor.
func unreachable(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// usageError is a mistake in the command line.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// serverRole refuses the client flags on a server command (berth dev,
// supervisor, relay), which takes its settings from its own flags and the
// environment: --url, --token and --json would be silently ignored there.
func serverRole(cmd *cobra.Command) *cobra.Command {
	hints := map[string]string{
		"url":   "--listen sets where it serves (and berth relay's --supervisor names the supervisor)",
		"token": "its secrets come from the environment (SUPERVISOR_TOKEN, RELAY_TOKEN)",
		"json":  "it prints no answers to format",
	}
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[serverRoleAnnotation] = "true"
	cmd.PreRunE = func(c *cobra.Command, _ []string) error {
		for _, name := range []string{"url", "token", "json"} {
			if c.Flags().Changed(name) {
				return usagef("--%s is a client flag, which %s ignores: %s", name, c.CommandPath(), hints[name])
			}
		}
		return nil
	}
	return cmd
}

// serverRoleAnnotation marks the commands made by serverRole.
const serverRoleAnnotation = "berth.server-role"

// isServerRole reports whether cmd is a server command: a dial error there
// is its own (its store, its providers), not a client failing to reach the
// supervisor.
func isServerRole(cmd *cobra.Command) bool {
	return cmd != nil && cmd.Annotations[serverRoleAnnotation] == "true"
}

func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// exitError ends berth with code, after printing msg when it is set.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string {
	if e.msg != "" {
		return e.msg
	}
	return fmt.Sprintf("exit status %d", e.code)
}

// asGroup makes cmd a command that only holds subcommands: alone it prints
// its help, and an unknown subcommand is a usage error.
func asGroup(cmd *cobra.Command) *cobra.Command {
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
		if cmd.SuggestionsMinimumDistance <= 0 {
			cmd.SuggestionsMinimumDistance = 2
		}
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			msg += "; did you mean " + strings.Join(s, " or ") + "?"
		}
		return usageError{errors.New(msg)}
	}
	return cmd
}

const defaultURL = "http://127.0.0.1:8080"

// flagOrEnv returns the flag's value when it was given, else the
// environment variable's, else def.
func flagOrEnv(cmd *cobra.Command, flag, env, def string) string {
	if f := cmd.Flags().Lookup(flag); f != nil && f.Changed {
		return f.Value.String()
	}
	if v := os.Getenv(env); v != "" {
		return v
	}
	return def
}

// newClient returns a client of the supervisor named by the global flags
// and environment.
func newClient(cmd *cobra.Command) (*api.Client, error) {
	token := flagOrEnv(cmd, "token", "SUPERVISOR_TOKEN", "")
	if token == "" {
		return nil, usagef("no operator token: set SUPERVISOR_TOKEN or pass --token")
	}
	c, err := api.New(flagOrEnv(cmd, "url", "BERTH_URL", defaultURL), token, api.WithUserAgent("berth/"+version))
	if err != nil {
		return nil, usageError{err}
	}
	return c, nil
}

// jsonOutput reports whether --json was given.
func jsonOutput(cmd *cobra.Command) bool {
	v, _ := cmd.Flags().GetBool("json")
	return v
}

// printed calls the supervisor with the command's client and prints the
// answer: as it came with --json, else with text.
func printed[T any](cmd *cobra.Command, call func(context.Context, *api.Client) (T, error), text func(T) error) error {
	c, err := newClient(cmd)
	if err != nil {
		return err
	}
	ctx, raw := answerContext(cmd)
	v, err := call(ctx, c)
	if err != nil {
		return err
	}
	if jsonOutput(cmd) {
		return printAnswer(cmd, raw, v)
	}
	return text(v)
}

// answerContext returns the command's context, under which the client
// keeps the supervisor's answer as it came, for printAnswer.
func answerContext(cmd *cobra.Command) (context.Context, *json.RawMessage) {
	raw := new(json.RawMessage)
	return api.WithRawAnswer(cmd.Context(), raw), raw
}

// printAnswer prints the supervisor's answer raw (indented), or v when the
// answer had no body.
func printAnswer(cmd *cobra.Command, raw *json.RawMessage, v any) error {
	var buf bytes.Buffer
	if len(*raw) == 0 || json.Indent(&buf, *raw, "", "  ") != nil {
		return printJSON(cmd, v)
	}
	buf.WriteByte('\n')
	_, err := cmd.OutOrStdout().Write(buf.Bytes())
	return err
}

// printJSON writes v as indented JSON to the command's output.
func printJSON(cmd *cobra.Command, v any) error {
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// warnf prints a warning on the command's error output.
func warnf(cmd *cobra.Command, format string, args ...any) {
	fmt.Fprintf(cmd.ErrOrStderr(), "berth: "+format+"\n", args...)
}
