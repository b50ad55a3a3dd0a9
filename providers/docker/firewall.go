package docker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/berthdev/berth/internal/hostnet"
	"github.com/berthdev/berth/providers"
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
	if err := guardIPv6(ctx, drop); err != nil {
		return err
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

const allowComment = "berth: egress proxy"

func allowRule(port int) []string {
	return []string{"INPUT", "-i", BridgePrefix + "+", "-p", "tcp", "--dport", strconv.Itoa(port),
		"-m", "conntrack", "--ctstate", "NEW", "-m", "comment", "--comment", allowComment, "-j", "ACCEPT"}
}

var allowPort = regexp.MustCompile(`--dport (\d+)\b`)

// RemoveStaleOpenings removes the rules that let computers reach a port
// (GuardHost's openings for an egress proxy) where nothing on this host
// listens any more: what a supervisor that was killed left behind. A port
// that something listens on is left open, since another supervisor on this
// host may own it. It returns the ports it closed.
func RemoveStaleOpenings(ctx context.Context) ([]int, error) {
	if _, err := exec.LookPath("iptables"); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoFirewall, err)
	}
	out, err := exec.CommandContext(ctx, "iptables", "-w", "5", "-S", "INPUT").Output()
	if err != nil {
		return nil, fmt.Errorf("%w: iptables -S INPUT: %v", ErrNoFirewall, err)
	}
	var ports []int
	for line := range strings.SplitSeq(string(out), "\n") {
		if !strings.Contains(line, `"`+allowComment+`"`) || !strings.HasSuffix(line, "-j ACCEPT") {
			continue
		}
		m := allowPort.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if port, err := strconv.Atoi(m[1]); err == nil && !slices.Contains(ports, port) {
			ports = append(ports, port)
		}
	}
	listening, err := listeningPorts()
	if err != nil {
		return nil, err
	}
	var closed []int
	for _, port := range ports {
		if listening[port] {
			continue
		}
		if err := UnguardPort(ctx, port); err != nil {
			return closed, err
		}
		closed = append(closed, port)
	}
	return closed, nil
}

// listeningPorts returns the TCP ports that sockets listen on in this
// thread's network namespace.
func listeningPorts() (map[int]bool, error) {
	ports := map[int]bool{}
	for _, f := range []string{"tcp", "tcp6"} {
		fh, err := os.Open("/proc/thread-self/net/" + f)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("listening ports: %w", err)
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			// sl local_address rem_address st ...; LISTEN is state 0A.
			fields := strings.Fields(sc.Text())
			if len(fields) < 4 || fields[3] != "0A" {
				continue
			}
			_, hexPort, ok := strings.Cut(fields[1], ":")
			if !ok {
				continue
			}
			if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil {
				ports[int(p)] = true
			}
		}
		err = sc.Err()
		fh.Close()
		if err != nil {
			return nil, fmt.Errorf("listening ports: %w", err)
		}
	}
	return ports, nil
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

