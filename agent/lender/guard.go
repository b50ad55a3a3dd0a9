package lender

import "fmt"

// How the agent keeps lent computers away from this machine
// (AgentOptions.Guard, berth agent run --guard).
const (
	// GuardAuto is GuardHost on Linux and GuardEngine elsewhere (Docker
	// Desktop on macOS and Windows).
	GuardAuto = "auto"
	// GuardHost is the host firewall: iptables rules that drop what
	// computers send to this machine (docker.GuardHost), with the egress
	// proxy listening on the docker0 address. Linux only.
	GuardHost = "host"
	// GuardEngine is the engine-side guard: computers' networks are
	// internal (no route out at all) and the egress proxy runs as a
	// container joined to each of them, the only way out. On Docker
	// Desktop the engine's Linux VM stands between computers and this
	// machine; on Linux an internal network still reaches the host through
	// its gateway, so the host firewall is added there too.
	GuardEngine = "engine"
)

// Guard is the guard a mode stands for on an operating system (runtime.GOOS):
// it resolves GuardAuto, checks the name, and reports whether the host
// firewall (iptables) is part of it.
type Guard struct {
	Mode     string // GuardHost or GuardEngine
	Firewall bool   // the host firewall is required (Linux)
}

// ResolveGuard returns the guard for mode ("" is GuardAuto) on goos.
func ResolveGuard(mode, goos string) (Guard, error) {
	switch mode {
	case "", GuardAuto:
		if goos == "linux" {
			return Guard{Mode: GuardHost, Firewall: true}, nil
		}
		return Guard{Mode: GuardEngine}, nil
	case GuardHost:
		if goos != "linux" {
			return Guard{}, fmt.Errorf("guard %q needs iptables on Linux; on %s use --guard engine (or auto)", mode, goos)
		}
		return Guard{Mode: GuardHost, Firewall: true}, nil
	case GuardEngine:
		return Guard{Mode: GuardEngine, Firewall: goos == "linux"}, nil
	}
	return Guard{}, fmt.Errorf("guard %q: want %s, %s or %s", mode, GuardAuto, GuardHost, GuardEngine)
}
