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
	"github.com/berthdev/berth/internal/netnstest"
	"github.com/berthdev/berth/internal/syncbuf"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/lending"
	"github.com/berthdev/berth/providers/docker"
	"github.com/berthdev/berth/relay"
	"github.com/berthdev/berth/relay/relayserver"
)

// lendResolver is the agent's resolver in the test: names for the
// namespace's server and for a LAN address.
type lendResolver map[string][]netip.Addr

func (z lendResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if a, ok := z[strings.TrimSuffix(host, ".")]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// TestLendingEgress checks, from inside real lent computers, that the
// lending agent's own egress proxy is their only way out: through it a
// server at a public-looking address (in a network namespace the test
// makes) answers, while the lender's own addresses (a public-looking one
// included), its loopback, the metadata address, a LAN address and the
// Docker gateway are refused with 403; a direct connection fails; the
// proxy the supervisor named is replaced by the agent's; a CONNECT tunnel
// reaches the namespace's TLS port; and with the
// owner's egress setting off a new computer has no proxy at all and the
// proxy lets nobody through.
func TestLendingEgress(t *testing.T) {
	requireDocker(t, "berth/test:latest")
	light(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	netnstest.Require(t, `sudo env "PATH=$PATH" go test -count=1 -run TestLendingEgress ./e2e/`)
	ns := netnstest.New(t, ctx, "le")
	ns.CheckRoutes(t, ctx)

	// A public-looking address of the lender's own, on the test's veth,
	// with a service on every interface: no default range blocks it, the
	// agent must know it as its own.
	var b [2]byte
	rand.Read(b[:])
	own := netip.AddrFrom4([4]byte{44, 129, 1 + b[0]%254, 1 + b[1]%254})
	netnstest.IP(t, ctx, "addr", "add", own.String()+"/32", "dev", ns.HostDev)
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
	secure := httptest.NewUnstartedServer(http.NotFoundHandler())
	secure.Listener.Close()
	secure.Listener = ns.Listen(t, netip.AddrPortFrom(ns.Addr, 443).String())
	secure.StartTLS()
	defer secure.Close()

	logs := syncbuf.Logged(t.Log)
	log := slog.New(slog.NewTextHandler(logs, nil))
	agentID := fmt.Sprintf("cp_egress_%x", b) // its own, so that another run's agent never takes its computers for leftovers
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
			DataDir: dir, Socket: sock, Docker: docker.Options{HeadlessImage: "berth/test:latest", DesktopImage: "berth/test:latest"},
			Egress: lender.EgressOptions{Listen: ":0", Resolver: lendResolver{
				"allowed.lend.test": {ns.Addr},
				"lan.lend.test":     {netip.MustParseAddr("192.168.1.20")},
			}},
			Logger: log, Version: "e2e", Ready: func(l *lender.Lender) { ready <- l },
		})
	}()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	}()
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
	if err != nil || !st.Egress.On || !st.Egress.Listening {
		t.Fatalf("status: %+v %v", st.Egress, err)
	}
	proxyHost, proxyPort, _ := net.SplitHostPort(st.Egress.Address)
	if fi, err := os.Stat(filepath.Join(dir, lender.EgressSecretFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("egress secret file: %v %v", fi, err)
	}
	secret, _ := os.ReadFile(filepath.Join(dir, lender.EgressSecretFile))
	if rules, err := exec.Command("iptables", "-S", "INPUT").Output(); err != nil || !strings.Contains(string(rules), "--dport "+proxyPort+" ") {
		t.Fatalf("the host firewall does not open the agent's proxy port %s to computers: %v\n%s", proxyPort, err, rules)
	}

	// The supervisor's side: creates and commands through the relay.
	hc := &http.Client{Transport: rs.Transport(agentID)}
	start := func(env map[string]string) (lending.Computer, *computerd.Client) {
		t.Helper()
		var id [6]byte
		rand.Read(id[:])
		cid := fmt.Sprintf("le%x", id)
		tok := "tok-" + cid
		body, _ := json.Marshal(lending.CreateRequest{ComputerID: cid, SessionID: "s_" + cid, AttemptID: "a_" + cid,
			Deployment: "dep-e2e", Agent: "lend-egress", Image: "headless", TokenHash: token.Hash(tok), LeaseSeconds: 600, Env: env})
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://lender"+lending.PathComputers, bytes.NewReader(body))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var c lending.Computer
		if resp.StatusCode != http.StatusCreated || json.NewDecoder(resp.Body).Decode(&c) != nil {
			raw, _ := io.ReadAll(resp.Body)
			t.Fatalf("create: %s %s", resp.Status, raw)
		}
		// The lender keeps its computers when it stops (a restart adopts
		// them): remove them, their networks and their volumes.
		t.Cleanup(func() { removeDeployment("deployment=" + lender.Deployment(agentID)) })
		cl := computerd.NewClient("http://lender"+lending.EndpointPath(cid), tok, computerd.WithTransport(rs.Transport(agentID)))
		testkit.EventuallyContext(t, ctx, "computerd to answer through the relay", func() bool { _, err := cl.Health(ctx); return err == nil })
		return c, cl
	}
	run := func(cl *computerd.Client, cmd string) computerd.ExecResult {
		t.Helper()
		x, err := cl.Exec(ctx, computerd.ExecRequest{Command: cmd, TimeoutMs: 30000})
		if err != nil {
			t.Fatalf("exec %q: %v", cmd, err)
		}
		return x
	}

	// The supervisor names its own proxy, which a lent computer cannot
	// reach; the agent puts its own in its place.
	supervisorProxy := "http://c:supervisor-password@10.213.0.1:3128"
	c1, cl := start(map[string]string{"HTTP_PROXY": supervisorProxy, "https_proxy": supervisorProxy, "LANG": "C.UTF-8"})
	x := run(cl, "env")
	if strings.Contains(x.Stdout, "supervisor-password") || !strings.Contains(x.Stdout, "LANG=C.UTF-8") || strings.Contains(x.Stdout, strings.TrimSpace(string(secret))) {
		t.Fatalf("environment: %q", x.Stdout)
	}
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
		v := envValue(x.Stdout, k)
		u, err := url.Parse(v)
		if err != nil || u.User.Username() != c1.ComputerID || u.Host != st.Egress.Address {
			t.Fatalf("%s=%q: want the agent's proxy %s as %s", k, v, st.Egress.Address, c1.ComputerID)
		}
	}

	// An allowed host, by name and by address.
	for _, target := range []string{"http://allowed.lend.test/hello", "http://" + ns.Addr.String() + "/direct-ip"} {
		x := run(cl, "computerd fetch "+target)
		if x.ExitCode != 0 || !strings.Contains(x.Stdout, "hello from") {
			t.Fatalf("%s through the agent's proxy: %+v", target, x)
		}
	}
	// A tunnel (CONNECT, as for https) to the namespace's TLS port.
	x = run(cl, `u=${HTTP_PROXY#http://}; cred=${u%@*}; hp=${u#*@}; `+
		`(printf 'CONNECT allowed.lend.test:443 HTTP/1.1\r\nHost: allowed.lend.test:443\r\nProxy-Authorization: Basic %s\r\n\r\n' "$(printf %s "$cred" | base64 | tr -d '\n')"; sleep 2) `+
		`| nc -w 5 ${hp%:*} ${hp#*:} | head -1`)
	if !strings.HasPrefix(x.Stdout, "HTTP/1.1 200") {
		t.Fatalf("CONNECT through the agent's proxy: %+v", x)
	}
	// What the lender's proxy refuses.
	gateway := computerGateway(t, run(cl, `awk '$2 == "00000000" {print $3}' /proc/net/route`).Stdout)
	refused := []string{
		"http://169.254.169.254/latest/meta-data/",
		"http://192.168.1.20/",
		"http://lan.lend.test/",
		"http://" + net.JoinHostPort(own.String(), svcPort) + "/",
		"http://" + net.JoinHostPort(proxyHost, svcPort) + "/",
		"http://" + net.JoinHostPort(gateway, svcPort) + "/",
		"http://127.1:" + svcPort + "/", // loopback; an HTTP client sends 127.0.0.1 itself straight, never through a proxy
		"http://" + net.JoinHostPort(ns.Local.String(), svcPort) + "/",
		"http://2130706433:" + svcPort + "/",
	}
	for _, target := range refused {
		x := run(cl, "computerd fetch -timeout 5s "+target)
		if x.ExitCode != 1 || !strings.Contains(x.Stdout, "403") || !strings.Contains(x.Stdout, "blocked-address") {
			t.Errorf("%s: want a 403 blocked-address refusal, got %+v", target, x)
		}
	}
	// No way around the proxy.
	for _, target := range []string{"http://" + ns.Addr.String() + "/", "http://" + net.JoinHostPort(gateway, svcPort) + "/",
		"http://" + net.JoinHostPort(own.String(), svcPort) + "/"} {
		x := run(cl, "computerd fetch -direct -timeout 3s "+target)
		if x.ExitCode == 0 || strings.Contains(x.Stdout, "hello from") || strings.Contains(x.Stdout, "own service") {
			t.Errorf("direct %s: %+v", target, x)
		}
	}
	// Another computer's credentials do not pass.
	x = run(cl, `HTTP_PROXY=$(echo $HTTP_PROXY | sed 's#//[^:]*:#//someone-else:#') computerd fetch http://allowed.lend.test/`)
	if x.ExitCode != 1 || !strings.Contains(x.Stdout, "407") {
		t.Errorf("credentials for another computer: %+v", x)
	}

	// Egress off: a new computer has no proxy, and the proxy lets nobody
	// through.
	if s, err := owner.UpdateSettings(ctx, control.SettingsUpdate{Egress: ptrTo(false)}); err != nil || s.Egress {
		t.Fatalf("egress off: %+v %v", s, err)
	}
	_, cl2 := start(map[string]string{"HTTP_PROXY": supervisorProxy})
	if x := run(cl2, "env | grep -i _proxy; true"); x.Stdout != "" {
		t.Fatalf("egress off, the environment names a proxy: %q", x.Stdout)
	}
	if x := run(cl2, "computerd fetch -direct -timeout 3s http://"+ns.Addr.String()+"/"); x.ExitCode == 0 {
		t.Fatalf("egress off, a direct connection worked: %+v", x)
	}
	if x := run(cl, "computerd fetch -timeout 5s http://allowed.lend.test/"); x.ExitCode == 0 || strings.Contains(x.Stdout, "hello from") {
		t.Fatalf("egress off, the proxy still lets a computer out: %+v", x)
	}
	if strings.Contains(logs.String(), strings.TrimSpace(string(secret))) {
		t.Fatal("the egress secret reached the log")
	}
	if st, err := owner.Status(ctx); err != nil || st.Egress.On || st.Egress.Allowed < 2 || st.Egress.Refused < uint64(len(refused)) {
		t.Fatalf("status after: %+v %v", st.Egress, err)
	}
}

func envValue(env, key string) string {
	for line := range strings.SplitSeq(env, "\n") {
		if v, ok := strings.CutPrefix(line, key+"="); ok {
			return v
		}
	}
	return ""
}

// computerGateway reads a default gateway from /proc/net/route's hex.
func computerGateway(t *testing.T, hexAddr string) string {
	t.Helper()
	var b [4]byte
	if _, err := fmt.Sscanf(strings.TrimSpace(hexAddr), "%02X%02X%02X%02X", &b[3], &b[2], &b[1], &b[0]); err != nil {
		t.Fatalf("gateway %q: %v", hexAddr, err)
	}
	return netip.AddrFrom4(b).String()
}
