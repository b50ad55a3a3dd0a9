package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/agent/lender"
	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/syncbuf"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/lending"
	"github.com/berthdev/berth/relay"
	"github.com/berthdev/berth/relay/relayclient"
	"github.com/berthdev/berth/relay/relayserver"
)

// relayProc is a relay as `berth relay` runs it: agents on one listener,
// the internal API on another, tokens checked with the supervisor.
type relayProc struct {
	srv           *relayserver.Server
	agents, inter *http.Server
	agentsAddr    string
	interAddr     string
}

func startRelay(t *testing.T, agentsAddr, interAddr, supervisorURL, token string, log *slog.Logger) *relayProc {
	t.Helper()
	aln, err := net.Listen("tcp", agentsAddr)
	if err != nil {
		t.Fatal(err)
	}
	iln, err := net.Listen("tcp", interAddr)
	if err != nil {
		t.Fatal(err)
	}
	p := &relayProc{agentsAddr: aln.Addr().String(), interAddr: iln.Addr().String()}
	p.srv = relayserver.New(relayserver.Config{
		Logger:       log,
		Authenticate: relayserver.SupervisorAuth(supervisorURL, token, nil, func(msg string, args ...any) { log.Warn(msg, args...) }),
	})
	mux := http.NewServeMux()
	mux.Handle(relay.ConnectPath, p.srv)
	p.agents = &http.Server{Handler: mux}
	p.inter = &http.Server{Handler: p.srv.InternalHandler(token)}
	go p.agents.Serve(aln)
	go p.inter.Serve(iln)
	return p
}

// kill stops the relay at once, cutting every link and request.
func (p *relayProc) kill() {
	p.inter.Close()
	p.agents.Close()
	p.srv.Close()
}

func (p *relayProc) wsURL() string { return "ws://" + p.agentsAddr + relay.ConnectPath }

