//go:build linux

package egress

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// runNetnsTest is the command that runs the network namespace test with
// the privileges it needs.
const runNetnsTest = `sudo env "PATH=$PATH" go test -race -count=1 -run TestAllowedPathNetns ./supervisor/egress/`

// needNetns skips the test unless it can make network namespaces (root,
// or CAP_SYS_ADMIN and CAP_NET_ADMIN, and the ip command). With
// BERTH_REQUIRE_NETNS=1, as in CI, it fails instead.
func needNetns(t *testing.T) {
	t.Helper()
	var why, fix string
	if _, err := exec.LookPath("ip"); err != nil {
		why, fix = "the ip command is missing", "apt-get install -y iproute2, then "+runNetnsTest
	} else if !hasCaps(unix.CAP_SYS_ADMIN, unix.CAP_NET_ADMIN) {
		why, fix = "making a network namespace needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN)", runNetnsTest
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

// testNetns is a network namespace joined to this one by a veth pair:
// addr, inside it, and local, on this side, reach each other over the
// pair and nothing else.
type testNetns struct {
	name        string     // berth-eg-<random>
	hostDev     string     // the veth end on this side
	nsDev       string     // the veth end inside
	addr, local netip.Addr // /32s on nsDev and hostDev
}

// randomHex returns n random bytes in hex.
func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// newTestNetns makes a namespace and a veth pair with fresh names. The
// namespace's address is a random one in 44.128.0.0/16, public unicast
// (AMPRNet's test network) and outside every range the proxy blocks; this
// side's is a random link-local one in 169.254.200.0-169.254.249.255, clear
// of the addresses clouds serve metadata on. Everything it made is deleted,
// by name, when the test ends, whether it passed or not.
func newTestNetns(t *testing.T, ctx context.Context) *testNetns {
	t.Helper()
	needNetns(t)
	id := randomHex(t, 3)
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	n := &testNetns{
		name:    "berth-eg-" + id,
		hostDev: "beg" + id + "h",
		nsDev:   "beg" + id + "n",
		addr:    netip.AddrFrom4([4]byte{44, 128, 1 + b[0]%254, 1 + b[1]%254}),
		local:   netip.AddrFrom4([4]byte{169, 254, 200 + b[2]%50, 1 + b[3]%254}),
	}
	if newBlocklist(nil).blocked(n.addr) {
		t.Fatalf("%v is blocked by the proxy; pick another namespace address", n.addr)
	}

	ip(t, ctx, "netns", "add", n.name)
	t.Cleanup(func() { ipCleanup(t, "netns", "delete", n.name) })
	ip(t, ctx, "link", "add", n.hostDev, "type", "veth", "peer", "name", n.nsDev, "netns", n.name)
	// Deleting the namespace deletes the pair too; this covers a failure
	// in between.
	t.Cleanup(func() {
		if _, err := net.InterfaceByName(n.hostDev); err == nil {
			ipCleanup(t, "link", "delete", n.hostDev)
		}
	})
	ip(t, ctx, "addr", "add", n.local.String()+"/32", "dev", n.hostDev)
	ip(t, ctx, "link", "set", n.hostDev, "up")
	ip(t, ctx, "-n", n.name, "link", "set", "lo", "up")
	ip(t, ctx, "-n", n.name, "addr", "add", n.addr.String()+"/32", "dev", n.nsDev)
	ip(t, ctx, "-n", n.name, "link", "set", n.nsDev, "up")
	ip(t, ctx, "route", "add", n.addr.String()+"/32", "dev", n.hostDev, "src", n.local.String())
	ip(t, ctx, "-n", n.name, "route", "add", n.local.String()+"/32", "dev", n.nsDev, "src", n.addr.String())
	return n
}

// ip runs the ip command, failing the test if it fails.
func ip(t *testing.T, ctx context.Context, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// ipCleanup runs the ip command on the way out, when the test's context may
// have ended.
func ipCleanup(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
		t.Errorf("clean up: ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// checkRoutes fails the test unless this machine sends packets for the
// namespace's address straight into the test's own veth, and the namespace
// sends its answers straight back, so that nothing the test sends can
// leave the machine.
func (n *testNetns) checkRoutes(t *testing.T, ctx context.Context) {
	t.Helper()
	for _, c := range []struct {
		netns, dst, dev, src string
	}{
		{"", n.addr.String(), n.hostDev, n.local.String()},
		{n.name, n.local.String(), n.nsDev, n.addr.String()},
	} {
		args := []string{"-o", "route", "get", c.dst}
		if c.netns != "" {
			args = append([]string{"-n", c.netns}, args...)
		}
		out := ip(t, ctx, args...)
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

// listen opens a TCP listener on addr inside the namespace. The socket
// stays in the namespace whichever thread then serves it.
func (n *testNetns) listen(t *testing.T, addr string) net.Listener {
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
		t.Fatalf("listen on %s in %s: %v", addr, n.name, r.err)
	}
	t.Cleanup(func() { r.ln.Close() })
	return r.ln
}

var errStuckInNetns = errors.New("thread left in the test namespace")

// listenLocked does the work of listen on a locked thread.
func (n *testNetns) listenLocked(addr string) (net.Listener, error) {
	orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		return nil, err
	}
	defer orig.Close()
	target, err := os.Open("/var/run/netns/" + n.name)
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

// onlyDialer is a real *net.Dialer that only ever connects to one address;
// it records everything the proxy asks for and refuses, without a packet,
// anything else.
type onlyDialer struct {
	t     *testing.T
	allow netip.Addr
	d     net.Dialer
	mu    sync.Mutex
	asked []string
}

func (o *onlyDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	o.mu.Lock()
	o.asked = append(o.asked, address)
	o.mu.Unlock()
	a, err := netip.ParseAddrPort(address)
	if network != "tcp" || err != nil || a.Addr() != o.allow {
		o.t.Errorf("proxy dialled %s %s; only %v may be", network, address, o.allow)
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	return o.d.DialContext(ctx, network, address)
}

func (o *onlyDialer) dials() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.asked)
}

// The allowed path over a real network: an HTTP and a TLS server in a
// network namespace at a public-looking address, a name for it in a real
// DNS server, and the proxy with the system's dialer. Plain requests and
// CONNECT reach the servers; names for loopback and private addresses are
// refused.
func TestAllowedPathNetns(t *testing.T) {
	ctx := testContext(t)
	ns := newTestNetns(t, ctx)
	ns.checkRoutes(t, ctx)

	// The servers see connections from this side's veth address.
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tls := "plain"
		if r.TLS != nil {
			tls = "tls"
		}
		fmt.Fprintf(w, "%s %s%s from %s", tls, r.Host, r.URL.Path, r.RemoteAddr)
	})
	plain := httptest.NewUnstartedServer(handler)
	plain.Listener.Close()
	plain.Listener = ns.listen(t, netip.AddrPortFrom(ns.addr, 80).String())
	plain.Start()
	t.Cleanup(plain.Close)
	secure := httptest.NewUnstartedServer(handler)
	secure.Listener.Close()
	secure.Listener = ns.listen(t, netip.AddrPortFrom(ns.addr, 443).String())
	secure.StartTLS()
	t.Cleanup(secure.Close)

	zone := startZoneServer(t)
	zone.set("allowed.berth.test", []netip.Addr{ns.addr})
	zone.set("loopback.berth.test", []netip.Addr{netip.MustParseAddr("127.0.0.1")})
	zone.set("private.berth.test", []netip.Addr{netip.MustParseAddr("10.0.0.1")})
	dialer := &onlyDialer{t: t, allow: ns.addr}
	h := start(t, func(c *Config) {
		c.Resolver = zone.resolver()
		c.Dialer = dialer
	})

	tr := secure.Client().Transport.(*http.Transport).Clone()
	tr.TLSClientConfig.ServerName = "example.com" // the name in httptest's certificate
	client := h.client(tr)
	for _, c := range []struct{ url, want string }{
		{"http://allowed.berth.test/plain", "plain allowed.berth.test/plain from " + ns.local.String() + ":"},
		{"https://allowed.berth.test/secure", "tls allowed.berth.test/secure from " + ns.local.String() + ":"},
	} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", c.url, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(body), c.want) {
			t.Fatalf("GET %s: %s %s %q, %v; want %q", c.url, resp.Status, resp.Header.Get(HeaderRefused), body, err, c.want)
		}
	}
	client.CloseIdleConnections()

	for _, host := range []string{"loopback.berth.test", "private.berth.test"} {
		for _, req := range []string{
			"GET http://" + host + "/ HTTP/1.1\r\nHost: " + host + "\r\n",
			"CONNECT " + host + ":443 HTTP/1.1\r\nHost: " + host + ":443\r\n",
		} {
			resp, raw, _, _ := h.raw(req + h.auth() + "\r\n")
			if resp.StatusCode != http.StatusForbidden || resp.Header.Get(HeaderRefused) != string(VerdictBlockedAddress) {
				t.Errorf("%s: %s %s, want 403 %s", firstLine(req), resp.Status, resp.Header.Get(HeaderRefused), VerdictBlockedAddress)
			}
			if strings.Contains(raw, "127.0.0.1") || strings.Contains(raw, "10.0.0.1") {
				t.Errorf("%s: answer names the address:\n%s", firstLine(req), raw)
			}
		}
	}

	want := []string{
		netip.AddrPortFrom(ns.addr, 80).String(),
		netip.AddrPortFrom(ns.addr, 443).String(),
	}
	if d := dialer.dials(); !slices.Equal(d, want) {
		t.Errorf("dialled %v, want %v", d, want)
	}
}
