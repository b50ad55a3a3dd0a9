package docker

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
)

// An internal Docker network drops what a computer sends on to other
// networks, but not what it sends to the host itself: through its gateway a
// computer could reach every service the host listens on. GuardHost closes
// that path with iptables rules on the computer networks' host interfaces
// (BridgePrefix+): new connections from a computer to the host are dropped,
// except to the ports it allows (the egress proxy). Connections the host
// opens to a computer, and their replies, are untouched.

// ErrNoFirewall is returned when iptables cannot be run (not installed, or
// not root).
var ErrNoFirewall = errors.New("iptables unavailable")

// GuardHost installs the rules; it is idempotent. The allowed ports are
// (re)inserted in front of the drop rule.
func GuardHost(ctx context.Context, allowTCP ...int) error {
	if _, err := exec.LookPath("iptables"); err != nil {
		return fmt.Errorf("%w: %v", ErrNoFirewall, err)
	}
	drop := []string{"INPUT", "-i", BridgePrefix + "+", "-m", "conntrack", "--ctstate", "NEW",
		"-m", "comment", "--comment", "berth: computers may not reach the host", "-j", "DROP"}
	if iptables(ctx, append([]string{"-C"}, drop...)...) != nil {
		if err := iptables(ctx, append([]string{"-I", "INPUT", "1"}, drop[1:]...)...); err != nil {
			return fmt.Errorf("%w: %v", ErrNoFirewall, err)
		}
	}
	for _, port := range allowTCP {
		if err := UnguardPort(ctx, port); err != nil {
			return err
		}
		if err := iptables(ctx, append([]string{"-I", "INPUT", "1"}, allowRule(port)[1:]...)...); err != nil {
			return fmt.Errorf("%w: %v", ErrNoFirewall, err)
		}
	}
	return nil
}

func allowRule(port int) []string {
	return []string{"INPUT", "-i", BridgePrefix + "+", "-p", "tcp", "--dport", strconv.Itoa(port),
		"-m", "conntrack", "--ctstate", "NEW", "-m", "comment", "--comment", "berth: egress proxy", "-j", "ACCEPT"}
}

// UnguardPort removes the rules that let computers reach port.
func UnguardPort(ctx context.Context, port int) error {
	for range 16 {
		if iptables(ctx, append([]string{"-C"}, allowRule(port)...)...) != nil {
			return nil
		}
		if err := iptables(ctx, append([]string{"-D"}, allowRule(port)...)...); err != nil {
			return err
		}
	}
	return nil
}

func iptables(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "iptables", append([]string{"-w", "5"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("iptables %v: %v: %s", args, err, out)
	}
	return nil
}