// TestLendingThroughRelay: a supervisor, a relay run as its own process
// (its internal API on loopback) and a lending agent run all five tools on
// a local computer. The relay is killed while a command runs: the exec
// comes back uncertain, its retry with the same Idempotency-Key replays
// that answer, the agent reconnects once a relay is back, the command ran
// once, and the session goes on. A wrong agent token is refused and logged
// without the token; lending paused is a 503 with its own code.
func TestLendingThroughRelay(t *testing.T) {
	requireDocker(t, "berth/test:latest")
	light(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const relayToken = "e2e-relay-token-0123456789"
	const computerSecret = "e2e-computer-token-secret-0123456789"
	r := startLendingRig(t, ctx, lendingRigOptions{name: "e2e lender", relayToken: relayToken, computerSecret: computerSecret,
		egress: ":0", providers: []string{"docker", "local"}, settings: control.SettingsUpdate{MemoryMB: ptrTo(int64(512))}})
	defer r.close()
	s, paired, l, owner, logs, log, supURL, remote := r.s, r.paired, r.l, r.owner, r.logs, r.log, r.supURL, r.remote

	// The pairing answer names the relay.
	if paired.RelayURL != r.rp.wsURL() || paired.AgentID == "" || paired.Token == "" {
		t.Fatalf("pairing answer: %+v", paired)
	}

	// A wrong agent token is refused, and no log line carries it.
	const wrong = "wrong-agent-token-7f3a9c"
	if _, err := relayclient.Connect(ctx, relayclient.Config{URL: r.rp.wsURL(), Token: wrong}); !errors.Is(err, relayclient.ErrUnauthorized) {
		t.Fatalf("connect with a wrong token: %v", err)
	}
	if strings.Contains(logs.String(), wrong) || !strings.Contains(logs.String(), "companion token refused") {
		t.Fatal("the wrong token's refusal was not logged, or the token was")
	}
	var lenders []struct {
		ID, Name, Version string
		Online            bool
	}
	s.must("GET", "/v1/lenders", nil, 200, &lenders)
	if len(lenders) != 1 || lenders[0].ID != paired.AgentID || lenders[0].Name != "e2e lender" || !lenders[0].Online || lenders[0].Version != "e2e" {
		t.Fatalf("lenders: %+v", lenders)
	}

	// The five tools on a local computer.
	s.must("POST", "/v1/agents", map[string]any{"id": "lend1", "name": "lend1", "workspace": "lab"}, 201, nil)
	s.must("POST", "/v1/computers", map[string]any{"agent": "lend1", "provider": "local", "leaseSeconds": 600,
		"credentials": map[string]string{"lender": paired.AgentID}}, 201, nil)
	var sess session
	s.must("POST", "/v1/agents/lend1/computer/start", nil, 200, &sess)
	if sess.Provider != "local" || sess.State != "running" {
		t.Fatalf("start: %+v", sess)
	}
	cs := l.Computers()
	if len(cs) != 1 {
		t.Fatalf("lender runs %d computers", len(cs))
	}
	container := cs[0].MachineID
	t.Cleanup(func() { exec.Command("docker", "rm", "-f", "-v", container).Run() })
	if x := s.exec("lend1", "echo lent; id -u"); x.ExitCode != 0 || x.Stdout != "lent\n1000\n" {
		t.Fatalf("exec: %+v", x)
	}
	var w struct {
		Bytes int `json:"bytes"`
	}
	s.must("POST", "/v1/agents/lend1/computer/write_file", map[string]any{"path": "notes.txt", "content": "through the relay"}, 200, &w)
	var rf struct{ Content string }
	s.must("POST", "/v1/agents/lend1/computer/read_file", map[string]any{"path": "notes.txt"}, 200, &rf)
	if w.Bytes != 17 || rf.Content != "through the relay" {
		t.Fatalf("write %+v, read %q", w, rf.Content)
	}
	if ss, err := owner.Sessions(ctx); err != nil || len(ss) != 1 || ss[0].Agent != "lend1" || ss[0].Workspace != "lab" {
		t.Fatalf("owner's sessions: %+v %v", ss, err)
	}
	// A terminal (streamed exec, a websocket) through the relay's internal
	// API, the agent's link and its proxy.
	deriver, err := token.NewDeriver([]byte(computerSecret))
	if err != nil {
		t.Fatal(err)
	}
	term := computerd.NewClient("http://lender"+lending.EndpointPath(cs[0].ComputerID), deriver.Derive(token.Computer, cs[0].ComputerID),
		computerd.WithTransport(remote.Transport(paired.AgentID)))
	var termOut bytes.Buffer
	st, err := term.ExecStream(ctx, computerd.StreamStart{Command: "read x; echo got $x", TimeoutMs: 20000}, &termOut, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	st.Write([]byte("typed\n"))
	if code, _, err := st.Wait(); err != nil || code != 0 || termOut.String() != "got typed\n" {
		t.Fatalf("terminal: %d %v %q", code, err, termOut.String())
	}
	st.Close()
	// The supervisor's terminal and a port preview reach the lent computer
	// through the relay too.
	cl, err := api.New(s.url, s.token)
	if err != nil {
		t.Fatal(err)
	}
	var shOut syncbuf.Buffer
	tc, err := cl.Terminal(ctx, "lend1", api.TerminalRequest{Command: "read x; echo term-$x; exit 3"}, &shOut)
	if err != nil {
		t.Fatal(err)
	}
	tc.Write([]byte("lent\n"))
	if exit, err := tc.Wait(); err != nil || exit.ExitCode != 3 || !strings.Contains(shOut.String(), "term-lent") {
		t.Fatalf("terminal through the relay: %+v %v %q", exit, err, shOut.String())
	}
	tc.Close()
	if x := s.exec("lend1", "mkdir -p site && echo 'served from a lent computer' > site/index.html && httpd -p 127.0.0.1:8090 -h site"); x.ExitCode != 0 {
		t.Fatalf("serve a page: %+v", x)
	}
	var pv api.Preview
	s.must("POST", "/v1/agents/lend1/computer/ports/8090/preview", nil, 201, &pv)
	var code int
	var page string
	if !testkit.Poll(30*time.Second, func() bool { code, page = fetch(t, pv.URL); return code == 200 }) || page != "served from a lent computer\n" {
		t.Fatalf("preview through the relay: %d %q", code, page)
	}
	// A reconciliation lists the lent machine and keeps it.
	if rep, err := r.d.Service.Reconcile(ctx); err != nil || rep.Machines != 1 || rep.Kept != 1 {
		t.Fatalf("reconcile: %+v %v", rep, err)
	}

	// The relay dies while a command runs.
	const key = "relay-killed-exec"
	// The command outlasts the relay by far, however slow the machine.
	body := map[string]any{"command": "echo ran >> /home/berth/marker; sleep 30; echo done", "timeoutSeconds": 60}
	type answer struct {
		status   int
		replayed string
		x        execResult
	}
	post := func() answer {
		raw, _ := json.Marshal(body)
		req, _ := http.NewRequestWithContext(ctx, "POST", supURL+"/v1/agents/lend1/computer/exec", bytes.NewReader(raw))
		req.Header.Set("Authorization", "Bearer "+s.token)
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("exec: %v", err)
			return answer{}
		}
		defer resp.Body.Close()
		var a answer
		a.status, a.replayed = resp.StatusCode, resp.Header.Get("Idempotent-Replayed")
		json.NewDecoder(resp.Body).Decode(&a.x)
		return a
	}
	first := make(chan answer, 1)
	go func() { first <- post() }()
	testkit.EventuallyContext(t, ctx, "the command's marker in the computer", func() bool {
		out, err := exec.Command("docker", "exec", container, "cat", "/home/berth/marker").Output()
		return err == nil && string(out) == "ran\n"
	})
	r.rp.kill()
	a := <-first
	if a.status != 200 || !a.x.Uncertain || a.x.ExitCode != -1 {
		t.Fatalf("exec cut by the relay: %+v", a)
	}
	if again := post(); again.status != 200 || !again.x.Uncertain || again.replayed != "true" {
		t.Fatalf("retry with the same key: %+v", again)
	}
	// Offline now: a reconciliation cannot list the lender, so it ends
	// nothing; the session lives.
	if rep, err := r.d.Service.Reconcile(ctx); err == nil || rep.Vanished != 0 {
		t.Fatalf("reconcile with the relay away: %+v %v", rep, err)
	}
	var view struct {
		Session session `json:"session"`
	}
	s.must("GET", "/v1/agents/lend1/computer", nil, 200, &view)
	if view.Session.State != "running" {
		t.Fatalf("session while the relay is away: %+v", view.Session)
	}
	if st, _ := owner.Status(ctx); st.Relay.Online {
		t.Fatal("agent still reports the relay online")
	}
	r.rp = startRelay(t, r.rp.agentsAddr, r.rp.interAddr, supURL, relayToken, log)
	testkit.EventuallyContext(t, ctx, "the agent online at the relay", online(r.rp, paired.AgentID))
	if x := s.exec("lend1", "sleep 3; cat /home/berth/marker; cat notes.txt"); x.Stdout != "ran\nthrough the relay" {
		t.Fatalf("after reconnect: %+v (the command must have run once)", x)
	}
	if st, _ := owner.Status(ctx); !st.Relay.Online || st.Sessions != 1 {
		t.Fatalf("owner's status after reconnect: %+v", st)
	}
	s.must("POST", "/v1/agents/lend1/computer/stop", nil, 200, nil)
	if exec.Command("docker", "container", "inspect", container).Run() == nil {
		t.Fatal("container still there after stop")
	}

	// The owner pauses lending: the next start is a 503 that says so.
	if _, err := owner.SetLending(ctx, false); err != nil {
		t.Fatal(err)
	}
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if st := s.call("POST", "/v1/agents/lend1/computer/start", nil, &e); st != 503 || e.Error.Code != lending.CodePaused {
		t.Fatalf("start while paused: %d %+v", st, e)
	}
	if u, err := owner.Usage(ctx, 1); err != nil || len(u.ByAgent) != 1 || u.ByAgent[0].Key != "lend1" || u.ByWorkspace[0].Key != "lab" {
		t.Fatalf("owner's usage: %+v %v", u, err)
	}
}

func ptrTo[T any](v T) *T { return &v }

// online reports whether agent id is connected to the relay.
func online(rp *relayProc, id string) func() bool {
	return func() bool {
		p, ok := rp.srv.Presence(id)
		return ok && p.Online
	}
}

// TestDevLendingByHand is the "done when" with the real binary:
// berth dev, then in a second terminal berth agent pair with a code from
// it and berth agent run; the supervisor then runs a computer on that
// agent through the relay. A spent code is refused.
func TestDevLendingByHand(t *testing.T) {
	requireDocker(t, "berth/test:latest")
	light(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	token := "dev-by-hand-token-0123456789"
	env := devEnv(dir, token, "COMPUTER_NETWORK_POOL=0")
	dev := startProc(t, ctx, env, "dev", "--listen", "127.0.0.1:0", "--data", filepath.Join(dir, "dev"), "--relay-listen", "127.0.0.1:0")
	url := dev.waitLine(t, regexp.MustCompile(`ready at (http://\S+)`))
	dev.waitLine(t, regexp.MustCompile(`relay for lent machines: (ws://\S+)`))
	devAgent := dev.waitLine(t, regexp.MustCompile(`lending this machine as (cp_\S+)`))
	// The supervisor's start pass runs before its own agent connects, so
	// it finds no lender; the retry that follows reconciles the lender.
	dev.waitLine(t, regexp.MustCompile(`msg=reconciled .*(unfinished=0)`))

	// Out of the box: berth dev lends its own machine, and a local
	// connection that names no lender uses it, the only one.
	s := &super{t: t, url: url, token: token}
	s.must("POST", "/v1/agents", map[string]any{"id": "own", "name": "own"}, 201, nil)
	s.must("POST", "/v1/computers", map[string]any{"agent": "own", "provider": "local"}, 201, nil)
	var own session
	s.must("POST", "/v1/agents/own/computer/start", nil, 200, &own)
	ownContainer := "berth-c-" + strings.TrimPrefix(own.ID, "s_")
	t.Cleanup(func() { exec.Command("docker", "rm", "-f", "-v", ownContainer).Run() })
	if x := s.exec("own", "echo out of the box"); x.Stdout != "out of the box\n" {
		t.Fatalf("exec on berth dev's own agent: %+v", x)
	}
	lbl, _ := exec.Command("docker", "inspect", "-f", `{{index .Config.Labels "dev.berth.deployment"}}`, ownContainer).Output()
	if got := strings.TrimSpace(string(lbl)); got != lender.Deployment(devAgent) {
		t.Fatalf("berth dev's own computer has deployment label %q, want %q", got, lender.Deployment(devAgent))
	}
	s.must("POST", "/v1/agents/own/computer/stop", nil, 200, nil)

	var code struct{ Code string }
	if st, err := callAPI(url, token, "POST", "/v1/companions/pair-codes", "", map[string]any{"name": "second terminal"}, &code); err != nil || st != 201 {
		t.Fatalf("pair code: %d %v", st, err)
	}
	pair := exec.CommandContext(ctx, berthBin, "agent", "pair", code.Code, "--supervisor", url)
	pair.Env = env
	out, err := pair.CombinedOutput()
	t.Logf("berth agent pair: %s", out)
	m := regexp.MustCompile(`paired as companion (cp_\S+) with`).FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("pair: %v", err)
	}
	lenderID := string(m[1])
	again := exec.CommandContext(ctx, berthBin, "agent", "pair", code.Code, "--supervisor", url)
	again.Env = env
	if out, err := again.CombinedOutput(); err == nil || !strings.Contains(string(out), "pair_code_invalid") {
		t.Fatalf("spent code: %v %s", err, out)
	}

	run := startProc(t, ctx, env, "agent", "run", "--data", filepath.Join(dir, "lender"))
	run.waitLine(t, regexp.MustCompile(`lending as (`+regexp.QuoteMeta(lenderID)+`)`))
	// The agent says so as its link comes up; the relay counts it a moment
	// later. Wait (bounded by the test's deadline) until both lenders show.
	testkit.EventuallyContext(t, ctx, "both lenders online in /v1/lenders", func() bool { return onlineLenders(s) >= 2 })

	s.must("POST", "/v1/agents", map[string]any{"id": "byhand", "name": "byhand"}, 201, nil)
	// Two lenders are paired now (berth dev's own and the second
	// terminal's): the connection names one.
	s.must("POST", "/v1/computers", map[string]any{"agent": "byhand", "provider": "local",
		"credentials": map[string]string{"lender": lenderID}}, 201, nil)
	// With two lenders, a connection that names none is refused, saying why.
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if st := s.call("POST", "/v1/agents/own/computer/start", nil, &e); st != 422 || e.Error.Code != "lender_unnamed" {
		t.Fatalf("start naming no lender among two: %d %+v", st, e)
	}
	var sess session
	testkit.EventuallyContext(t, ctx, "a start through the agent's link", func() bool {
		st := s.call("POST", "/v1/agents/byhand/computer/start", nil, &sess)
		if st != 200 && st != 503 { // 503 only until the agent's link is up
			t.Fatalf("start: %d", st)
		}
		return st == 200
	})
	if sess.Provider != "local" || sess.State != "running" {
		t.Fatalf("start: %+v", sess)
	}
	t.Cleanup(func() { exec.Command("docker", "rm", "-f", "-v", "berth-c-"+strings.TrimPrefix(sess.ID, "s_")).Run() })
	if x := s.exec("byhand", "echo from the second terminal"); x.Stdout != "from the second terminal\n" {
		t.Fatalf("exec: %+v", x)
	}
	// The computer runs under the second agent, not berth dev's own.
	lbl, _ = exec.Command("docker", "inspect", "-f", `{{index .Config.Labels "dev.berth.deployment"}}`, "berth-c-"+strings.TrimPrefix(sess.ID, "s_")).Output()
	if got := strings.TrimSpace(string(lbl)); got != lender.Deployment(lenderID) || got == lender.Deployment(devAgent) {
		t.Fatalf("computer's deployment label %q, want %q", got, lender.Deployment(lenderID))
	}
	ownerCommands(t, ctx, s, env, filepath.Join(dir, "lender"), lenderID, url, sess.ID)
	s.must("POST", "/v1/agents/byhand/computer/stop", nil, 200, nil)
	run.stop(t)
	dev.stop(t)
}

// freePort returns a port for a server process that cannot be given
// port 0 (testkit.FreePort).
func freePort(t *testing.T) string {
	p, err := testkit.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return strconv.Itoa(p)
}

// berthProc is a berth process whose output lines the test reads.
type berthProc struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan struct{}
}

