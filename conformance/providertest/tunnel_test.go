package providertest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/agent/tunnel"
	"github.com/berthdev/berth/conformance/providertest"
	"github.com/berthdev/berth/internal/httpjson"
	"github.com/berthdev/berth/providers/docker"
	ptunnel "github.com/berthdev/berth/providers/tunnel"
)

// tunnelURL is what the stand-in cloudflared prints.
const tunnelURL = "https://conformance-runner-7.trycloudflare.com"

// standinCloudflared writes a script that prints a quick tunnel's banner,
// as cloudflared does, and waits to be killed.
func standinCloudflared(t providertest.T) string {
	path := filepath.Join(t.TempDir(), tunnel.Cloudflared)
	script := fmt.Sprintf("#!/bin/sh\necho 'INF |  Your quick Tunnel has been created! Visit it at:  |' >&2\necho 'INF |  %s  |' >&2\nexec sleep 3600\n", tunnelURL)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatalf("stand-in cloudflared: %v", err)
	}
	return path
}

// runnerLink is the network between the supervisor and a runner: requests
// for the quick tunnel's URL go to the runner's loopback port, as through
// the real tunnel, and the runner's bad days are injected on the way.
type runnerLink struct {
	local *url.URL
	base  *http.Transport

	mu          sync.Mutex
	loseClaims  int
	failResets  int
	refuseCreds bool
}

func (l *runnerLink) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Host != strings.TrimPrefix(tunnelURL, "https://") {
		return nil, fmt.Errorf("runner link: no route to %s", r.URL.Host)
	}
	r = r.Clone(r.Context())
	r.URL.Scheme, r.URL.Host, r.Host = l.local.Scheme, l.local.Host, ""
	l.mu.Lock()
	refuse := l.refuseCreds && r.URL.Path != "/healthz"
	lose := r.URL.Path == ptunnel.ClaimPath && l.loseClaims > 0
	if lose {
		l.loseClaims--
	}
	fail := r.URL.Path == ptunnel.ResetPath && l.failResets > 0
	if fail {
		l.failResets--
	}
	l.mu.Unlock()
	switch {
	case refuse:
		return answer(r, http.StatusUnauthorized, "unauthorized", "missing or wrong bearer token (injected)"), nil
	case fail:
		return answer(r, http.StatusServiceUnavailable, "unavailable", "could not destroy the computer (injected)"), nil
	}
	resp, err := l.base.RoundTrip(r)
	if err == nil && lose {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil, errors.New("connection reset before the claim's reply (injected)")
	}
	return resp, err
}

func answer(r *http.Request, status int, code, msg string) *http.Response {
	b, _ := json.Marshal(httpjson.ErrorBody{Error: &httpjson.Error{Code: code, Message: msg}})
	return &http.Response{StatusCode: status, Status: http.StatusText(status), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(string(b))),
		ContentLength: int64(len(b)), Request: r}
}

func (l *runnerLink) LoseNextCreateReply()  { l.mu.Lock(); l.loseClaims++; l.mu.Unlock() }
func (l *runnerLink) FailNextDeletes(n int) { l.mu.Lock(); l.failResets += n; l.mu.Unlock() }
func (l *runnerLink) RefuseCredentials(on bool) {
	l.mu.Lock()
	l.refuseCreds = on
	l.mu.Unlock()
}

// logTo writes a runner's logs to the test's log.
type logTo struct{ t providertest.T }

func (w logTo) Write(p []byte) (int, error) {
	w.t.Logf("%s", strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// TestTunnel runs the suite against providers/tunnel and a `berth agent
// tunnel` runner in this process, on the real engine, exposed by a
// stand-in cloudflared; the runner's bad days are injected on the link to
// it.
//
// Reconcile holds two sessions at once on one connection, and a runner
// serves one session at a time (a second claim is refused with
// runner_in_use): ReconcileOneAtATime, the same checks one session after
// the other, runs in its place.
func TestTunnel(t *testing.T) {
	_, host := engine(t)
	h := tunnelHarness(host)
	for _, sc := range providertest.Scenarios() {
		if sc.Name == "Reconcile" {
			sc = providertest.ReconcileOneAtATime
		}
		t.Run(sc.Name, func(t *testing.T) { sc.Run(t, h) })
	}
}

func tunnelHarness(host string) providertest.Harness {
	return providertest.Harness{
		ID:           ptunnel.ID,
		ReadyTimeout: 60 * time.Second,
		New: func(t providertest.T, log *slog.Logger) providertest.Target {
			ctx, cancel := context.WithCancel(context.Background())
			ready, done := make(chan tunnel.Info, 1), make(chan error, 1)
			cf := standinCloudflared(t)
			go func() {
				done <- tunnel.Run(ctx, tunnel.Options{
					Lifetime: time.Hour, ConnectionFile: filepath.Join(t.TempDir(), "connection.json"),
					LookPath: func(string) (string, error) { return cf, nil },
					Docker:   docker.Options{Host: host, HeadlessImage: dockerImage, DesktopImage: dockerImage, MemoryMB: 256},
					Logger:   slog.New(slog.NewTextHandler(logTo{t}, nil)).With("side", "runner"),
					Ready:    func(i tunnel.Info) { ready <- i },
				})
			}()
			t.Cleanup(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("runner: %v", err)
				}
			})
			var info tunnel.Info
			select {
			case info = <-ready:
			case err := <-done:
				done <- err
				t.Fatalf("runner ended before it was ready: %v", err)
			case <-time.After(2 * time.Minute):
				t.Fatalf("runner not ready in 2 minutes")
			}
			if info.URL != tunnelURL {
				t.Fatalf("runner URL %q, want the stand-in's %q", info.URL, tunnelURL)
			}
			local, _ := url.Parse(info.LocalURL)
			base := &http.Transport{}
			t.Cleanup(base.CloseIdleConnections)
			link := &runnerLink{local: local, base: base}
			return providertest.Target{
				Provider:    ptunnel.New(ptunnel.Options{Transport: link, Logger: log}),
				Credentials: map[string]string{ptunnel.CredURL: info.URL, ptunnel.CredAPIKey: info.Token},
				// The runner's URL is no secret (it is logged and
				// answered as the endpoint); its token is.
				Secrets: []string{info.Token},
				Faults:  link,
				Exists: func(ctx context.Context, label, value string) (bool, error) {
					st, err := runnerState(ctx, base, info)
					return st.Claimed && st.Labels[label] == value, err
				},
			}
		},
	}
}

// runnerState asks the runner itself, not through the link.
func runnerState(ctx context.Context, c *http.Transport, info tunnel.Info) (ptunnel.RunnerState, error) {
	var st ptunnel.RunnerState
	req, err := http.NewRequestWithContext(ctx, "GET", info.LocalURL+ptunnel.RunnerPath, nil)
	if err != nil {
		return st, err
	}
	req.Header.Set("Authorization", "Bearer "+info.Token)
	resp, err := c.RoundTrip(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("runner state: %s", resp.Status)
	}
	return st, json.NewDecoder(io.LimitReader(resp.Body, ptunnel.MaxRunnerBytes)).Decode(&st)
}
