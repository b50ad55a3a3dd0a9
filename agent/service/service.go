// Package service installs the Berth agent as a service of the machine's
// service manager (systemd, SysV init, and the others that
// github.com/kardianos/service knows), either as a system service or, with
// systemd, as a user service, and starts, stops and reports on it.
//
// The service runs the berth executable with fixed arguments (by default
// "agent run"); the service manager restarts it when it exits.
package service

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	kservice "github.com/kardianos/service"
)

// DefaultName is the service's name when Config.Name is empty.
const DefaultName = "berth-agent"

// DefaultArgs are the arguments the service runs the executable with when
// Config.Args is nil.
var DefaultArgs = []string{"agent", "run"}

// Service managers that Config.Manager may name.
const (
	Systemd = "linux-systemd"
	SysV    = "unix-systemv"
)

// Config describes the service.
type Config struct {
	// Name is the service's name (the systemd unit is Name.service);
	// DefaultName when empty. 1-64 of [A-Za-z0-9._-], starting with a
	// letter or digit.
	Name string
	// User makes it a user service (systemd --user), which runs as the
	// user who installs it, from login to logout (or always, with
	// lingering enabled). Otherwise it is a system service, which needs
	// root to install.
	User bool
	// Executable is the program the service runs; this program when
	// empty. It must be an absolute path.
	Executable string
	// Args are the program's arguments; DefaultArgs when nil. Service
	// files are parsed by shells and by systemd, so an argument may not
	// hold white space, quotes, backslashes, '$', '`', '%' or control
	// characters.
	Args []string
	// Env is set in the service's environment. Keys are environment
	// variable names; values follow the rules of Args.
	Env map[string]string
	// Manager forces a service manager (Systemd, SysV, or another name
	// kardianos/service registers). Empty picks the one running the
	// machine.
	Manager string
}

// Status is what the service manager says of the service.
type Status string

// The statuses.
const (
	StatusRunning      Status = "running"
	StatusStopped      Status = "stopped"
	StatusNotInstalled Status = "not installed"
	StatusUnknown      Status = "unknown"
)

// Service is the agent's service on this machine.
type Service struct {
	cfg     Config
	manager string
	svc     kservice.Service
}

// program satisfies kardianos/service's Interface. The agent is started by
// the service manager as a plain process, so nothing runs through it.
type program struct{}

func (program) Start(kservice.Service) error { return nil }
func (program) Stop(kservice.Service) error  { return nil }

// New checks cfg and returns its service. Nothing is changed on the
// machine until Install.
func New(cfg Config) (*Service, error) {
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if err := checkName(cfg.Name); err != nil {
		return nil, err
	}
	if cfg.Executable == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find this program: %w", err)
		}
		if resolved, err := filepath.EvalSymlinks(exe); err == nil {
			exe = resolved
		}
		cfg.Executable = exe
	}
	if !filepath.IsAbs(cfg.Executable) {
		return nil, fmt.Errorf("%w: executable %q is not an absolute path", ErrConfig, cfg.Executable)
	}
	if cfg.Args == nil {
		cfg.Args = DefaultArgs
	}
	for _, a := range cfg.Args {
		if err := checkArg(a); err != nil {
			return nil, err
		}
	}
	for k, v := range cfg.Env {
		if !envName(k) {
			return nil, fmt.Errorf("%w: environment variable name %q: use [A-Za-z_][A-Za-z0-9_]*", ErrConfig, k)
		}
		if err := checkArg(v); err != nil {
			return nil, fmt.Errorf("environment variable %s: %w", k, err)
		}
	}
	sys := kservice.ChosenSystem()
	if cfg.Manager != "" {
		sys = nil
		for _, s := range kservice.AvailableSystems() {
			if s.String() == cfg.Manager {
				sys = s
			}
		}
		if sys == nil {
			return nil, fmt.Errorf("%w: unknown service manager %q", ErrConfig, cfg.Manager)
		}
	}
	if sys == nil {
		return nil, ErrNoManager
	}
	if cfg.User && sys.String() != Systemd {
		return nil, fmt.Errorf("%w: this machine's service manager is %s; install a system service instead (as root, without --user)", ErrNoUserServices, sys.String())
	}
	kc := &kservice.Config{
		Name:        cfg.Name,
		DisplayName: "Berth agent",
		Description: "Berth agent: lends this machine's computers through a Berth relay",
		Executable:  cfg.Executable,
		Arguments:   append([]string(nil), cfg.Args...),
		EnvVars:     cfg.Env,
		Option: kservice.KeyValue{
			"UserService":   cfg.User,
			"SystemdScript": systemdUnit(cfg.User),
			"LogOutput":     false,
		},
	}
	svc, err := sys.New(program{}, kc)
	if err != nil {
		return nil, fmt.Errorf("service %s: %w", cfg.Name, err)
	}
	return &Service{cfg: cfg, manager: sys.String(), svc: svc}, nil
}

// Manager names the service manager that the service is installed with.
func (s *Service) Manager() string { return s.manager }

// Name is the service's name.
func (s *Service) Name() string { return s.cfg.Name }

// Command is the command line the service runs.
func (s *Service) Command() []string {
	return append([]string{s.cfg.Executable}, s.cfg.Args...)
}

// Path is the file that describes the service to its manager (the unit or
// init script), or "" for a manager whose files this package does not
// know.
func (s *Service) Path() string {
	switch s.manager {
	case Systemd:
		if !s.cfg.User {
			return "/etc/systemd/system/" + s.cfg.Name + ".service"
		}
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		return filepath.Join(home, ".config", "systemd", "user", s.cfg.Name+".service")
	case SysV:
		return "/etc/init.d/" + s.cfg.Name
	}
	return ""
}

