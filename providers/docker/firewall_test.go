package docker

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"
)

// firewallChildEnv marks the copy of this test that runs inside its own
// network namespace, with its own iptables tables.
const firewallChildEnv = "BERTH_FIREWALL_TEST_NETNS"

// A supervisor killed with SIGKILL leaves its egress opening behind; the
// next one removes every opening whose port nothing listens on, and keeps
// the others and the drop rule. It runs in a network namespace of its own,
// so the host's firewall is never touched.
func TestRemoveStaleOpenings(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if os.Getenv(firewallChildEnv) != "" {
		staleOpeningsInNetns(ctx, t)
		return
	}
	const fix = `sudo env "PATH=$PATH" go test -count=1 -run TestRemoveStaleOpenings ./providers/docker/`
	for _, tool := range []string{"ip", "iptables", "ip6tables"} {
		if _, err := exec.LookPath(tool); err != nil {
			testkit.Missing(t, testkit.NetnsEnv, tool+" is missing", "apt-get install -y iproute2 iptables, then "+fix)
		}
	}
	if os.Geteuid() != 0 {
		testkit.Missing(t, testkit.NetnsEnv, "a network namespace and its firewall need root", fix)
	}
	ns := fmt.Sprintf("berth-fw-%d", os.Getpid())
	if out, err := exec.CommandContext(ctx, "ip", "netns", "add", ns).CombinedOutput(); err != nil {
		testkit.Missing(t, testkit.NetnsEnv, fmt.Sprintf("ip netns add: %v: %s", err, out), fix)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "delete", ns).Run() })
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", ns, os.Args[0], "-test.run=^TestRemoveStaleOpenings$", "-test.v")
	cmd.Env = append(os.Environ(), firewallChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("in network namespace %s:\n%s", ns, out)
	if err != nil || !strings.Contains(string(out), "--- PASS: TestRemoveStaleOpenings") {
		t.Fatalf("the test in the namespace did not pass: %v", err)
	}
}

func staleOpeningsInNetns(ctx context.Context, t *testing.T) {
	if out, err := exec.CommandContext(ctx, "ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("ip link set lo up: %v: %s", err, out)
	}
	port := func(ln net.Listener) int { return ln.Addr().(*net.TCPAddr).Port }
	live, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	live6, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	defer live6.Close()
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stale := port(gone)
	gone.Close()
	for _, p := range []int{port(live), port(live6), stale} {
		if err := GuardHost(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	rules := func() string {
		out, err := exec.CommandContext(ctx, "iptables", "-w", "5", "-S", "INPUT").CombinedOutput()
		if err != nil {
			t.Fatalf("iptables -S INPUT: %v: %s", err, out)
		}
		return string(out)
	}
	opened := func(r string, p int) bool {
		return strings.Contains(r, "--dport "+strconv.Itoa(p)+" ") && strings.Contains(r, allowComment)
	}
	if r := rules(); !opened(r, stale) || !opened(r, port(live)) {
		t.Fatalf("GuardHost did not open the ports:\n%s", r)
	}

	closed, err := RemoveStaleOpenings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(closed, []int{stale}) {
		t.Errorf("closed %v, want [%d]", closed, stale)
	}
	r := rules()
	t.Logf("after:\n%s", r)
	if opened(r, stale) {
		t.Errorf("the stale opening for port %d is still there", stale)
	}
	for _, p := range []int{port(live), port(live6)} {
		if !opened(r, p) {
			t.Errorf("the opening for port %d, which is listened on, was removed", p)
		}
	}
	if !strings.Contains(r, "computers may not reach the host") {
		t.Error("the drop rule was removed")
	}
	// IPv6 is closed too.
	if out, err := exec.CommandContext(ctx, "ip6tables", "-w", "5", "-S", "INPUT").CombinedOutput(); err != nil ||
		!strings.Contains(string(out), "-i "+BridgePrefix+"+") || !strings.Contains(string(out), "computers may not reach the host") {
		t.Errorf("no IPv6 drop rule for computers: %v\n%s", err, out)
	}
	if closed, err := RemoveStaleOpenings(ctx); err != nil || len(closed) != 0 {
		t.Errorf("second pass closed %v, %v", closed, err)
	}
}
