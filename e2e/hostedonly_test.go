package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/netnstest"
	"github.com/berthdev/berth/internal/syncbuf"
	"github.com/berthdev/berth/internal/testkit"
)

// TestHostedOnlySupervisor runs a supervisor whose only provider is hosted
// in a network namespace of its own, which has no docker0, with no Docker
// socket: it starts without an egress proxy, serves the API, and takes an
// agent and a connection to its provider. The same supervisor with docker
// among its providers refuses to start there, saying why.
func TestHostedOnlySupervisor(t *testing.T) {
	light(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	netnstest.Require(t, `sudo env "PATH=$PATH" go test -count=1 -run TestHostedOnlySupervisor ./e2e/`)
	ns := netnstest.New(t, ctx, "ho")
	ns.CheckRoutes(t, ctx)
	if out, err := exec.CommandContext(ctx, "ip", "-n", ns.Name, "link", "show", "docker0").CombinedOutput(); err == nil {
		t.Fatalf("the namespace has a docker0:\n%s", out)
	}

	const token = "hosted-only-operator-token-0123"
	addr := net.JoinHostPort(ns.Addr.String(), "8080")
	env := func(providers string) []string {
		return []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"HOME=" + t.TempDir(),
			"SUPERVISOR_TOKEN=" + token,
			"PROVIDERS=" + providers,
			"DEFAULT_PROVIDER=e2b",
			"DOCKER_HOST=unix:///nonexistent/docker.sock",
			"DOCKER_SOCKET=/nonexistent/docker.sock",
		}
	}
	start := func(providers string) (*exec.Cmd, *syncbuf.Buffer, chan struct{}) {
		logs := &syncbuf.Buffer{}
		cmd := exec.Command("ip", "netns", "exec", ns.Name, berthBin, "supervisor", "--listen", addr, "--data", t.TempDir())
		cmd.Env = env(providers)
		cmd.Stdout, cmd.Stderr = logs, logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		t.Cleanup(func() {
			cmd.Process.Kill()
			<-exited
			if t.Failed() {
				t.Logf("supervisor (PROVIDERS=%s) log:\n%s", providers, logs.String())
			}
		})
		return cmd, logs, exited
	}

	// With docker among the providers, there is no docker0 to serve the
	// egress proxy on: the supervisor refuses to start.
	_, logs, exited := start("e2b,docker")
	select {
	case <-exited:
	case <-time.After(time.Minute):
		t.Fatal("a supervisor with docker started in a namespace with no docker0 and no Docker socket")
	}
	if s := logs.String(); !strings.Contains(s, "docker") {
		t.Errorf("the refusal does not name docker:\n%s", s)
	}

	_, logs, exited = start("e2b")
	url := "http://" + addr
	client := &http.Client{Timeout: 5 * time.Second}
	call := func(method, path, body string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, method, url+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	if !testkit.Poll(30*time.Second, func() bool {
		select {
		case <-exited:
			return true
		default:
		}
		code, _ := call("GET", "/healthz", "")
		return code == 200
	}) {
		t.Fatal("the hosted-only supervisor did not become healthy")
	}
	select {
	case <-exited:
		t.Fatal("the hosted-only supervisor exited")
	default:
	}
	if !strings.Contains(logs.String(), "egress proxy not started") {
		t.Errorf("the log does not say the egress proxy was not started:\n%s", logs.String())
	}
	if code, body := call("POST", "/v1/agents", `{"id":"h1","name":"h1"}`); code != 201 {
		t.Fatalf("create agent: %d %s", code, body)
	}
	code, body := call("POST", "/v1/computers", `{"agent":"h1","provider":"e2b","credentials":{"apiKey":"e2b_0123456789abcdef0123456789abcdef01234567"},"leaseSeconds":600,"dailySeconds":3600}`)
	if code != 201 {
		t.Fatalf("connect e2b: %d %s", code, body)
	}
	code, body = call("GET", "/v1/agents/h1/computer", "")
	var st struct {
		Connection struct{ Provider string }
	}
	if code != 200 || json.Unmarshal([]byte(body), &st) != nil || st.Connection.Provider != "e2b" {
		t.Fatalf("status: %d %s", code, body)
	}
	if strings.Contains(body, "e2b_0123456789abcdef") || strings.Contains(logs.String(), "e2b_0123456789abcdef") {
		t.Error("the provider's key reached an answer or the log")
	}
}