func startProc(t *testing.T, ctx context.Context, env []string, args ...string) *berthProc {
	t.Helper()
	cmd := exec.Command(berthBin, args...)
	cmd.Env = env
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &berthProc{cmd: cmd, lines: make(chan string, 1024), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			t.Logf("berth %s: %s", args[0], sc.Text())
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
	}()
	go func() {
		cmd.Wait()
		pw.Close()
		close(p.done)
	}()
	t.Cleanup(func() { p.stop(t) })
	go func() {
		select {
		case <-ctx.Done():
			cmd.Process.Kill()
		case <-p.done:
		}
	}()
	return p
}

// waitLine returns the first group of the first line matching re.
func (p *berthProc) waitLine(t *testing.T, re *regexp.Regexp) string {
	t.Helper()
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case l := <-p.lines:
			if m := re.FindStringSubmatch(l); m != nil {
				return m[1]
			}
		case <-p.done:
			t.Fatalf("berth exited before printing %s", re)
		case <-timeout:
			t.Fatalf("berth did not print %s", re)
		}
	}
}

// stop ends the process as Ctrl-C does and waits for it.
func (p *berthProc) stop(t *testing.T) {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.done:
	case <-time.After(90 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
		t.Errorf("berth %s did not stop within 90 s of SIGINT", p.cmd.Args[1])
	}
}

