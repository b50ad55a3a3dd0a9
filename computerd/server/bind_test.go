package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/token"
)

// newWaiting starts an unbound computerd that waits for the bind secret.
func newWaiting(t *testing.T, secret string) (*httptest.Server, string) {
	t.Helper()
	home := t.TempDir()
	srv := New(Config{BindHash: token.Hash(secret), Home: home, ComputerID: "c-pool", Version: "test"})
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		ts.Close()
		srv.Close()
	})
	return ts, home
}

func bindCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func wantBindError(t *testing.T, err error, status int, code, what string) {
	t.Helper()
	ae, ok := err.(*computerd.APIError)
	if !ok {
		t.Fatalf("%s: error %v (%T), want an API error %d %s", what, err, err, status, code)
	}
	if ae.Status != status || ae.Code != code {
		t.Fatalf("%s: %d %s (%s), want %d %s", what, ae.Status, ae.Code, ae.Message, status, code)
	}
}

// TestBindOnce: a waiting computer serves only health and bind; the holder
// of the bind secret binds it once, after which only the session's token
// works, the environment reaches commands, and every further bind (with the
// secret, with the session's token, concurrently) is refused.
func TestBindOnce(t *testing.T) {
	ctx := bindCtx(t)
	secret, session := "bind-secret-0123456789abcdef0123456789", computerToken(t, "c-pool")
	ts, _ := newWaiting(t, secret)
	anon := computerd.NewClient(ts.URL, "")
	if h, err := anon.Health(ctx); err != nil || h.ComputerID != "c-pool" {
		t.Fatalf("health while waiting: %+v %v", h, err)
	}

	// Before the bind nothing else answers, whatever token is offered.
	for _, tok := range []string{secret, session, ""} {
		c := computerd.NewClient(ts.URL, tok)
		_, err := c.Exec(ctx, computerd.ExecRequest{Command: "echo hi", TimeoutMs: 5000})
		wantBindError(t, err, http.StatusUnauthorized, computerd.CodeUnauthorized, "exec before the bind")
		_, err = c.Read(ctx, "/etc/hostname", 0, 0)
		wantBindError(t, err, http.StatusUnauthorized, computerd.CodeUnauthorized, "read before the bind")
	}

	// Wrong secret, bad token hash, computerd's own settings: refused, and
	// the computer is still waiting.
	req := computerd.BindRequest{TokenHash: token.Hash(session), Env: map[string]string{"HTTP_PROXY": "http://c-pool:pw@proxy:3128"}}
	_, err := computerd.NewClient(ts.URL, "not-the-secret").Bind(ctx, req)
	wantBindError(t, err, http.StatusUnauthorized, computerd.CodeUnauthorized, "bind with a wrong secret")
	_, err = computerd.NewClient(ts.URL, secret).Bind(ctx, computerd.BindRequest{TokenHash: "abc"})
	wantBindError(t, err, http.StatusBadRequest, computerd.CodeBadRequest, "bind with a short token hash")
	_, err = computerd.NewClient(ts.URL, secret).Bind(ctx, computerd.BindRequest{TokenHash: token.Hash(session),
		Env: map[string]string{computerd.EnvTokenHash: strings.Repeat("0", 64)}})
	wantBindError(t, err, http.StatusBadRequest, computerd.CodeBadRequest, "bind setting computerd's own variable")

	// Many binds at once: exactly one wins.
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		won, got int
	)
	for range 8 {
		wg.Go(func() {
			_, err := computerd.NewClient(ts.URL, secret).Bind(ctx, req)
			mu.Lock()
			defer mu.Unlock()
			got++
			if err == nil {
				won++
				return
			}
			if ae, ok := err.(*computerd.APIError); !ok || ae.Status != http.StatusConflict || ae.Code != computerd.CodeAlreadyBound {
				t.Errorf("concurrent bind: %v, want 409 %s", err, computerd.CodeAlreadyBound)
			}
		})
	}
	wg.Wait()
	if won != 1 || got != 8 {
		t.Fatalf("%d of %d concurrent binds won, want exactly 1", won, got)
	}

	// Bound: the session's token works and commands see the bind's env;
	// the secret is worth nothing any more.
	c := computerd.NewClient(ts.URL, session)
	x, err := c.Exec(ctx, computerd.ExecRequest{Command: `printf '%s|%s|%s' "$HTTP_PROXY" "$` + computerd.EnvBindHash + `" "$` + computerd.EnvTokenHash + `"`, TimeoutMs: 10000})
	if err != nil || x.ExitCode != 0 {
		t.Fatalf("exec after the bind: %+v %v", x, err)
	}
	if x.Stdout != "http://c-pool:pw@proxy:3128||" {
		t.Errorf("command environment = %q, want the bind's proxy and no computerd settings", x.Stdout)
	}
	_, err = computerd.NewClient(ts.URL, secret).Exec(ctx, computerd.ExecRequest{Command: "true", TimeoutMs: 5000})
	wantBindError(t, err, http.StatusUnauthorized, computerd.CodeUnauthorized, "exec with the bind secret")
	for _, tok := range []string{secret, session} {
		_, err = computerd.NewClient(ts.URL, tok).Bind(ctx, computerd.BindRequest{TokenHash: token.Hash("other")})
		wantBindError(t, err, http.StatusConflict, computerd.CodeAlreadyBound, "second bind")
	}
	if _, err := c.Exec(ctx, computerd.ExecRequest{Command: "true", TimeoutMs: 5000}); err != nil {
		t.Errorf("the session's token after refused binds: %v", err)
	}
}

// TestBindStartedBound: a computer started with its token refuses binds.
func TestBindStartedBound(t *testing.T) {
	h := newHarness(t)
	_, err := computerd.NewClient(h.ts.URL, h.token).Bind(bindCtx(t), computerd.BindRequest{TokenHash: token.Hash("x")})
	wantBindError(t, err, http.StatusConflict, computerd.CodeAlreadyBound, "bind of a computer started bound")
}

// A waiting desktop computer's health answer says where its screen is,
// without a token; a computer without a desktop says nothing of one.
func TestHealthScreen(t *testing.T) {
	ctx := bindCtx(t)
	var state atomic.Value
	state.Store(computerd.ScreenStarting)
	srv := New(Config{BindHash: token.Hash("bind-secret-0123456789abcdef0123456789"), Home: t.TempDir(), ComputerID: "c-desk",
		Screen: func() string { return state.Load().(string) }})
	ts := httptest.NewServer(srv)
	t.Cleanup(func() { ts.Close(); srv.Close() })
	anon := computerd.NewClient(ts.URL, "")
	for _, want := range []string{computerd.ScreenStarting, computerd.ScreenReady} {
		state.Store(want)
		if h, err := anon.Health(ctx); err != nil || h.Screen != want {
			t.Fatalf("health: %+v %v, want screen %q", h, err, want)
		}
	}
	plain, _ := newWaiting(t, "bind-secret-0123456789abcdef0123456789")
	if h, err := computerd.NewClient(plain.URL, "").Health(ctx); err != nil || h.Screen != "" {
		t.Fatalf("health without a desktop: %+v %v", h, err)
	}
}
