// Package browsertest holds what the browser providers' tests share: a
// real headless Chromium behind each fake session, a supervisor behind
// its REST API with the provider under test, and the checks every browser
// session passes (driven over its CDP URL, exec and files refused).
package browsertest

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthdev/berth/conformance/hostedtest"
	"github.com/berthdev/berth/providers"
)

// ChromiumPath is the browser the fakes run.
const ChromiumPath = "/usr/bin/chromium"

// RequireChromium skips t where ChromiumPath is missing, and fails it
// instead when BERTH_REQUIRE_DOCKER is set (as CI sets it), so that CI
// never skips the browser tests.
func RequireChromium(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(ChromiumPath); err != nil {
		if os.Getenv("BERTH_REQUIRE_DOCKER") != "" {
			t.Fatalf("%s is missing: apt-get install chromium", ChromiumPath)
		}
		t.Skipf("%s is missing: apt-get install chromium to run this test", ChromiumPath)
	}
}

// Chromium is a headless Chromium with an empty profile and DevTools on a
// loopback port of its own.
type Chromium struct {
	WS   string // ws://127.0.0.1:PORT/devtools/browser/ID
	HTTP string // http://127.0.0.1:PORT, DevTools discovery
	cmd  *exec.Cmd
	dir  string
	done chan struct{} // closed when the stderr reader has returned
}

// StartChromium runs a Chromium and returns once its DevTools endpoint
// listens (within 60 s or ctx).
func StartChromium(ctx context.Context) (*Chromium, error) {
	dir, err := os.MkdirTemp("", "berth-chromium-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(ChromiumPath, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--disable-crash-reporter", "--disable-breakpad",
		"--user-data-dir="+dir, "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", "about:blank")
	// Its own process group, so that Stop ends the helpers it forks too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c := &Chromium{cmd: cmd, dir: dir, done: make(chan struct{})}
	found := make(chan string, 1)
	go func() {
		defer close(c.done)
		defer close(found)
		sc := bufio.NewScanner(stderr)
		sent := false
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "DevTools listening on "); ok && !sent {
				found <- strings.TrimSpace(rest)
				sent = true
			}
		}
	}()
	timer := time.NewTimer(60 * time.Second)
	defer timer.Stop()
	select {
	case ws, ok := <-found:
		if !ok {
			c.Stop()
			return nil, errors.New("chromium exited before DevTools listened")
		}
		c.WS = ws
		host, _, _ := strings.Cut(strings.TrimPrefix(ws, "ws://"), "/")
		c.HTTP = "http://" + host
		return c, nil
	case <-timer.C:
		c.Stop()
		return nil, errors.New("chromium's DevTools did not listen within 60 s")
	case <-ctx.Done():
		c.Stop()
		return nil, ctx.Err()
	}
}

// Stop kills the browser and the helpers it forked (its process group,
// numbered by its PID), waits for it and its stderr reader, and removes
// its profile.
func (c *Chromium) Stop() {
	if p := c.cmd.Process; p != nil {
		syscall.Kill(-p.Pid, syscall.SIGKILL)
		c.cmd.Wait()
	}
	<-c.done
	for range 50 {
		if os.RemoveAll(c.dir) == nil {
			if _, err := os.Stat(c.dir); os.IsNotExist(err) {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Session is a browser provider as the tests drive it.
type Session interface {
	providers.Provider
	providers.Transporter
}

// BenchCycle times one browser session's whole life through p (create,
// one health check through its transport, release) beside a bare launch
// and kill of the same Chromium, with hostedtest.BenchCycle: a browser
// session has no exec, so the browser's own start is the floor it is
// measured against.
func BenchCycle(b *testing.B, p Session, creds map[string]string) {
	b.Helper()
	hostedtest.BenchCycle(b, func() time.Duration { return sessionCycle(b, p, creds) }, func() time.Duration {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		start := time.Now()
		c, err := StartChromium(ctx)
		if err != nil {
			b.Fatal(err)
		}
		c.Stop()
		return time.Since(start)
	})
}

func sessionCycle(b *testing.B, p Session, creds map[string]string) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec := providers.Spec{ComputerID: "bench" + rand.Text()[:8], AttemptID: "a_" + rand.Text()[:8], AgentID: "bench",
		Deployment: "d_bench", Lease: 5 * time.Minute, Credentials: creds}
	start := time.Now()
	m, err := p.Create(ctx, spec)
	if err != nil {
		b.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", m.Endpoint+"/healthz", nil)
	resp, err := p.Transport(m, creds).RoundTrip(req)
	if err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("health: %s", resp.Status)
	}
	if err := p.Destroy(providers.WithCredentials(ctx, creds), m.ID); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}
