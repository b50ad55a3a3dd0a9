package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/berthdev/berth/agent/service"
)

func init() { addSubcommand("agent", newAgentServiceCmd) }

// serviceFlags are the flags every service subcommand takes.
type serviceFlags struct {
	user    bool
	name    string
	manager string
}

func (f *serviceFlags) config() service.Config {
	m := f.manager
	switch m {
	case "systemd":
		m = service.Systemd
	case "sysv":
		m = service.SysV
	}
	return service.Config{Name: f.name, User: f.user, Manager: m}
}

func (f *serviceFlags) open(extra func(*service.Config)) (*service.Service, error) {
	cfg := f.config()
	if extra != nil {
		extra(&cfg)
	}
	s, err := service.New(cfg)
	if err != nil {
		return nil, usageError{err}
	}
	return s, nil
}

func (f *serviceFlags) kind() string {
	if f.user {
		return "user"
	}
	return "system"
}

func newAgentServiceCmd() *cobra.Command {
	f := &serviceFlags{}
	cmd := asGroup(&cobra.Command{
		Use:   "service",
		Short: "Run the lending agent as a system or user service",
		Long: `service installs berth agent run as a service of this machine's service
manager (systemd, or SysV init where systemd is not running), so that the
machine is lent from boot (a user service: from login), and the manager
restarts the agent if it exits.

A system service needs root and runs as root; pair as root first
(sudo berth agent pair ...). A user service (--user, systemd only) runs as
you, with your pairing; to keep it running when you are logged out, enable
lingering: loginctl enable-linger $USER.`,
	})
	pf := cmd.PersistentFlags()
	pf.BoolVar(&f.user, "user", false, "a user service (systemd --user) instead of a system service")
	pf.StringVar(&f.name, "name", service.DefaultName, "the service's name")
	pf.StringVar(&f.manager, "manager", "", "the service manager: systemd, sysv (default: the one running this machine)")
	cmd.AddCommand(newServiceInstallCmd(f), newServiceActionCmd(f, "uninstall"), newServiceActionCmd(f, "start"),
		newServiceActionCmd(f, "stop"), newServiceStatusCmd(f))
	return cmd
}

func newServiceInstallCmd(f *serviceFlags) *cobra.Command {
	var data string
	cmd := &cobra.Command{
		Use:   "install [--user] [--data DIR] [-- AGENT-RUN-FLAGS...]",
		Short: "Install the agent as a service (it starts at the next boot, or with start)",
		Long: `install writes the service's unit (or init script) and enables it. The
service runs this berth executable as

  berth agent run [--data DIR] [AGENT-RUN-FLAGS...]

where DIR is --data made absolute (without it, berth agent run uses its
own default) and the flags after -- are passed to berth agent run as they
are (--relay, --socket, --log-level). The service's environment
gets $HOME (system services) and $BERTH_CONFIG_DIR (when set) of the
installing shell, so that it finds the same pairing.`,
		Example: "  sudo berth agent service install --data /var/lib/berth-agent\n" +
			"  berth agent service install --user -- --log-level debug",
		Args: func(cmd *cobra.Command, args []string) error {
			if n := cmd.ArgsLenAtDash(); n > 0 || n < 0 && len(args) > 0 {
				return fmt.Errorf("unexpected argument %q: put flags for berth agent run after --", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			runArgs := []string{"agent", "run"}
			if data != "" {
				dir, err := filepath.Abs(data)
				if err != nil {
					return usagef("--data %s: %v", data, err)
				}
				runArgs = append(runArgs, "--data", dir)
			}
			runArgs = append(runArgs, args...)
			env := map[string]string{}
			if home := os.Getenv("HOME"); home != "" && !f.user {
				env["HOME"] = home
			}
			if v := os.Getenv(configDirEnv); v != "" {
				env[configDirEnv] = v
			}
			s, err := f.open(func(c *service.Config) {
				c.Args = runArgs
				c.Env = env
			})
			if err != nil {
				return err
			}
			if err := s.Install(); err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return printServiceJSON(cmd, s, f, "installed")
			}
			startCmd := "berth agent service start"
			if f.user {
				startCmd += " --user"
			}
			if f.name != service.DefaultName {
				startCmd += " --name " + f.name
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "installed %s service %s (%s): %s\n  runs: %s\nstart it now with: %s\n",
				f.kind(), s.Name(), s.Manager(), s.Path(), strings.Join(s.Command(), " "), startCmd)
			return err
		},
	}
	cmd.Flags().StringVar(&data, "data", "", "the agent's data folder, passed to berth agent run (default: berth agent run's default)")
	return cmd
}

// newServiceActionCmd is uninstall, start or stop.
func newServiceActionCmd(f *serviceFlags, action string) *cobra.Command {
	short := map[string]string{
		"uninstall": "Stop the service and remove it",
		"start":     "Start the installed service",
		"stop":      "Stop the service",
	}[action]
	done := map[string]string{"uninstall": "uninstalled", "start": "started", "stop": "stopped"}[action]
	return &cobra.Command{
		Use:   action + " [--user]",
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := f.open(nil)
			if err != nil {
				return err
			}
			switch action {
			case "uninstall":
				err = s.Uninstall()
			case "start":
				err = s.Start()
			case "stop":
				err = s.Stop()
			}
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return printServiceJSON(cmd, s, f, done)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s %s service %s (%s)\n", done, f.kind(), s.Name(), s.Manager())
			return err
		},
	}
}

func newServiceStatusCmd(f *serviceFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "status [--user]",
		Short: "Say whether the service is installed and running",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := f.open(nil)
			if err != nil {
				return err
			}
			st, err := s.Status()
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return printServiceJSON(cmd, s, f, string(st))
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s service %s (%s): %s\n", f.kind(), s.Name(), s.Manager(), st)
			return err
		},
	}
}

func printServiceJSON(cmd *cobra.Command, s *service.Service, f *serviceFlags, status string) error {
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	return enc.Encode(map[string]any{
		"name": s.Name(), "kind": f.kind(), "manager": s.Manager(), "path": s.Path(),
		"command": s.Command(), "status": status,
	})
}
