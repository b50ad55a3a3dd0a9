//go:build linux

package compose

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/internal/hostnet"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/relay"
)

// The images compose.yaml runs; `make test` builds them (images,
// image-supervisor, image-postgres). BERTH_SUPERVISOR_IMAGE names another
// supervisor image to test.
const (
	supervisorImage = "berth/supervisor:latest"
	postgresImage   = "berth/postgres:15"
	headlessImage   = "berth/headless:latest"
)

// instance is one compose project brought up by the test.
type instance struct {
	t       *testing.T
	dir     string // holds compose.yaml and .env
	project string
}

// compose runs docker compose on the instance's project and returns its
// standard output; a failure ends the test with both outputs.
func (in *instance) compose(ctx context.Context, args ...string) string {
	in.t.Helper()
	out, err := in.try(ctx, args...)
	if err != nil {
		in.t.Fatalf("docker compose %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (in *instance) try(ctx context.Context, args ...string) (string, error) {
	full := append([]string{"compose", "--project-name", in.project,
		"--file", filepath.Join(in.dir, "compose.yaml"), "--file", filepath.Join(in.dir, healthFile)}, args...)
	cmd := exec.CommandContext(ctx, "docker", full...)
	cmd.Dir = in.dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String() + errb.String(), err
	}
	return out.String(), nil
}

// healthFile overrides how often compose.yaml's health checks run: every
// 500 ms instead of every 2 s, with four times the retries, so that each
// service has as long as before to become healthy, and the test waits less
// for the first check after each start. The checks themselves are
// compose.yaml's.
const (
	healthFile     = "health.yaml"
	healthOverride = `services:
  postgres:
    healthcheck: {interval: 500ms, retries: 120}
  supervisor:
    healthcheck: {interval: 500ms, retries: 240}
  relay:
    healthcheck: {interval: 500ms, retries: 120}
`
)

// docker runs the docker CLI and returns its trimmed standard output.
func docker(t *testing.T, ctx context.Context, args ...string) string {
	t.Helper()
	out, err := exec.CommandContext(ctx, "docker", args...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return strings.TrimSpace(string(out))
}

func lines(s string) []string {
	var out []string
	for l := range strings.SplitSeq(strings.TrimSpace(s), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

func secret() string {
	b := make([]byte, 24)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// requireCompose skips the test when `docker compose` (v2) does not run,
// and fails it under BERTH_REQUIRE_DOCKER=1.
func requireCompose(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("docker", "compose", "version", "--short").Output()
	if err != nil {
		testkit.Missing(t, testkit.DockerEnv, fmt.Sprintf("docker compose (the v2 plugin) does not run (%v)", err),
			"packaging/compose/install-plugin.sh")
	}
	return strings.TrimSpace(string(out))
}

// TestCompose brings Berth up with compose.yaml on free ports (supervisor,
// PostgreSQL, relay, TURN), runs a computer through the REST API, restarts
// the supervisor to see the session kept in PostgreSQL, stops the
// computer, and checks that `docker compose down -v` leaves nothing behind.
func TestCompose(t *testing.T) {
	supervisorImage := supervisorImage
	if img := os.Getenv("BERTH_SUPERVISOR_IMAGE"); img != "" {
		supervisorImage = img // as compose.yaml reads it
	}
	if testing.Short() {
		t.Skip("needs Docker; run without -short (make test)")
	}
	testkit.RequireDocker(t, supervisorImage, postgresImage, headlessImage)
	version := requireCompose(t)
	ctx := testkit.ContextTimeout(t, 8*time.Minute)
	t0 := time.Now()
	t.Logf("docker compose %s", version)

	suffix := strconv.Itoa(os.Getpid()) + "-" + secret()[:8]
	in := &instance{t: t, dir: t.TempDir(), project: "berth-compose-test-" + suffix}
	src, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(in.dir, "compose.yaml"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(in.dir, healthFile), []byte(healthOverride), 0o644); err != nil {
		t.Fatal(err)
	}

	// Tags of this test's own, in a repository of their own, so that
	// another test rebuilding (and retiring) berth/supervisor:latest
	// meanwhile changes nothing here.
	supTag, pgTag := "berth-compose-test/supervisor:"+suffix, "berth-compose-test/postgres:"+suffix
	docker(t, ctx, "tag", supervisorImage, supTag)
	docker(t, ctx, "tag", postgresImage, pgTag)
	t.Cleanup(func() { exec.Command("docker", "rmi", supTag, pgTag).Run() })

	// An image built before the supervisor image carried iptables cannot
	// guard the host; say so rather than fail at its health check.
	if out, err := exec.CommandContext(ctx, "docker", "run", "--rm", "--network", "none", "--entrypoint", "sh", supTag,
		"-c", "command -v iptables").CombinedOutput(); err != nil {
		t.Fatalf("%s has no iptables (%v: %s); rebuild it with images/build.sh supervisor", supervisorImage, err, out)
	}

	var st syscall.Stat_t
	if err := syscall.Stat("/var/run/docker.sock", &st); err != nil {
		t.Fatalf("the supervisor needs the engine's socket at /var/run/docker.sock: %v", err)
	}
	ports := map[string]int{}
	for _, k := range []string{"BERTH_API_PORT", "BERTH_RELAY_PORT", "BERTH_RELAY_INTERNAL_PORT", "BERTH_POSTGRES_PORT", "egress", "turn"} {
		p, err := testkit.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ports[k] = p
	}
	token := secret()
	relayURL := "ws://127.0.0.1:" + strconv.Itoa(ports["BERTH_RELAY_PORT"])
	env := []string{
		"SUPERVISOR_TOKEN=" + token,
		"POSTGRES_PASSWORD=" + secret(),
		"RELAY_TOKEN=" + secret(),
		"DOCKER_GID=" + strconv.Itoa(int(st.Gid)),
		"BERTH_SUPERVISOR_IMAGE=" + supTag,
		"BERTH_POSTGRES_IMAGE=" + pgTag,
		"BERTH_API_HOST=127.0.0.1",
		"BERTH_RELAY_HOST=127.0.0.1",
		"EGRESS_LISTEN=:" + strconv.Itoa(ports["egress"]),
		"TURN_LISTEN=:" + strconv.Itoa(ports["turn"]),
		"COMPUTER_NETWORK_POOL=1",
		"RELAY_PUBLIC_URL=" + relayURL,
		"BERTH_LOG_LEVEL=debug",
	}
	for _, k := range []string{"BERTH_API_PORT", "BERTH_RELAY_PORT", "BERTH_RELAY_INTERNAL_PORT", "BERTH_POSTGRES_PORT"} {
		env = append(env, k+"="+strconv.Itoa(ports[k]))
	}
	if err := os.WriteFile(filepath.Join(in.dir, ".env"), []byte(strings.Join(env, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// Whatever happens, the project goes, with its volumes; what it made is
	// checked at the end of the test.
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := in.try(context.Background(), "logs", "--no-color", "--tail", "80")
			t.Logf("docker compose logs:\n%s", out)
		}
		dctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if out, err := in.try(dctx, "down", "--volumes", "--timeout", "60"); err != nil {
			t.Errorf("docker compose down: %v\n%s", err, out)
		}
	})

	tUp := time.Now()
	in.compose(ctx, "up", "--detach", "--wait", "--wait-timeout", "240")
	t.Logf("docker compose up --wait: %v", time.Since(tUp).Round(time.Millisecond))

	// Every service is up and healthy.
	ps := in.compose(ctx, "ps", "--all", "--format", "{{.Service}} {{.State}} {{.Health}}")
	for _, want := range []string{"postgres running healthy", "supervisor running healthy", "relay running healthy"} {
		if !strings.Contains(ps, want) {
			t.Errorf("docker compose ps: no %q in\n%s", want, ps)
		}
	}
	supervisorPID := func() string {
		id := strings.TrimSpace(in.compose(ctx, "ps", "--quiet", "supervisor"))
		return docker(t, ctx, "inspect", "--format", "{{.State.Pid}}", id)
	}
	pids := []string{supervisorPID()}
	// The supervisor runs as berth (uid 999) with the socket's group.
	if got := in.compose(ctx, "exec", "-T", "supervisor", "id"); !strings.Contains(got, "uid=999(berth)") || !strings.Contains(got, strconv.Itoa(int(st.Gid))) {
		t.Errorf("the supervisor's user: %s", got)
	}

	// TURN serves on the docker0 address (TCP here; UDP on the same port).
	bridge, err := hostnet.BridgeIPv4()
	if err != nil {
		t.Fatalf("docker0: %v", err)
	}
	turnAddr := net.JoinHostPort(bridge.String(), strconv.Itoa(ports["turn"]))
	if c, err := net.DialTimeout("tcp", turnAddr, 5*time.Second); err != nil {
		t.Errorf("TURN on %s: %v", turnAddr, err)
	} else {
		c.Close()
	}
	// The relay answers lenders' agents.
	relayAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports["BERTH_RELAY_PORT"]))
	if c, err := net.DialTimeout("tcp", relayAddr, 5*time.Second); err != nil {
		t.Errorf("relay on %s: %v", relayAddr, err)
	} else {
		c.Close()
	}

	url := "http://127.0.0.1:" + strconv.Itoa(ports["BERTH_API_PORT"])
	cli, err := api.New(url, token)
	if err != nil {
		t.Fatal(err)
	}
	// The supervisor reaches the relay's internal API with RELAY_TOKEN: it
	// lists the relay's lenders (none yet), where an unreachable relay or a
	// wrong token is a 503.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/lenders", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /v1/lenders: %v", err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "[]" {
		t.Errorf("GET /v1/lenders through the relay: %d %s", resp.StatusCode, body)
	}

	// A lender pairs with the supervisor and connects to the relay, which
	// checks its token with the supervisor (RELAY_TOKEN); a wrong token is
	// refused.
	code, err := cli.CreatePairCode(ctx, "compose lender")
	if err != nil {
		t.Fatalf("pair code: %v", err)
	}
	paired, err := cli.Pair(ctx, code.Code, "compose lender")
	if err != nil {
		t.Fatalf("pair: %v", err)
	}
	if paired.RelayURL != relayURL {
		t.Errorf("paired with relay %q, want RELAY_PUBLIC_URL %q", paired.RelayURL, relayURL)
	}
	dial := func(tok string) (int, error) {
		c, resp, err := websocket.Dial(ctx, relayURL+relay.ConnectPath, &websocket.DialOptions{
			HTTPHeader:   http.Header{"Authorization": {"Bearer " + tok}},
			Subprotocols: []string{relay.Subprotocol},
		})
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		if c != nil {
			c.Close(websocket.StatusNormalClosure, "")
		}
		return status, err
	}
	if status, err := dial(paired.Token); err != nil || status != http.StatusSwitchingProtocols {
		t.Errorf("the lender's websocket to the relay: %d, %v", status, err)
	}
	if status, _ := dial("wrong" + paired.Token); status != http.StatusUnauthorized {
		t.Errorf("a wrong lender token at the relay: %d, want 401", status)
	}

	if _, err := cli.CreateAgent(ctx, api.CreateAgentRequest{ID: "compose-agent", Name: "compose test"}); err != nil {
		t.Fatalf("create agent: %v", err)
	}
	if _, err := cli.Connect(ctx, api.ConnectRequest{Agent: "compose-agent", Provider: "docker", LeaseSeconds: 300}); err != nil {
		t.Fatalf("connect docker: %v", err)
	}
	// Should the test end early, the computer is stopped before the
	// project goes down (cleanups run last first).
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cli.Stop(sctx, "compose-agent")
	})
	tStart := time.Now()
	sess, err := cli.Start(ctx, "compose-agent")
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Logf("computer %s started in %v", sess.ID, time.Since(tStart).Round(time.Millisecond))
	res, err := cli.Exec(ctx, "compose-agent", api.ExecRequest{Command: "echo hi > note && cat note"})
	if err != nil {
		t.Fatalf("exec: %v", err)
	}
	if res.ExitCode != 0 || res.Stdout != "hi\n" {
		t.Fatalf("exec echo hi: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}

	// The computer is a container of this engine, with this deployment's
	// label; the session is a row in PostgreSQL.
	computer := docker(t, ctx, "ps", "--all", "--quiet", "--filter", "label=dev.berth.session="+sess.ID)
	if computer == "" {
		t.Fatalf("no container labelled dev.berth.session=%s", sess.ID)
	}
	deployment := docker(t, ctx, "inspect", "--format", `{{index .Config.Labels "dev.berth.deployment"}}`, computer)
	if deployment == "" {
		t.Fatalf("computer %s has no deployment label", computer)
	}
	query := "SELECT state FROM sessions WHERE id = '" + sess.ID + "'"
	if got := strings.TrimSpace(in.compose(ctx, "exec", "-T", "postgres", "psql", "--username=berth", "--dbname=berth",
		"--no-align", "--tuples-only", "--command="+query)); got != "running" {
		t.Errorf("PostgreSQL's sessions row of %s: %q, want running", sess.ID, got)
	}

	// A restarted supervisor finds the agent, its connection and its
	// running session in PostgreSQL, and reaches the same computer.
	tRestart := time.Now()
	in.compose(ctx, "restart", "supervisor")
	in.compose(ctx, "up", "--detach", "--wait", "--wait-timeout", "180", "supervisor")
	t.Logf("supervisor restarted and healthy in %v", time.Since(tRestart).Round(time.Millisecond))
	pids = append(pids, supervisorPID())
	status, err := cli.Status(ctx, "compose-agent")
	if err != nil {
		t.Fatalf("status after restart: %v", err)
	}
	if status.Session == nil || status.Session.ID != sess.ID || status.Session.State != api.StateRunning {
		t.Fatalf("after a restart, session %+v; want %s running", status.Session, sess.ID)
	}
	res, err = cli.Exec(ctx, "compose-agent", api.ExecRequest{Command: "cat note"})
	if err != nil || res.Stdout != "hi\n" {
		t.Fatalf("exec after restart: %+v, %v", res, err)
	}

	if _, err := cli.Stop(ctx, "compose-agent"); err != nil {
		t.Fatalf("stop: %v", err)
	}
	testkit.EventuallyContext(t, ctx, "the computer's container is removed", func() bool {
		out, err := exec.CommandContext(ctx, "docker", "ps", "--all", "--quiet", "--filter", "id="+computer).Output()
		return err == nil && strings.TrimSpace(string(out)) == ""
	})

	// What the supervisor's network pool holds now (its holders carry the
	// owner host/pid, and each names its network).
	holders := func() []string {
		var hs []string
		for _, l := range lines(docker(t, ctx, "ps", "--all", "--filter", "label=dev.berth.holder-owner",
			"--format", `{{.ID}} {{.Label "dev.berth.holder-owner"}} {{.Label "dev.berth.holder-network"}}`)) {
			f := strings.Fields(l)
			for _, pid := range pids {
				if len(f) == 3 && strings.HasSuffix(f[1], "/"+pid) {
					hs = append(hs, f[0], f[2])
				}
			}
		}
		return hs
	}
	// Every volume the project's containers use is one of its named
	// volumes: an anonymous one (an image's VOLUME left uncovered) would
	// outlive a plain `docker compose down`.
	for _, id := range lines(in.compose(ctx, "ps", "--all", "--quiet")) {
		for _, m := range strings.Fields(docker(t, ctx, "inspect", "--format", `{{range .Mounts}}{{if eq .Type "volume"}}{{.Name}} {{end}}{{end}}`, id)) {
			if m != in.project+"_postgres" && m != in.project+"_supervisor" {
				t.Errorf("container %s uses volume %s, not one of the project's named volumes", id, m)
			}
		}
	}

	pool := holders()
	t.Logf("the supervisor's network pool before down: %v", pool)

	tDown := time.Now()
	in.compose(ctx, "down", "--volumes", "--timeout", "60")
	t.Logf("docker compose down --volumes: %v", time.Since(tDown).Round(time.Millisecond))

	// Nothing of the project, of the deployment, or of the pool is left.
	left := map[string][]string{}
	for _, kind := range []string{"container", "network", "volume"} {
		for _, label := range []string{"com.docker.compose.project=" + in.project, "dev.berth.deployment=" + deployment} {
			args := []string{kind, "ls", "--quiet", "--filter", "label=" + label}
			if kind == "container" {
				args = []string{"ps", "--all", "--quiet", "--filter", "label=" + label}
			}
			left[kind] = append(left[kind], lines(docker(t, ctx, args...))...)
		}
	}
	for i := 0; i+1 < len(pool); i += 2 {
		if exec.CommandContext(ctx, "docker", "container", "inspect", pool[i]).Run() == nil {
			left["container"] = append(left["container"], pool[i])
		}
		if exec.CommandContext(ctx, "docker", "network", "inspect", pool[i+1]).Run() == nil {
			left["network"] = append(left["network"], pool[i+1])
		}
	}
	for kind, ids := range left {
		if len(ids) > 0 {
			t.Errorf("left after docker compose down -v: %s %v", kind, ids)
		}
	}
	t.Logf("whole test: %v", time.Since(t0).Round(time.Millisecond))
}
