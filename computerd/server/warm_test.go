package server

import (
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/token"
)

// TestWarmLeavesThePoolComputerAsItWas: a waiting computer that warmed up
// is still unbound, has no command left, takes its one bind, and runs its
// session's commands.
func TestWarmLeavesThePoolComputerAsItWas(t *testing.T) {
	ctx := bindCtx(t)
	secret, session := "bind-secret-0123456789abcdef0123456789", computerToken(t, "c-pool")
	home := t.TempDir()
	srv := New(Config{BindHash: token.Hash(secret), Home: home, ComputerID: "c-pool", Version: "test"})
	t.Cleanup(func() { srv.Close() })
	if err := srv.Warm(ctx); err != nil {
		t.Fatal(err)
	}
	if srv.Bound() {
		t.Fatal("bound by the warm-up")
	}
	srv.mu.Lock()
	left := len(srv.children)
	srv.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d commands left by the warm-up", left)
	}

	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	b := computerd.NewClient(ts.URL, secret)
	if _, err := b.Bind(ctx, computerd.BindRequest{TokenHash: token.Hash(session), Env: map[string]string{"GREETING": "hi"}}); err != nil {
		t.Fatalf("bind after the warm-up: %v", err)
	}
	x, err := computerd.NewClient(ts.URL, session).Exec(ctx, computerd.ExecRequest{Command: `echo "$GREETING"`, TimeoutMs: 10000})
	if err != nil || x.Stdout != "hi\n" || x.ExitCode != 0 {
		t.Fatalf("first exec after the bind: %+v %v", x, err)
	}
}

// TestWarmSaysWhatFailed: a warm-up that cannot run its command says so.
func TestWarmSaysWhatFailed(t *testing.T) {
	srv := New(Config{BindHash: token.Hash("s"), Home: filepath.Join(t.TempDir(), "missing"), ComputerID: "c-pool", Version: "test"})
	t.Cleanup(func() { srv.Close() })
	err := srv.Warm(bindCtx(t))
	if err == nil || !strings.Contains(err.Error(), "warm: run true") {
		t.Fatalf("warm-up in a missing home: %v", err)
	}
}
