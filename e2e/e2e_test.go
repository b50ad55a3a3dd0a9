// Package e2e holds the tests that cross parts: a real supervisor with the
// real Docker provider and the computer images, driven through the REST API
// and the berth CLI.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/berthdev/berth/internal/pgtest"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/supervisor/daemon"

	_ "github.com/berthdev/berth/providers/standard"
)

// berthBin is the CLI built once for the tests that run it.
var berthBin string

// The tests run in two lanes side by side. Tests that keep the cores busy
// (many computers at once, a pool refilling under a burst) or watch a
// screen or a stream, where a late frame is what they would catch, call
// heavy and run one at a time. The others call light and run up to
// lightTests at once beside the heavy one: they spend most of their time
// waiting (on real timers: a lease and its grace running out, a killed
// supervisor's claim; on archives and relays) or make a few calls on a
// computer or two. To Go they are all parallel tests, so -test.parallel is
// set high enough for every test to reach its lane unless it is given;
// given, it still bounds them all.
const (
	lightTests = 3
	laneSlots  = 64
)

var (
	heavyLane = make(chan struct{}, 1)
	lightLane = make(chan struct{}, lightTests)
)

// heavy runs t in the heavy lane: one test at a time.
func heavy(t *testing.T) { lane(t, heavyLane) }

// light runs t in the light lane, beside the heavy one.
func light(t *testing.T) { lane(t, lightLane) }

// lane waits for a turn in l, which t holds until its cleanups are done.
func lane(t *testing.T, l chan struct{}) {
	t.Helper()
	t.Parallel()
	l <- struct{}{}
	t.Cleanup(func() { <-l })
}

func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", strconv.Itoa(laneSlots))
	}
	dir, err := os.MkdirTemp("", "berth-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	berthBin = filepath.Join(dir, "berth")
	out, err := exec.Command("go", "build", "-o", berthBin, "../cmd/berth").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build berth: %v\n%s", err, out)
		os.Exit(1)
	}
	testkit.VerifyTestMain(pgtest.Wrap(m), goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}

// requireDocker skips when no engine answers, unless BERTH_REQUIRE_DOCKER=1
// (as `make test` and CI set), where it fails instead.
func requireDocker(t testing.TB, images ...string) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs Docker; run without -short (make test)")
	}
	testkit.RequireDocker(t, images...)
}

type super struct {
	t     testing.TB
	url   string
	token string
	d     *daemon.Daemon
}

// startSupervisor runs an in-process supervisor with the docker provider,
// computers made from image.
func startSupervisor(t testing.TB, image string) *super {
	t.Helper()
	return startSupervisorEgress(t, image, daemon.EgressOptions{Listen: ":0"})
}

// startSupervisorEgress is startSupervisor with egress proxy options.
func startSupervisorEgress(t testing.TB, image string, eg daemon.EgressOptions, providers ...string) *super {
	t.Helper()
	// One network made ahead per supervisor: tests run several at once.
	s, _ := serveDaemon(t, daemon.Options{Egress: eg, Providers: providers},
		map[string]string{"COMPUTER_IMAGE_HEADLESS": image, "COMPUTER_MEMORY_MB": "512", "COMPUTER_NETWORK_POOL": "1"})
	return s
}

// serveDaemon runs an in-process supervisor with options o (a fresh data
// folder, the e2e operator token, settings from env and, unless o names
// one, a logger into the test's output) on a free loopback port. stop
// ends it; it also ends with the test.
func serveDaemon(t testing.TB, o daemon.Options, env map[string]string) (s *super, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	o.DataDir, o.Token = t.TempDir(), "e2e-operator-token-0123456789"
	o.Getenv = func(k string) string { return env[k] }
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	}
	d, err := daemon.New(ctx, o)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.ServeListener(ctx, ln, 5*time.Second, nil) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
			d.Close()
		})
	}
	t.Cleanup(stop)
	return &super{t: t, url: "http://" + ln.Addr().String(), token: d.Token, d: d}, stop
}

func (s *super) call(method, path string, body any, out any) int {
	s.t.Helper()
	status, err := callAPI(s.url, s.token, method, path, "", body, out)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	return status
}

// callAPI sends a JSON request with the operator token (and an
// Idempotency-Key when key is set), decodes the answer into out, and
// returns the status.
func callAPI(base, token, method, path, key string, body, out any) (int, error) {
	return callAPIWith(http.DefaultClient, base, token, method, path, key, body, out)
}

// callAPIWith is callAPI through hc.
func callAPIWith(hc *http.Client, base, token, method, path, key string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, base+path, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil {
		json.Unmarshal(raw, out)
	}
	return resp.StatusCode, nil
}

func (s *super) must(method, path string, body any, want int, out any) {
	s.t.Helper()
	if got := s.call(method, path, body, out); got != want {
		s.t.Fatalf("%s %s: status %d, want %d", method, path, got, want)
	}
}

type execResult struct {
	ExitCode  int    `json:"exitCode"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	Truncated bool   `json:"truncated"`
	TimedOut  bool   `json:"timedOut"`
	Uncertain bool   `json:"uncertain"`
}

func (s *super) exec(agent, cmd string) execResult {
	s.t.Helper()
	var x execResult
	s.must("POST", "/v1/agents/"+agent+"/computer/exec", map[string]any{"command": cmd, "timeoutSeconds": 60}, 200, &x)
	return x
}

// managed lists the Docker objects carrying the session's label.
func managed(t *testing.T, session string) string {
	t.Helper()
	var all []string
	for _, kind := range [][]string{{"ps", "-a", "-q"}, {"network", "ls", "-q"}, {"volume", "ls", "-q"}} {
		args := append(kind, "--filter", "label=dev.berth.session="+session)
		out, err := exec.Command("docker", args...).Output()
		if err != nil {
			t.Fatalf("docker %v: %v", args, err)
		}
		if s := strings.TrimSpace(string(out)); s != "" {
			all = append(all, kind[0]+": "+s)
		}
	}
	return strings.Join(all, "; ")
}
