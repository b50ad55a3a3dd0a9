//go:build linux

// Package netnstest makes network namespaces for tests that need a real
// network beyond loopback: a namespace joined to this one by a veth pair,
// with a public-looking address inside and a link-local one on this side,
// checked to route only over that pair, so that nothing a test sends can
// leave the machine.
package netnstest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Require skips the test unless this process can make network namespaces
// (root, or CAP_SYS_ADMIN and CAP_NET_ADMIN, and the ip command). With
// BERTH_REQUIRE_NETNS=1, as in CI, it fails instead. run is the command
// that runs the test with what it needs.
func Require(t testing.TB, run string) {
	t.Helper()
	var why, fix string
	if _, err := exec.LookPath("ip"); err != nil {
		why, fix = "the ip command is missing", "apt-get install -y iproute2, then "+run
	} else if !hasCaps(unix.CAP_SYS_ADMIN, unix.CAP_NET_ADMIN) {
		why, fix = "making a network namespace needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN)", run
	} else {
		return
	}
	if os.Getenv("BERTH_REQUIRE_NETNS") == "1" {
		t.Fatalf("%s, and BERTH_REQUIRE_NETNS=1; run: %s", why, fix)
	}
	t.Skipf("%s; to run this test: %s (BERTH_REQUIRE_NETNS=1 turns this skip into a failure)", why, fix)
}

// hasCaps reports whether this process has all of caps in its effective
// set.
func hasCaps(caps ...int) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		hexCaps, ok := strings.CutPrefix(line, "CapEff:")
		if !ok {
			continue
		}
		eff, err := strconv.ParseUint(strings.TrimSpace(hexCaps), 16, 64)
		if err != nil {
			return false
		}
		for _, c := range caps {
			if eff&(1<<c) == 0 {
				return false
			}
		}
		return true
	}
	return false
}

// NS is a network namespace joined to this one by a veth pair: Addr,
// inside it, and Local, on this side, reach each other over the pair and
// nothing else.
type NS struct {
	Name        string     // berth-<prefix>-<random>
	HostDev     string     // the veth end on this side
	NsDev       string     // the veth end inside
	Addr, Local netip.Addr // /32s on NsDev and HostDev
}

// New makes a namespace and a veth pair with fresh names made from prefix
// (two or three letters, so that interface names stay short). The
// namespace's address is a random one in 44.128.0.0/16, public unicast
// (AMPRNet's test network) and outside every range the egress proxy
// blocks; this side's is a random link-local one in
// 169.254.200.0-169.254.249.255, clear of the addresses clouds serve
// metadata on. Everything it made is deleted, by name, when the test ends,
// whether it passed or not. Call Require first.
func New(t testing.TB, ctx context.Context, prefix string) *NS {
	t.Helper()
	var b [7]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	id := hex.EncodeToString(b[:3])
	n := &NS{
		Name:    "berth-" + prefix + "-" + id,
		HostDev: "b" + prefix + id + "h",
		NsDev:   "b" + prefix + id + "n",
		Addr:    netip.AddrFrom4([4]byte{44, 128, 1 + b[3]%254, 1 + b[4]%254}),
		Local:   netip.AddrFrom4([4]byte{169, 254, 200 + b[5]%50, 1 + b[6]%254}),
	}
	IP(t, ctx, "netns", "add", n.Name)
	t.Cleanup(func() { IPCleanup(t, "netns", "delete", n.Name) })
	IP(t, ctx, "link", "add", n.HostDev, "type", "veth", "peer", "name", n.NsDev, "netns", n.Name)
	// Deleting the namespace deletes the pair too; this covers a failure
	// in between.
	t.Cleanup(func() {
		if _, err := net.InterfaceByName(n.HostDev); err == nil {
			IPCleanup(t, "link", "delete", n.HostDev)
		}
	})
	IP(t, ctx, "addr", "add", n.Local.String()+"/32", "dev", n.HostDev)
	IP(t, ctx, "link", "set", n.HostDev, "up")
	IP(t, ctx, "-n", n.Name, "link", "set", "lo", "up")
	IP(t, ctx, "-n", n.Name, "addr", "add", n.Addr.String()+"/32", "dev", n.NsDev)
	IP(t, ctx, "-n", n.Name, "link", "set", n.NsDev, "up")
	IP(t, ctx, "route", "add", n.Addr.String()+"/32", "dev", n.HostDev, "src", n.Local.String())
	IP(t, ctx, "-n", n.Name, "route", "add", n.Local.String()+"/32", "dev", n.NsDev, "src", n.Addr.String())
	return n
}

// IP runs the ip command, failing the test if it fails.
func IP(t testing.TB, ctx context.Context, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// IPCleanup runs the ip command on the way out, when the test's context
// may have ended.
func IPCleanup(t testing.TB, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
		t.Errorf("clean up: ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// CheckRoutes fails the test unless this machine sends packets for the
// namespace's address straight into the test's own veth, and the namespace
// sends its answers straight back, so that nothing the test sends can
// leave the machine.
func (n *NS) CheckRoutes(t testing.TB, ctx context.Context) {
	t.Helper()
	for _, c := range []struct {
		netns, dst, dev, src string
	}{
		{"", n.Addr.String(), n.HostDev, n.Local.String()},
		{n.Name, n.Local.String(), n.NsDev, n.Addr.String()},
	} {
		args := []string{"-o", "route", "get", c.dst}
		if c.netns != "" {
			args = append([]string{"-n", c.netns}, args...)
		}
		out := IP(t, ctx, args...)
		f := strings.Fields(out)
		dev := ""
		if i := slices.Index(f, "dev"); i >= 0 && i+1 < len(f) {
			dev = f[i+1]
		}
		src := ""
		if i := slices.Index(f, "src"); i >= 0 && i+1 < len(f) {
			src = f[i+1]
		}
		if len(f) == 0 || f[0] != c.dst || dev != c.dev || src != c.src || slices.Contains(f, "via") {
			t.Fatalf("STOP, packets could leave this machine: ip %s says\n%s\nwant %s dev %s src %s, with no gateway",
				strings.Join(args, " "), out, c.dst, c.dev, c.src)
		}
	}
}

// Listen opens a TCP listener on addr inside the namespace, closed when
// the test ends. The socket stays in the namespace whichever thread then
// serves it.
func (n *NS) Listen(t testing.TB, addr string) net.Listener {
	t.Helper()
	type result struct {
		ln  net.Listener
		err error
	}
	done := make(chan result, 1)
	go func() {
		// A thread that cannot be put back into this namespace stays
		// locked, and ends with this goroutine.
		runtime.LockOSThread()
		ln, err := n.listenLocked(addr)
		if !errors.Is(err, errStuckInNetns) {
			runtime.UnlockOSThread()
		}
		done <- result{ln, err}
	}()
	r := <-done
	if r.err != nil {
		t.Fatalf("listen on %s in %s: %v", addr, n.Name, r.err)
	}
	t.Cleanup(func() { r.ln.Close() })
	return r.ln
}

var errStuckInNetns = errors.New("thread left in the test namespace")

// listenLocked does the work of Listen on a locked thread.
func (n *NS) listenLocked(addr string) (net.Listener, error) {
	orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		return nil, err
	}
	defer orig.Close()
	target, err := os.Open("/var/run/netns/" + n.Name)
	if err != nil {
		return nil, err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return nil, fmt.Errorf("enter: %w", err)
	}
	ln, lerr := net.Listen("tcp", addr)
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		if ln != nil {
			ln.Close()
		}
		return nil, fmt.Errorf("%w: %v", errStuckInNetns, err)
	}
	return ln, lerr
}