var _ = fmt.Sprintf

// TestRelayProcess runs the parts as separate processes, as in production:
// berth supervisor (RELAY_URL=lookup, RELAY_TOKEN, RELAY_PUBLIC_URL), berth
// relay, reporting its lenders to the supervisor, and a paired berth agent
// run; a local connection that names no lender uses the only one, through
// the relay's internal API. (RELAY_URL naming one relay is what the compose
// install runs.)
func TestRelayProcess(t *testing.T) {
	requireDocker(t, "berth/test:latest")
	light(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	token := "relay-process-token-0123456789"
	supPort, agentsPort, internalPort := freePort(t), freePort(t), freePort(t)
	supURL := "http://127.0.0.1:" + supPort
	env := append(os.Environ(),
		"SUPERVISOR_TOKEN="+token, "RELAY_TOKEN=relay-process-relay-token-0123", "COMPUTER_IMAGE_HEADLESS=berth/test:latest",
		"EGRESS_LISTEN=off", "COMPUTER_NETWORK_POOL=0",
		"RELAY_URL=lookup", "RELAY_PUBLIC_URL=ws://127.0.0.1:"+agentsPort+"/v1/agents/connect",
		"BERTH_CONFIG_DIR="+filepath.Join(dir, "config"), "DBUS_SESSION_BUS_ADDRESS=unix:path="+filepath.Join(dir, "no-bus"))
	sup := startProc(t, ctx, env, "supervisor", "--listen", "127.0.0.1:"+supPort, "--data", filepath.Join(dir, "sup"))
	sup.waitLine(t, regexp.MustCompile(`berth supervisor: (listening) on`))
	rel := startProc(t, ctx, env, "relay", "--listen", "127.0.0.1:"+agentsPort, "--internal-listen", "127.0.0.1:"+internalPort, "--supervisor", supURL)
	rel.waitLine(t, regexp.MustCompile(`msg="reporting lenders to the (supervisor)" advertise=http://127.0.0.1:`+internalPort))
	rel.waitLine(t, regexp.MustCompile(`berth relay: agents connect to (ws://\S+)`))

	var code struct{ Code string }
	if st, err := callAPI(supURL, token, "POST", "/v1/companions/pair-codes", "", nil, &code); err != nil || st != 201 {
		t.Fatalf("pair code: %d %v", st, err)
	}
	pair := exec.CommandContext(ctx, berthBin, "agent", "pair", code.Code, "--supervisor", supURL)
	pair.Env = env
	if out, err := pair.CombinedOutput(); err != nil {
		t.Fatalf("pair: %v %s", err, out)
	}
	run := startProc(t, ctx, env, "agent", "run", "--data", filepath.Join(dir, "lender"))
	run.waitLine(t, regexp.MustCompile(`lending as (cp_\S+) to`))

	s := &super{t: t, url: supURL, token: token}
	s.must("POST", "/v1/agents", map[string]any{"id": "rp", "name": "rp"}, 201, nil)
	s.must("POST", "/v1/computers", map[string]any{"agent": "rp", "provider": "local"}, 201, nil)
	var sess session
	testkit.EventuallyContext(t, ctx, "a start through the agent's link", func() bool {
		st := s.call("POST", "/v1/agents/rp/computer/start", nil, &sess)
		if st != 200 && st != 503 { // 503 only until the agent's link is up
			t.Fatalf("start: %d", st)
		}
		return st == 200
	})
	t.Cleanup(func() { exec.Command("docker", "rm", "-f", "-v", "berth-c-"+strings.TrimPrefix(sess.ID, "s_")).Run() })
	if x := s.exec("rp", "echo three processes"); x.Stdout != "three processes\n" {
		t.Fatalf("exec: %+v", x)
	}
	s.must("POST", "/v1/agents/rp/computer/stop", nil, 200, nil)
	run.stop(t)
	rel.stop(t)
	sup.stop(t)
}

// ownerCommands runs the owner's berth agent commands against a real
// lending agent (data folder data, paired as lenderID with the supervisor
// at url) that runs the session running: each is checked where it acts.
func ownerCommands(t *testing.T, ctx context.Context, s *super, env []string, data, lenderID, url, running string) {
	t.Helper()
	owner := func(want int, args ...string) string {
		t.Helper()
		c := exec.CommandContext(ctx, berthBin, append(append([]string{"agent"}, args...), "--data", data)...)
		c.Env = env
		var out bytes.Buffer
		c.Stdout, c.Stderr = &out, &out
		err := c.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("berth agent %s: %v", strings.Join(args, " "), err)
		}
		if code != want {
			t.Fatalf("berth agent %s: exit %d, want %d:\n%s", strings.Join(args, " "), code, want, out.String())
		}
		return out.String()
	}
	mustMatch := func(out, re string) {
		t.Helper()
		if !regexp.MustCompile(re).MatchString(out) {
			t.Fatalf("want %s in:\n%s", re, out)
		}
	}

	out := owner(0, "status")
	mustMatch(out, `lending:\s+on\n`)
	mustMatch(out, `supervisor:\s+`+regexp.QuoteMeta(url)+` as `+regexp.QuoteMeta(lenderID)+`\n`)
	mustMatch(out, `computers:\s+1 running\n`)
	mustMatch(owner(0, "sessions"), regexp.QuoteMeta(running)+`\s+byhand\s+\S+\s+headless\s+running\s`)

	// Limits: changed and read back; out of range refused with the limit,
	// and nothing changed.
	mustMatch(owner(0, "settings", "maxComputers=3", "hours=00:00-23:59", "days=all"), `maxComputers\s+3\n`)
	var set struct {
		MaxComputers int `json:"maxComputers"`
		Hours        struct{ From, To string }
	}
	if err := json.Unmarshal([]byte(owner(0, "settings", "--json")), &set); err != nil || set.MaxComputers != 3 || set.Hours.From != "00:00" || set.Hours.To != "23:59" {
		t.Fatalf("settings read back: %+v %v", set, err)
	}
	mustMatch(owner(1, "settings", "maxComputers=100", "desktop=off"), `maxComputers.*64`)
	mustMatch(owner(2, "settings", "desktop=maybe"), `desktop="maybe": want on or off`)
	mustMatch(owner(2, "settings", "colour=blue"), `want KEY=VALUE with KEY one of lending, maxComputers`)
	if err := json.Unmarshal([]byte(owner(0, "settings", "--json")), &set); err != nil || set.MaxComputers != 3 {
		t.Fatalf("a refused change changed the settings: %+v %v", set, err)
	}

	// Lending off: a new start on this machine is refused, saying why.
	mustMatch(owner(0, "lend", "off"), `lending off`)
	s.must("POST", "/v1/agents", map[string]any{"id": "paused", "name": "paused"}, 201, nil)
	s.must("POST", "/v1/computers", map[string]any{"agent": "paused", "provider": "local",
		"credentials": map[string]string{"lender": lenderID}}, 201, nil)
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if st := s.call("POST", "/v1/agents/paused/computer/start", nil, &e); st != 503 || e.Error.Code != "lending_paused" {
		t.Fatalf("start while the owner paused lending: %d %+v", st, e)
	}
	mustMatch(owner(0, "lend", "on"), `lending on`)
	mustMatch(owner(0, "usage", "--days", "2"), `today\s+\S+ of \S+`)
	owner(2, "usage", "--days", "91")

	// The owner stops the running computer by its session id.
	mustMatch(owner(0, "stop", running), `stopped `+regexp.QuoteMeta(running))
	container := "berth-c-" + strings.TrimPrefix(running, "s_")
	if err := exec.Command("docker", "inspect", container).Run(); err == nil {
		t.Fatalf("container %s still there after berth agent stop", container)
	}
	mustMatch(owner(0, "sessions"), `no computers running`)

	// With no agent at the socket, the commands say so.
	c := exec.CommandContext(ctx, berthBin, "agent", "status", "--data", t.TempDir())
	c.Env = env
	if out, err := c.CombinedOutput(); err == nil || !strings.Contains(string(out), "no lending agent answers at") {
		t.Fatalf("status with no agent: %v %s", err, out)
	}
}
