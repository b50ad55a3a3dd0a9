package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/agent/lender"
	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/hostnet"
	"github.com/berthdev/berth/internal/netnstest"
	"github.com/berthdev/berth/internal/syncbuf"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/lending"
	"github.com/berthdev/berth/providers/docker"
	"github.com/berthdev/berth/relay"
	"github.com/berthdev/berth/relay/relayserver"
)

// buildEgressImage builds a FROM-scratch image holding a static berth built
// from this tree at /usr/bin/berth, as the engine guard's egress proxy image
// needs, and removes it when the test ends.
func buildEgressImage(t *testing.T, ctx context.Context) string {
	t.Helper()
	dir := t.TempDir()
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(dir, "berth"), "../cmd/berth")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build a static berth: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM scratch\nCOPY berth /usr/bin/berth\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var b [4]byte
	rand.Read(b[:])
	tag := fmt.Sprintf("berth/egress-e2e:%x", b)
	if out, err := exec.CommandContext(ctx, "docker", "build", "-q", "-t", tag, dir).CombinedOutput(); err != nil {
		t.Fatalf("docker build %s: %v\n%s", tag, err, out)
	}
	t.Cleanup(func() { exec.Command("docker", "rmi", "-f", tag).Run() })
	return tag
}

// TestInternalNetworkReachesHost records why the engine guard keeps the
// host firewall on Linux: on this engine, a container on an internal
// network (one whose bridge is outside the firewall's berth+ rule) still
// connects to a service the host listens on, through its network's gateway
// and through docker0's address, while it has no route to anywhere else.
// Docker Desktop puts a Linux VM between such a container and the user's
// machine; on Linux nothing does.
func TestInternalNetworkReachesHost(t *testing.T) {
	requireDocker(t, "berth/test:latest")
	light(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	docker0, err := hostnet.BridgeIPv4()
	if err != nil {
		t.Fatalf("docker0: %v", err)
	}
	svc, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	go http.Serve(svc, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "host service") }))
	port := strconv.Itoa(svc.Addr().(*net.TCPAddr).Port)

	var b [4]byte
	rand.Read(b[:])
	name := fmt.Sprintf("berth-e2e-internal-%x", b)
	if out, err := exec.CommandContext(ctx, "docker", "network", "create", "--internal", "--label", "dev.berth.e2e=internal", name).CombinedOutput(); err != nil {
		t.Fatalf("docker network create: %v\n%s", err, out)
	}
	defer exec.Command("docker", "network", "rm", name).Run()
	out, err := exec.CommandContext(ctx, "docker", "network", "inspect", "-f", "{{(index .IPAM.Config 0).Gateway}}", name).Output()
	if err != nil {
		t.Fatalf("docker network inspect: %v", err)
	}
	gateway := strings.TrimSpace(string(out))
	probe := func(addr string) string {
		out, _ := exec.CommandContext(ctx, "docker", "run", "--rm", "--network", name, "--entrypoint", "/usr/local/bin/computerd", "berth/test:latest",
			"fetch", "-direct", "-timeout", "3s", "http://"+addr+"/").CombinedOutput()
		return string(out)
	}
	for _, addr := range []string{net.JoinHostPort(gateway, port), net.JoinHostPort(docker0.String(), port)} {
		if got := probe(addr); !strings.Contains(got, "host service") {
			t.Errorf("a container on an internal network did not reach the host at %s: %q; if the engine now stops this, docs/lending.md must say so", addr, got)
		} else {
			t.Logf("internal network -> host %s: reached (%s)", addr, strings.SplitN(got, "\n", 2)[0])
		}
	}
	if got := probe("44.128.0.1:80"); strings.Contains(got, "200") {
		t.Errorf("a container on an internal network reached a public-looking address: %q", got)
	}
}

