package docker

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"
)

// OpenTURN adds the TURN openings that are missing, in front of the drop
// rule, and leaves an opening AllowTURN made as it is (no duplicate, no
// removal). It runs in a network namespace of its own, so the host's
// firewall is never touched.
func TestOpenTURN(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if os.Getenv(firewallChildEnv) != "" {
		openTURNInNetns(ctx, t)
		return
	}
	const fix = `sudo env "PATH=$PATH" go test -count=1 -run TestOpenTURN ./providers/docker/`
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			testkit.Missing(t, testkit.NetnsEnv, tool+" is missing", "apt-get install -y iproute2 iptables, then "+fix)
		}
	}
	if os.Geteuid() != 0 {
		testkit.Missing(t, testkit.NetnsEnv, "a network namespace and its firewall need root", fix)
	}
	ns := fmt.Sprintf("berth-turnfw-%d", os.Getpid())
	if out, err := exec.CommandContext(ctx, "ip", "netns", "add", ns).CombinedOutput(); err != nil {
		testkit.Missing(t, testkit.NetnsEnv, fmt.Sprintf("ip netns add: %v: %s", err, out), fix)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "delete", ns).Run() })
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", ns, os.Args[0], "-test.run=^TestOpenTURN$", "-test.v")
	cmd.Env = append(os.Environ(), firewallChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("in network namespace %s:\n%s", ns, out)
	if err != nil || !strings.Contains(string(out), "--- PASS: TestOpenTURN") {
		t.Fatalf("the test in the namespace did not pass: %v", err)
	}
}

func openTURNInNetns(ctx context.Context, t *testing.T) {
	rules := func() []string {
		out, err := exec.CommandContext(ctx, "iptables", "-w", "5", "-S", "INPUT").CombinedOutput()
		if err != nil {
			t.Fatalf("iptables -S INPUT: %v: %s", err, out)
		}
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	// openings returns the TURN openings for port and whether each of them
	// comes before the drop rule.
	openings := func(port int) (n int, inFront bool) {
		inFront = true
		drop := false
		for _, r := range rules() {
			if strings.Contains(r, "computers may not reach the host") {
				drop = true
			}
			if strings.Contains(r, turnComment) && strings.Contains(r, "--dport "+strconv.Itoa(port)+" ") {
				n++
				inFront = inFront && !drop
			}
		}
		return n, inFront
	}
	if err := GuardHost(ctx); err != nil {
		t.Fatal(err)
	}
	const supervisors, lenders = 3478, 34790
	if err := AllowTURN(ctx, supervisors); err != nil {
		t.Fatal(err)
	}
	before := rules()
	if err := OpenTURN(ctx, supervisors); err != nil {
		t.Fatal(err)
	}
	if after := rules(); strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Errorf("OpenTURN changed the supervisor's opening:\nbefore:\n%s\nafter:\n%s", strings.Join(before, "\n"), strings.Join(after, "\n"))
	}
	for range 2 {
		if err := OpenTURN(ctx, lenders); err != nil {
			t.Fatal(err)
		}
	}
	if n, front := openings(lenders); n != 2 || !front {
		t.Errorf("openings for %d: %d (in front of the drop rule: %v), want 2 (UDP and TCP) in front", lenders, n, front)
	}
	if err := UnguardTURN(ctx, lenders); err != nil {
		t.Fatal(err)
	}
	if n, _ := openings(lenders); n != 0 {
		t.Errorf("%d openings for %d left after UnguardTURN", n, lenders)
	}
	if n, front := openings(supervisors); n != 2 || !front {
		t.Errorf("the supervisor's openings: %d (in front: %v), want 2 in front", n, front)
	}
}
