package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/syncbuf"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers/docker"
)

// proc is a `berth supervisor` process the test runs and may kill.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	url    string
	token  string
	logs   *syncbuf.Buffer
	exited chan struct{}
}

// runSupervisor starts `berth supervisor` on a free port with data in dir.
func runSupervisor(t *testing.T, dir string, extraEnv ...string) *proc {
	return runSupervisorArgs(t, dir, nil, extraEnv...)
}

// runSupervisorArgs is runSupervisor with extra flags. The supervisor
// picks its own port, and the test takes its address from the supervisor's
// own "listening on" line: a port picked here and closed before the
// supervisor binds it may be taken by another test's server meanwhile.
func runSupervisorArgs(t *testing.T, dir string, args []string, extraEnv ...string) *proc {
	t.Helper()
	p := &proc{t: t, token: "crash-operator-token-0123456789", logs: &syncbuf.Buffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(berthBin, append([]string{"supervisor", "--listen", "127.0.0.1:0", "--data", dir, "--log-level", "debug"}, args...)...)
	p.cmd.Env = append(os.Environ(),
		"SUPERVISOR_TOKEN="+p.token,
		"COMPUTER_IMAGE_HEADLESS=berth/test:latest",
		"COMPUTER_MEMORY_MB=256",
		"EGRESS_LISTEN=:0",
		"COMPUTER_NETWORK_POOL=1",
	)
	p.cmd.Env = append(p.cmd.Env, extraEnv...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.kill()
		removeHolders(p.cmd.Process.Pid)
		if t.Failed() {
			t.Logf("supervisor %s log:\n%s", p.url, p.logs.String())
			removeDeployment(p.logs.String())
		}
	})
	exited := false
	listening := regexp.MustCompile(`berth supervisor: listening on (http://\S+)`)
	healthy := testkit.Poll(30*time.Second, func() bool {
		select {
		case <-p.exited:
			exited = true
			return true
		default:
		}
		if p.url == "" {
			m := listening.FindStringSubmatch(p.logs.String())
			if m == nil {
				return false
			}
			p.url = m[1]
		}
		resp, err := http.Get(p.url + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	if exited {
		t.Fatalf("supervisor exited at start:\n%s", p.logs.String())
	}
	if !healthy {
		t.Fatalf("supervisor did not become healthy:\n%s", p.logs.String())
	}
	return p
}

// kill ends the supervisor with SIGKILL, as a crash would.
func (p *proc) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

func (p *proc) call(method, path, key string, body any, out any) (int, error) {
	return callAPI(p.url, p.token, method, path, key, body, out)
}

func (p *proc) must(method, path string, body any, want int, out any) {
	p.t.Helper()
	st, err := p.call(method, path, "", body, out)
	if err != nil || st != want {
		p.t.Fatalf("%s %s: %d %v, want %d", method, path, st, err, want)
	}
}

type status struct {
	Session *struct {
		ID    string `json:"id"`
		State string `json:"state"`
	} `json:"session"`
	Budget struct {
		DailySeconds    int `json:"dailySeconds"`
		UsedSeconds     int `json:"usedSeconds"`
		ReservedSeconds int `json:"reservedSeconds"`
		LeftSeconds     int `json:"leftSeconds"`
	} `json:"budget"`
}

// deploymentObjects lists the Docker objects of one deployment.
func deploymentObjects(t *testing.T, dep string) string {
	t.Helper()
	var all []string
	for _, kind := range [][]string{{"ps", "-a", "--format", "{{.Names}}"}, {"network", "ls", "--format", "{{.Name}}"}, {"volume", "ls", "--format", "{{.Name}}"}} {
		args := append(kind, "--filter", "label=dev.berth.deployment="+dep)
		out, err := exec.Command("docker", args...).Output()
		if err != nil {
			t.Fatalf("docker %v: %v", args, err)
		}
		if s := strings.TrimSpace(string(out)); s != "" {
			all = append(all, kind[0]+": "+strings.ReplaceAll(s, "\n", ","))
		}
	}
	return strings.Join(all, "; ")
}

// removeHolders removes the networks a killed supervisor process kept made
// ahead of time (a live one removes its own when it stops).
func removeHolders(pid int) {
	host, _ := os.Hostname()
	filter := fmt.Sprintf("label=dev.berth.holder-owner=%s/%d", host, pid)
	out, _ := exec.Command("docker", "ps", "-a", "-q", "--filter", filter).Output()
	if ids := strings.Fields(string(out)); len(ids) > 0 {
		exec.Command("docker", append([]string{"rm", "-f"}, ids...)...).Run()
	}
	out, _ = exec.Command("docker", "network", "ls", "-q", "--filter", filter).Output()
	if ids := strings.Fields(string(out)); len(ids) > 0 {
		exec.Command("docker", append([]string{"network", "rm"}, ids...)...).Run()
	}
}

// removeDeployment removes the Docker objects of the deployment named in a
// supervisor's log, after a failed test left them behind.
func removeDeployment(log string) {
	_, rest, ok := strings.Cut(log, "deployment=")
	if !ok {
		return
	}
	filter := "label=dev.berth.deployment=" + strings.Fields(rest)[0]
	for _, c := range []struct{ ls, rm []string }{
		{[]string{"ps", "-a", "-q"}, []string{"rm", "-f", "-v"}},
		{[]string{"network", "ls", "-q"}, []string{"network", "rm"}},
	} {
		out, _ := exec.Command("docker", append(c.ls, "--filter", filter)...).Output()
		if ids := strings.Fields(string(out)); len(ids) > 0 {
			exec.Command("docker", append(c.rm, ids...)...).Run()
		}
	}
	// Volumes the provider's way: a computer's disk gives its loop device
	// back before its volume goes.
	out, _ := exec.Command("docker", "volume", "ls", "-q", "--filter", filter).Output()
	if names := strings.Fields(string(out)); len(names) > 0 {
		gc, err := docker.NewCollector(docker.DefaultSocket, nil, nil)
		if err != nil {
			return
		}
		defer gc.Close()
		disk := func(n string) int {
			if strings.HasPrefix(n, docker.DiskPrefix) {
				return 1
			}
			return 0
		}
		slices.SortFunc(names, func(a, b string) int { return disk(a) - disk(b) }) // homes before disks
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for _, n := range names {
			gc.RemoveVolume(ctx, n)
		}
	}
}

// deployment returns the deployment id the supervisor logged at start.
func (p *proc) deployment() string {
	p.t.Helper()
	// The supervisor answers before its "listening" line reaches the log.
	var rest string
	if !testkit.Poll(10*time.Second, func() bool {
		var ok bool
		_, rest, ok = strings.Cut(p.logs.String(), "deployment=")
		return ok && strings.ContainsAny(rest, " \n")
	}) {
		p.t.Fatalf("no deployment id in the log:\n%s", p.logs.String())
	}
	return strings.Fields(rest)[0]
}

// TestCrashDuringCreate kills the supervisor with SIGKILL at several points
// of a computer's creation, restarts it, and checks that the session is
// settled (adopted, or uncertain until confirmed), that nothing is left
// behind, and that the budget adds up.
func TestCrashDuringCreate(t *testing.T) {
	requireDocker(t, "berth/test:latest")
	light(t)
	for _, after := range []time.Duration{50 * time.Millisecond, 300 * time.Millisecond, 700 * time.Millisecond} {
		t.Run(after.String(), func(t *testing.T) {
			dir := t.TempDir()
			p := runSupervisor(t, dir)
			p.must("POST", "/v1/agents", map[string]any{"id": "crash", "name": "crash"}, 201, nil)
			p.must("POST", "/v1/computers", map[string]any{"agent": "crash", "provider": "docker", "leaseSeconds": 600, "dailySeconds": 3600}, 201, nil)
			go p.call("POST", "/v1/agents/crash/computer/start", "start-1", nil, nil)
			time.Sleep(after)
			p.kill()

			p = runSupervisor(t, dir)
			var st status
			testkit.Eventually(t, 90*time.Second, "the session no longer starting after the restart", func() bool {
				st = status{}
				p.must("GET", "/v1/agents/crash/computer", nil, 200, &st)
				return st.Session == nil || st.Session.State != "starting"
			})
			t.Logf("after restart: session %+v budget %+v", st.Session, st.Budget)
			if st.Session != nil {
				switch st.Session.State {
				case "running":
					var x execResult
					p.must("POST", "/v1/agents/crash/computer/exec", map[string]any{"command": "echo alive"}, 200, &x)
					if x.Stdout != "alive\n" {
						t.Fatalf("adopted computer: %+v", x)
					}
					p.must("POST", "/v1/agents/crash/computer/stop", nil, 200, nil)
				case "uncertain":
					if code, _ := p.call("POST", "/v1/agents/crash/computer/start", "", nil, nil); code != 409 {
						t.Fatalf("start while uncertain: %d, want 409", code)
					}
					p.must("POST", "/v1/agents/crash/computer/confirm-cleanup", map[string]any{"providerCleanupConfirmed": true}, 200, nil)
				default:
					t.Fatalf("unexpected state %s", st.Session.State)
				}
			}
			p.must("GET", "/v1/agents/crash/computer", nil, 200, &st)
			if st.Session != nil || st.Budget.ReservedSeconds != 0 || st.Budget.UsedSeconds+st.Budget.LeftSeconds != st.Budget.DailySeconds {
				t.Fatalf("after settling: session %+v budget %+v", st.Session, st.Budget)
			}
			dep := p.deployment()
			waitGone(t, dep)
			// A new start works and makes exactly one computer.
			p.must("POST", "/v1/agents/crash/computer/start", nil, 200, nil)
			p.must("POST", "/v1/agents/crash/computer/stop", nil, 200, nil)
			waitGone(t, dep)
		})
	}
}

// waitGone waits until the deployment has no Docker objects left.
func waitGone(t *testing.T, dep string) {
	t.Helper()
	if dep == "" {
		return
	}
	var left string
	if !testkit.Poll(30*time.Second, func() bool { left = deploymentObjects(t, dep); return left == "" }) {
		t.Fatalf("left behind: %s", left)
	}
}

// TestCrashDuringExec kills the supervisor while a command runs, restarts
// it, and retries the call with the same Idempotency-Key: the answer is
// uncertain and the command is not run again.
func TestCrashDuringExec(t *testing.T) {
	requireDocker(t, "berth/test:latest")
	light(t)
	dir := t.TempDir()
	p := runSupervisor(t, dir)
	p.must("POST", "/v1/agents", map[string]any{"id": "crash", "name": "crash"}, 201, nil)
	p.must("POST", "/v1/computers", map[string]any{"agent": "crash", "provider": "docker", "leaseSeconds": 600, "dailySeconds": 3600}, 201, nil)
	var sess session
	p.must("POST", "/v1/agents/crash/computer/start", nil, 200, &sess)
	cmd := map[string]any{"command": "echo started >> runs; sleep 2; echo finished >> runs"}
	go p.call("POST", "/v1/agents/crash/computer/exec", "exec-1", cmd, nil)
	time.Sleep(700 * time.Millisecond)
	p.kill()

	p = runSupervisor(t, dir)
	var st status
	p.must("GET", "/v1/agents/crash/computer", nil, 200, &st)
	if st.Session == nil || st.Session.ID != sess.ID || st.Session.State != "running" {
		t.Fatalf("after restart the session is %+v, want %s running", st.Session, sess.ID)
	}
	var x execResult
	code, err := p.call("POST", "/v1/agents/crash/computer/exec", "exec-1", cmd, &x)
	if err != nil || code != 200 || !x.Uncertain {
		t.Fatalf("retry of the lost exec: %d %v %+v", code, err, x)
	}
	time.Sleep(2500 * time.Millisecond) // past the command's own end
	var runs execResult
	p.must("POST", "/v1/agents/crash/computer/exec", map[string]any{"command": "grep -c started runs"}, 200, &runs)
	if strings.TrimSpace(runs.Stdout) != "1" {
		t.Fatalf("the command started %q times, want exactly once", runs.Stdout)
	}
	// The retry keeps its answer.
	var again execResult
	p.call("POST", "/v1/agents/crash/computer/exec", "exec-1", cmd, &again)
	if !again.Uncertain {
		t.Fatalf("second retry: %+v", again)
	}
	p.must("GET", "/v1/agents/crash/computer", nil, 200, &st)
	if st.Budget.ReservedSeconds != 600 || st.Budget.LeftSeconds != 3000 {
		t.Fatalf("budget after restart: %+v", st.Budget)
	}
	p.must("POST", "/v1/agents/crash/computer/stop", nil, 200, nil)
	waitGone(t, p.deployment())
}
