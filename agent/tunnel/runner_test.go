package tunnel

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/netnstest"
	"github.com/berthdev/berth/providers"
	ptunnel "github.com/berthdev/berth/providers/tunnel"
)

func noCloudflared(string) (string, error) { return "", exec.ErrNotFound }

// findSleeper lists the computer's processes that run `sleep 3600` (the
// test image has no pgrep); it fails when there are none.
const findSleeper = `for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep '^sleep 3600'`

// session is one session on the runner, as the supervisor makes it through
// the tunnel provider.
type session struct {
	m  providers.Machine
	cl *computerd.Client
}

func claim(t *testing.T, ctx context.Context, p *ptunnel.Tunnel, info Info, n int, env map[string]string) session {
	t.Helper()
	spec := providers.Spec{ComputerID: fmt.Sprintf("c-%d", n), SessionID: fmt.Sprintf("s-%d", n), AttemptID: fmt.Sprintf("a-%d", n),
		AgentID: "agent", Env: env, Credentials: map[string]string{"url": info.URL, "apiKey": info.Token}}
	m, err := p.Create(ctx, spec)
	if err != nil {
		t.Fatalf("claim for session %d: %v", n, err)
	}
	cl := computerd.NewClient(m.Endpoint, "the-supervisors-derived-token", computerd.WithTransport(p.Transport(m, spec.Credentials)))
	if err := cl.WaitHealthy(ctx); err != nil {
		t.Fatalf("session %d: computerd: %v", n, err)
	}
	return session{m: m, cl: cl}
}

func (s session) run(t *testing.T, ctx context.Context, cmd string) computerd.ExecResult {
	t.Helper()
	x, err := s.cl.Exec(ctx, computerd.ExecRequest{Command: cmd, TimeoutMs: 30000})
	if err != nil {
		t.Fatalf("exec %q: %v", cmd, err)
	}
	return x
}

// resolver answers the names of the test's servers.
type resolver map[string][]netip.Addr

func (z resolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if a, ok := z[strings.TrimSuffix(host, ".")]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// TestEgress checks from inside the runner's computer that the runner's
// own egress proxy is its way out: through it a server at a public-looking
// address (in a network namespace the test makes) answers, this host's own
// addresses and the metadata address are refused, a direct connection
// fails, and the proxy variables the supervisor named are replaced.
func TestEgress(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
	engine(t, ctx)
	netnstest.Require(t, `sudo env "PATH=$PATH" go test -count=1 -run TestEgress ./agent/tunnel/`)
	ns := netnstest.New(t, ctx, "tu")
	ns.CheckRoutes(t, ctx)

	upstream := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s%s", r.Host, r.URL.Path)
	}))
	upstream.Listener.Close()
	upstream.Listener = ns.Listen(t, netip.AddrPortFrom(ns.Addr, 80).String())
	upstream.Start()
	defer upstream.Close()
	hostSvc, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hostSvc.Close()
	go http.Serve(hostSvc, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "this host's own service") }))
	svcPort := strconv.Itoa(hostSvc.Addr().(*net.TCPAddr).Port)

	path := filepath.Join(t.TempDir(), "connection.json")
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := start(t, rctx, Options{Lifetime: time.Hour, ConnectionFile: path, LookPath: noCloudflared,
		Egress: EgressOptions{Resolver: resolver{"allowed.tunnel.test": {ns.Addr}}}})
	info := r.ready(t, ctx)
	if info.Egress == "" {
		t.Fatal("the runner has no egress proxy")
	}
	proxyHost, _, _ := net.SplitHostPort(info.Egress)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	p := ptunnel.New(ptunnel.Options{Transport: tr})
	supervisorProxy := "http://c:supervisor-password@10.213.0.1:3128"
	s := claim(t, ctx, p, info, 1, map[string]string{"HTTP_PROXY": supervisorProxy, "LANG": "C.UTF-8"})

	x := s.run(t, ctx, "env")
	if strings.Contains(x.Stdout, "supervisor-password") || !strings.Contains(x.Stdout, "LANG=C.UTF-8") {
		t.Fatalf("environment: %q", x.Stdout)
	}
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
		var v string
		for line := range strings.SplitSeq(x.Stdout, "\n") {
			if after, ok := strings.CutPrefix(line, k+"="); ok {
				v = after
			}
		}
		u, err := url.Parse(v)
		if err != nil || u.Host != info.Egress || u.User.Username() == "" {
			t.Errorf("%s=%q: want the runner's proxy %s with the computer's credentials", k, v, info.Egress)
		}
	}

	for _, target := range []string{"http://allowed.tunnel.test/hello", "http://" + ns.Addr.String() + "/direct-ip"} {
		if x := s.run(t, ctx, "computerd fetch "+target); x.ExitCode != 0 || !strings.Contains(x.Stdout, "hello from") {
			t.Errorf("%s through the runner's proxy: %+v", target, x)
		}
	}
	for _, target := range []string{
		"http://169.254.169.254/latest/meta-data/",
		"http://" + net.JoinHostPort(proxyHost, svcPort) + "/",
		"http://" + net.JoinHostPort(ns.Local.String(), svcPort) + "/",
		"http://127.1:" + svcPort + "/",
	} {
		if x := s.run(t, ctx, "computerd fetch -timeout 5s "+target); x.ExitCode != 1 || !strings.Contains(x.Stdout, "403") || !strings.Contains(x.Stdout, "blocked-address") {
			t.Errorf("%s: want a 403 blocked-address refusal, got %+v", target, x)
		}
	}
	// The direct tries wait out their timeout: they run side by side.
	direct := []string{"http://" + ns.Addr.String() + "/", "http://" + net.JoinHostPort(proxyHost, svcPort) + "/"}
	results := make([]computerd.ExecResult, len(direct))
	errs := make([]error, len(direct))
	var wg sync.WaitGroup
	for i, target := range direct {
		wg.Go(func() {
			results[i], errs[i] = s.cl.Exec(ctx, computerd.ExecRequest{Command: "computerd fetch -direct -timeout 3s " + target, TimeoutMs: 30000})
		})
	}
	wg.Wait()
	for i, target := range direct {
		if x, err := results[i], errs[i]; err != nil {
			t.Fatalf("exec direct %s: %v", target, err)
		} else if x.ExitCode == 0 || strings.Contains(x.Stdout, "hello from") || strings.Contains(x.Stdout, "own service") {
			t.Errorf("direct %s: %+v", target, x)
		}
	}
	// Another computer's credentials do not pass.
	if x := s.run(t, ctx, `HTTP_PROXY=$(echo $HTTP_PROXY | sed 's#//[^:]*:#//someone-else:#') computerd fetch http://allowed.tunnel.test/`); x.ExitCode != 1 || !strings.Contains(x.Stdout, "407") {
		t.Errorf("credentials for another computer: %+v", x)
	}
	cancel()
	r.wait(t, ctx)
}