// Install writes the service's file and enables it, so that it starts at
// boot (a user service: at login). It does not start it. When any step
// fails, what was written is removed again.
func (s *Service) Install() error {
	path := s.Path()
	if path != "" {
		if _, err := os.Stat(path); err == nil {
			return fmt.Errorf("%w: %s", ErrInstalled, path)
		}
	}
	if err := s.svc.Install(); err != nil {
		s.remove()
		return s.explain("install", err)
	}
	return nil
}

// Uninstall stops the service if it runs, disables it and removes its
// file.
func (s *Service) Uninstall() error {
	st, err := s.Status()
	if err == nil && st == StatusNotInstalled {
		return fmt.Errorf("%w: %s", ErrNotInstalled, s.cfg.Name)
	}
	if st == StatusRunning {
		if err := s.svc.Stop(); err != nil {
			return s.explain("stop", err)
		}
	}
	if err := s.svc.Uninstall(); err != nil && !errors.Is(err, os.ErrNotExist) {
		return s.explain("uninstall", err)
	}
	s.remove()
	return nil
}

// remove deletes what an install may have left: the service's file and,
// for SysV, the run-level links to it.
func (s *Service) remove() {
	path := s.Path()
	if path == "" {
		return
	}
	if s.manager == SysV {
		links, _ := filepath.Glob("/etc/rc[0-6S].d/[SK][0-9][0-9]" + s.cfg.Name)
		for _, l := range links {
			if target, err := os.Readlink(l); err == nil && target == path {
				os.Remove(l)
			}
		}
	}
	os.Remove(path)
}

// Start starts the installed service.
func (s *Service) Start() error {
	if err := s.installed(); err != nil {
		return err
	}
	return s.explain("start", s.svc.Start())
}

// Stop stops the service.
func (s *Service) Stop() error {
	if err := s.installed(); err != nil {
		return err
	}
	return s.explain("stop", s.svc.Stop())
}

// Status asks the service manager about the service.
func (s *Service) Status() (Status, error) {
	if path := s.Path(); path != "" {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			return StatusNotInstalled, nil
		}
	}
	if s.manager == SysV {
		return s.sysvStatus()
	}
	st, err := s.svc.Status()
	switch {
	case errors.Is(err, kservice.ErrNotInstalled):
		return StatusNotInstalled, nil
	case err != nil:
		return StatusUnknown, s.explain("status", err)
	case st == kservice.StatusRunning:
		return StatusRunning, nil
	case st == kservice.StatusStopped:
		return StatusStopped, nil
	}
	return StatusUnknown, nil
}

// sysvStatus asks the init script, whose status answer ("Running" or
// "Stopped") exits 1 when stopped.
func (s *Service) sysvStatus() (Status, error) {
	out, err := exec.Command(s.Path(), "status").Output()
	switch strings.TrimSpace(string(out)) {
	case "Running":
		return StatusRunning, nil
	case "Stopped":
		return StatusStopped, nil
	}
	if err == nil {
		err = fmt.Errorf("unexpected answer %q", out)
	}
	return StatusUnknown, s.explain("status", err)
}

func (s *Service) installed() error {
	st, err := s.Status()
	if err == nil && st == StatusNotInstalled {
		return fmt.Errorf("%w: %s (run: berth agent service install)", ErrNotInstalled, s.cfg.Name)
	}
	return nil
}

// explain wraps err from the service manager with what was being done and,
// for a permission error, what to do about it.
func (s *Service) explain(action string, err error) error {
	if err == nil {
		return nil
	}
	kind := "system"
	if s.cfg.User {
		kind = "user"
	}
	err = fmt.Errorf("%s %s service %s (%s): %w", action, kind, s.cfg.Name, s.manager, err)
	if errors.Is(err, os.ErrPermission) && !s.cfg.User {
		err = fmt.Errorf("%w; a system service needs root (or install a user service with --user)", err)
	}
	return err
}

func checkName(name string) error {
	if len(name) > 64 {
		return fmt.Errorf("%w: name %q is longer than 64 characters", ErrConfig, name)
	}
	for i, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || i > 0 && strings.ContainsRune("._-", r)
		if !ok {
			return fmt.Errorf("%w: name %q: use 1-64 of [A-Za-z0-9._-], starting with a letter or digit", ErrConfig, name)
		}
	}
	return nil
}

func envName(k string) bool {
	for i, r := range k {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return k != ""
}

func checkArg(a string) error {
	if a == "" {
		return fmt.Errorf("%w: an argument is empty", ErrConfig)
	}
	for _, r := range a {
		if r <= ' ' || r == 0x7f || strings.ContainsRune("\"'\\$`%", r) {
			return fmt.Errorf("%w: argument %q holds %q; service files cannot carry white space, quotes, backslashes, '$', '`', '%%' or control characters", ErrConfig, a, r)
		}
	}
	return nil
}

// systemdUnit is the unit template: the agent restarts after any exit, 10 s
// later, with no start limit (it reconnects to the relay by itself, so an
// exit is rare and retrying is right), and a system service waits for the
// network and Docker.
func systemdUnit(user bool) string {
	after, wanted := "After=network-online.target docker.service\nWants=network-online.target\n", "multi-user.target"
	if user {
		after, wanted = "", "default.target"
	}
	return `[Unit]
Description={{Description}}
Documentation=https://github.com/berthdev/berth/blob/main/docs/lending.md
ConditionFileIsExecutable={{Path | cmdEscape}}
` + after + `StartLimitIntervalSec=0

[Service]
ExecStart={{Path | cmdEscape}}{{range Arguments}} {{. | cmd}}{{end}}
Restart=always
RestartSec=10
TimeoutStopSec=30
{{range EnvVars}}{{.}}
{{end}}
[Install]
WantedBy=` + wanted + `
`
}