// guardIPv6 drops everything computers send to the host over IPv6. Their
// networks have no IPv6, but a bridge may still carry link-local
// addresses; with IPv6 on in the host, a host without ip6tables cannot be
// guarded.
func guardIPv6(ctx context.Context, drop []string) error {
	if _, err := exec.LookPath("ip6tables"); err != nil {
		if b, rerr := os.ReadFile("/proc/sys/net/ipv6/conf/all/disable_ipv6"); rerr == nil && strings.TrimSpace(string(b)) == "1" {
			return nil
		}
		if _, serr := os.Stat("/proc/net/if_inet6"); serr != nil {
			return nil // no IPv6 in this kernel
		}
		return fmt.Errorf("%w: IPv6 is on and ip6tables is missing: %v", ErrNoFirewall, err)
	}
	run := func(args ...string) error {
		out, err := exec.CommandContext(ctx, "ip6tables", append([]string{"-w", "5"}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip6tables %v: %v: %s", args, err, out)
		}
		return nil
	}
	if run(append([]string{"-C"}, drop...)...) != nil {
		if err := run(append([]string{"-I", "INPUT", "1"}, drop[1:]...)...); err != nil {
			return fmt.Errorf("%w: %v", ErrNoFirewall, err)
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

// AllowTURN lets computers reach the live-view TURN relay on the host's
// port, over UDP and TCP, in front of GuardHost's drop rule.
func AllowTURN(ctx context.Context, port int) error {
	if _, err := exec.LookPath("iptables"); err != nil {
		return fmt.Errorf("%w: %v", ErrNoFirewall, err)
	}
	if err := UnguardTURN(ctx, port); err != nil {
		return err
	}
	removeStaleTURN(ctx)
	for _, rule := range turnRules(port) {
		if err := iptables(ctx, append([]string{"-I", "INPUT", "1"}, rule[1:]...)...); err != nil {
			return fmt.Errorf("%w: %v", ErrNoFirewall, err)
		}
	}
	return nil
}

// OpenTURN makes sure computers may reach the TURN relay on the host's
// port, over UDP and TCP: it adds only the rules that are missing, so an
// opening the supervisor made on the same host stays as it is. A lending
// agent calls it when it starts a desktop computer; it leaves the opening
// in place when it stops, since the relay (the supervisor's, on this host
// in berth dev) may still serve other computers, and AllowTURN removes
// openings nothing listens on any more.
func OpenTURN(ctx context.Context, port int) error {
	if _, err := exec.LookPath("iptables"); err != nil {
		return fmt.Errorf("%w: %v", ErrNoFirewall, err)
	}
	for _, rule := range turnRules(port) {
		if iptables(ctx, append([]string{"-C"}, rule...)...) == nil {
			continue
		}
		if err := iptables(ctx, append([]string{"-I", "INPUT", "1"}, rule[1:]...)...); err != nil {
			return fmt.Errorf("%w: %v", ErrNoFirewall, err)
		}
	}
	return nil
}

// UnguardTURN removes the rules AllowTURN added.
func UnguardTURN(ctx context.Context, port int) error {
	for _, rule := range turnRules(port) {
		for range 16 {
			if iptables(ctx, append([]string{"-C"}, rule...)...) != nil {
				break
			}
			if err := iptables(ctx, append([]string{"-D"}, rule...)...); err != nil {
				return err
			}
		}
	}
	return nil
}

const turnComment = "berth: live-view TURN relay"

// removeStaleTURN closes TURN openings whose port nothing listens on any
// more (a supervisor that was killed); the TURN relay always listens on
// TCP as well as UDP on its port.
func removeStaleTURN(ctx context.Context) {
	out, err := exec.CommandContext(ctx, "iptables", "-w", "5", "-S", "INPUT").Output()
	if err != nil {
		return
	}
	listening, err := listeningPorts()
	if err != nil {
		return
	}
	for line := range strings.SplitSeq(string(out), "\n") {
		if !strings.Contains(line, `"`+turnComment+`"`) {
			continue
		}
		if m := allowPort.FindStringSubmatch(line); m != nil {
			if port, err := strconv.Atoi(m[1]); err == nil && !listening[port] {
				UnguardTURN(ctx, port)
			}
		}
	}
}

func turnRules(port int) [][]string {
	var rules [][]string
	for _, proto := range []string{"udp", "tcp"} {
		rules = append(rules, []string{"INPUT", "-i", BridgePrefix + "+", "-p", proto, "--dport", strconv.Itoa(port),
			"-m", "comment", "--comment", turnComment, "-j", "ACCEPT"})
	}
	return rules
}

// BridgeIPv4 returns the IPv4 address of the host's docker0 bridge: where
// computers reach a service on the host (the egress proxy, TURN), and
// what the host firewall's openings are for (hostnet.BridgeIPv4).
func BridgeIPv4() (netip.Addr, error) { return hostnet.BridgeIPv4() }

// The docker provider's computers run on this host: it is the supervisor's
// providers.HostGuard, with the rules above.

// GuardHost implements providers.HostGuard: GuardHost(ctx, egressPort).
// An egressPort of 0 (the proxy is off) opens nothing.
func (*Docker) GuardHost(ctx context.Context, egressPort int) error {
	if egressPort == 0 {
		return GuardHost(ctx)
	}
	return GuardHost(ctx, egressPort)
}

// RemoveStaleOpenings implements providers.HostGuard.
func (*Docker) RemoveStaleOpenings(ctx context.Context) ([]int, error) {
	return RemoveStaleOpenings(ctx)
}

// UnguardPort implements providers.HostGuard.
func (*Docker) UnguardPort(ctx context.Context, port int) error { return UnguardPort(ctx, port) }

// AllowTURN implements providers.HostGuard.
func (*Docker) AllowTURN(ctx context.Context, port int) error { return AllowTURN(ctx, port) }

// UnguardTURN implements providers.HostGuard.
func (*Docker) UnguardTURN(ctx context.Context, port int) error { return UnguardTURN(ctx, port) }

var _ providers.HostGuard = (*Docker)(nil)
