package main

import (
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/testkit"
)

// computerdEnv sets what run reads, listening on a free loopback port,
// and returns that address.
func computerdEnv(t *testing.T, expires string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	t.Setenv(computerd.EnvTokenHash, strings.Repeat("ab", 32))
	t.Setenv(computerd.EnvBindHash, "")
	t.Setenv(computerd.EnvComputerID, "c-life")
	t.Setenv(computerd.EnvListen, addr)
	t.Setenv(computerd.EnvExpiresAt, expires)
	t.Setenv("HOME", t.TempDir())
	return addr
}

// At BERTH_EXPIRES_AT computerd shuts down by itself and exits cleanly;
// until then it serves, and commands never see the variable.
func TestLifetimeEnds(t *testing.T) {
	start := time.Now()
	end := start.Add(1500 * time.Millisecond)
	addr := computerdEnv(t, end.UTC().Format(time.RFC3339Nano))
	done := make(chan error, 1)
	go func() { done <- run(slog.New(slog.DiscardHandler)) }()

	testkit.Eventually(t, 5*time.Second, "computerd to answer", func() bool {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	if v, ok := os.LookupEnv(computerd.EnvExpiresAt); ok {
		t.Errorf("%s=%q is left for commands to inherit", computerd.EnvExpiresAt, v)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		if early := time.Until(end); early > 100*time.Millisecond {
			t.Fatalf("stopped %v before its lifetime was over", early)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("computerd still runs 13 s after its lifetime was over")
	}
	if _, err := http.Get("http://" + addr + "/healthz"); err == nil {
		t.Error("computerd still answers after it stopped")
	}
}

// A lifetime that does not parse stops computerd before it serves, naming
// the variable and the form it takes.
func TestLifetimeMalformed(t *testing.T) {
	computerdEnv(t, "in an hour")
	err := run(slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), computerd.EnvExpiresAt+" must be an RFC 3339 time") {
		t.Fatalf("run with a malformed lifetime: %v", err)
	}
}