// TestLendingEngineGuard runs the lending agent with --guard engine on the
// real engine and checks, from inside a real lent computer: the egress
// proxy is a container of its own, given its secret on standard input
// (nowhere in docker inspect), joined to the computer's internal network at
// a fixed address the computer knows as berth-egress; through it a server
// at a public-looking address (in a network namespace) answers; it refuses
// host.docker.internal, the host's addresses, the network gateways, the LAN
// and the metadata address; without it nothing answers (the host, the
// gateways, a public-looking address); turning egress off removes the
// container, turning it on again joins a new one at the same address; and
// the agent removes the container and its network when it stops.
func TestLendingEngineGuard(t *testing.T) {
	requireDocker(t, "berth/test:latest")
	light(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	netnstest.Require(t, `sudo env "PATH=$PATH" go test -count=1 -run TestLendingEngineGuard ./e2e/`)
	ns := netnstest.New(t, ctx, "eg")
	ns.CheckRoutes(t, ctx)
	image := buildEgressImage(t, ctx)
	docker0, err := hostnet.BridgeIPv4()
	if err != nil {
		t.Fatalf("docker0: %v", err)
	}

	hostSvc, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hostSvc.Close()
	go http.Serve(hostSvc, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "lender's own service") }))
	svcPort := strconv.Itoa(hostSvc.Addr().(*net.TCPAddr).Port)
	upstream := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Proxy-Authorization") != "" {
			t.Errorf("the proxy forwarded the computer's credentials upstream")
		}
		fmt.Fprintf(w, "hello from %s%s", r.Host, r.URL.Path)
	}))
	upstream.Listener.Close()
	upstream.Listener = ns.Listen(t, netip.AddrPortFrom(ns.Addr, 80).String())
	upstream.Start()
	defer upstream.Close()

	logs := syncbuf.Logged(t.Log)
	log := slog.New(slog.NewTextHandler(logs, nil))
	var b [3]byte
	rand.Read(b[:])
	agentID := fmt.Sprintf("cp_eguard_%x", b)
	proxyName := "berth-egress-" + agentID
	rs := relayserver.New(relayserver.Config{Logger: log, Authenticate: func(string) (string, bool) { return agentID, true }})
	mux := http.NewServeMux()
	mux.Handle(relay.ConnectPath, rs)
	rsrv := httptest.NewServer(mux)
	defer rsrv.Close()
	defer rs.Close()

	dir := t.TempDir()
	sock := filepath.Join(dir, control.SocketName)
	ready := make(chan *lender.Lender, 1)
	actx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- lender.RunAgent(actx, lender.AgentOptions{
			LenderID: agentID, Token: "agent-token", RelayURL: "ws" + strings.TrimPrefix(rsrv.URL, "http") + relay.ConnectPath,
			Guard: lender.GuardEngine, EgressImage: image,
			DataDir: dir, Socket: sock, Docker: docker.Options{HeadlessImage: "berth/test:latest", DesktopImage: "berth/test:latest"},
			Logger: log, Version: "e2e", Ready: func(l *lender.Lender) { ready <- l },
		})
	}()
	stopped := false
	stopAgent := func() {
		if stopped {
			return
		}
		stopped = true
		stop()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	}
	defer stopAgent()
	defer exec.Command("docker", "rm", "-f", proxyName).Run()
	defer exec.Command("docker", "network", "rm", proxyName).Run()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("agent ended: %v", err)
	}
	owner := control.NewClient(sock)
	defer owner.Close()
	if _, err := owner.UpdateSettings(ctx, control.SettingsUpdate{MemoryMB: ptrTo(int64(512))}); err != nil {
		t.Fatal(err)
	}
	testkit.EventuallyContext(t, ctx, "the agent online at the relay", func() bool {
		p, ok := rs.Presence(agentID)
		return ok && p.Online
	})
	st, err := owner.Status(ctx)
	want := net.JoinHostPort(docker.EgressHost, strconv.Itoa(lender.EgressProxyPort))
	if err != nil || !st.Egress.On || !st.Egress.Listening || st.Egress.Address != want {
		t.Fatalf("status: %+v %v; want the proxy container listening at %s", st.Egress, err, want)
	}
	// On Linux the host firewall is part of the engine guard.
	if rules, err := exec.Command("iptables", "-S", "INPUT").Output(); err != nil || !strings.Contains(string(rules), "berth: computers may not reach the host") {
		t.Fatalf("the engine guard on Linux did not set the host firewall: %v\n%s", err, rules)
	}
	// The secret is nowhere docker inspect shows.
	secret, _ := os.ReadFile(filepath.Join(dir, lender.EgressSecretFile))
	inspect, err := exec.Command("docker", "container", "inspect", proxyName).Output()
	if err != nil {
		t.Fatalf("docker inspect %s: %v", proxyName, err)
	}
	if len(bytes.TrimSpace(secret)) < 16 || bytes.Contains(inspect, bytes.TrimSpace(secret)) {
		t.Fatalf("the egress secret is in docker inspect %s (or too short: %d bytes)", proxyName, len(secret))
	}
	var pc []struct {
		Config     struct{ User string }
		State      struct{ Pid int }
		HostConfig struct {
			ReadonlyRootfs bool
			CapDrop        []string
		}
		NetworkSettings struct {
			Networks map[string]struct{ Gateway string }
		}
	}
	if err := json.Unmarshal(inspect, &pc); err != nil || len(pc) != 1 {
		t.Fatalf("docker inspect: %v", err)
	}
	if c := pc[0]; c.Config.User != "65534:65534" || !c.HostConfig.ReadonlyRootfs || len(c.HostConfig.CapDrop) != 1 || c.HostConfig.CapDrop[0] != "ALL" {
		t.Fatalf("the proxy container is not hardened: %+v %+v", c.Config, c.HostConfig)
	}
	// Joined to every computer network, it must not route between them.
	fwd, err := exec.Command("nsenter", "-t", strconv.Itoa(pc[0].State.Pid), "-n", "cat", "/proc/sys/net/ipv4/ip_forward").Output()
	if err != nil || strings.TrimSpace(string(fwd)) != "0" {
		t.Fatalf("the proxy container forwards packets: ip_forward %q %v", fwd, err)
	}
	proxyGateway := pc[0].NetworkSettings.Networks[proxyName].Gateway
	if proxyGateway == "" {
		t.Fatalf("the proxy container has no gateway on its own network: %+v", pc[0].NetworkSettings)
	}

	hc := &http.Client{Transport: rs.Transport(agentID)}
	start := func() (string, *computerd.Client) {
		t.Helper()
		var id [6]byte
		rand.Read(id[:])
		cid := fmt.Sprintf("eg%x", id)
		tok := "tok-" + cid
		body, _ := json.Marshal(lending.CreateRequest{ComputerID: cid, SessionID: "s_" + cid, AttemptID: "a_" + cid,
			Deployment: "dep-e2e", Agent: "lend-engine", Image: "headless", TokenHash: token.Hash(tok), LeaseSeconds: 600})
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://lender"+lending.PathComputers, bytes.NewReader(body))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			raw, _ := io.ReadAll(resp.Body)
			t.Fatalf("create: %s %s", resp.Status, raw)
		}
		t.Cleanup(func() { removeDeployment("deployment=" + lender.Deployment(agentID)) })
		cl := computerd.NewClient("http://lender"+lending.EndpointPath(cid), tok, computerd.WithTransport(rs.Transport(agentID)))
		testkit.EventuallyContext(t, ctx, "computerd to answer through the relay", func() bool { _, err := cl.Health(ctx); return err == nil })
		return cid, cl
	}
	run := func(cl *computerd.Client, cmd string) computerd.ExecResult {
		t.Helper()
		x, err := cl.Exec(ctx, computerd.ExecRequest{Command: cmd, TimeoutMs: 30000})
		if err != nil {
			t.Fatalf("exec %q: %v", cmd, err)
		}
		return x
	}

	cid, cl := start()
	x := run(cl, "env; echo ---; cat /etc/hosts")
	env, hosts, _ := strings.Cut(x.Stdout, "---")
	u, err := url.Parse(envValue(env, "HTTP_PROXY"))
	if err != nil || u.Host != want || u.User.Username() != cid {
		t.Fatalf("HTTP_PROXY=%q: want the proxy container %s as %s", envValue(env, "HTTP_PROXY"), want, cid)
	}
	// The computer's network: internal, its gateway, and the proxy's fixed
	// address, which /etc/hosts names.
	out, err := exec.Command("docker", "network", "inspect", "-f", "{{.Internal}} {{(index .IPAM.Config 0).Subnet}}", docker.NetworkPrefix+cid).Output()
	f := strings.Fields(string(out))
	if err != nil || len(f) != 2 || f[0] != "true" {
		t.Fatalf("the computer's network: %q %v; want internal", out, err)
	}
	subnet := netip.MustParsePrefix(f[1])
	proxyAddr := docker.EgressAddr(subnet)
	gateway := subnet.Masked().Addr().Next().String() // the engine gives the bridge the first address
	if !strings.Contains(hosts, proxyAddr.String()+"\t"+docker.EgressHost) {
		t.Fatalf("/etc/hosts does not name the proxy at %s:\n%s", proxyAddr, hosts)
	}
	t.Logf("computer %s: network %s gateway %s, proxy %s; docker0 %s; proxy's own gateway %s", cid, f[1], gateway, proxyAddr, docker0, proxyGateway)

	// (b) Through the proxy container, a public-looking server answers.
	for _, target := range []string{"http://" + ns.Addr.String() + "/engine-guard"} {
		x := run(cl, "computerd fetch "+target)
		if x.ExitCode != 0 || !strings.Contains(x.Stdout, "hello from "+ns.Addr.String()+"/engine-guard") {
			t.Fatalf("%s through the proxy container: %+v", target, x)
		}
	}
	// (c) What the proxy refuses.
	refused := []string{
		"http://host.docker.internal:" + svcPort + "/",
		"http://gateway.docker.internal/",
		"http://" + net.JoinHostPort(docker0.String(), svcPort) + "/",
		"http://" + net.JoinHostPort(gateway, svcPort) + "/",
		"http://" + net.JoinHostPort(proxyGateway, svcPort) + "/",
		"http://" + net.JoinHostPort(ns.Local.String(), svcPort) + "/",
		"http://192.168.65.254/",
		"http://192.168.1.20/",
		"http://169.254.169.254/latest/meta-data/",
	}
	for _, target := range refused {
		x := run(cl, "computerd fetch -timeout 5s "+target)
		if x.ExitCode != 1 || !strings.Contains(x.Stdout, "403") || !strings.Contains(x.Stdout, "blocked-address") {
			t.Errorf("%s: want a 403 blocked-address refusal from the proxy, got %+v", target, x)
		}
	}
	// (a), (d) No way around it: the host, the gateways, the server.
	for _, target := range []string{
		net.JoinHostPort(docker0.String(), svcPort), net.JoinHostPort(gateway, svcPort),
		net.JoinHostPort(proxyGateway, svcPort), ns.Addr.String() + ":80",
	} {
		x := run(cl, "computerd fetch -direct -timeout 3s http://"+target+"/")
		if x.ExitCode == 0 || strings.Contains(x.Stdout, "hello from") || strings.Contains(x.Stdout, "own service") {
			t.Errorf("direct %s: %+v", target, x)
		}
	}
	// Another computer's credentials do not pass.
	x = run(cl, `HTTP_PROXY=$(echo $HTTP_PROXY | sed 's#//[^:]*:#//someone-else:#') computerd fetch http://`+ns.Addr.String()+`/`)
	if x.ExitCode != 1 || !strings.Contains(x.Stdout, "407") {
		t.Errorf("credentials for another computer: %+v", x)
	}

	// Egress off: the container is gone and nothing gets out.
	if s, err := owner.UpdateSettings(ctx, control.SettingsUpdate{Egress: ptrTo(false)}); err != nil || s.Egress {
		t.Fatalf("egress off: %+v %v", s, err)
	}
	if err := exec.Command("docker", "container", "inspect", proxyName).Run(); err == nil {
		t.Fatal("egress off, the proxy container is still there")
	}
	if x := run(cl, "computerd fetch -timeout 5s http://"+ns.Addr.String()+"/"); x.ExitCode == 0 {
		t.Fatalf("egress off, the computer still gets out: %+v", x)
	}
	// On again: a new container joins the running computer's network at
	// the same address.
	if s, err := owner.UpdateSettings(ctx, control.SettingsUpdate{Egress: ptrTo(true)}); err != nil || !s.Egress {
		t.Fatalf("egress on: %+v %v", s, err)
	}
	if x := run(cl, "computerd fetch http://"+ns.Addr.String()+"/again"); x.ExitCode != 0 || !strings.Contains(x.Stdout, "hello from") {
		t.Fatalf("egress on again, through the new proxy container: %+v", x)
	}
	if strings.Contains(logs.String(), strings.TrimSpace(string(secret))) {
		t.Fatal("the egress secret reached the log")
	}

	// The agent removes the proxy container and its network when it stops.
	stopAgent()
	for _, args := range [][]string{{"container", "inspect", proxyName}, {"network", "inspect", proxyName}} {
		if err := exec.Command("docker", args...).Run(); err == nil {
			t.Errorf("after the agent stopped, docker %s still finds it", strings.Join(args, " "))
		}
	}
}
