package server

import (
	"net/http/httptest"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/berthdev/berth/computerd/browser"
	"github.com/berthdev/berth/internal/httpjson"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/internal/token"
)

// TestBrowserMounted serves the browser tools behind computerd's token,
// with a proxy from the commands' environment, and stops the browser when
// the server closes; the reaper leaves the running browser alone.
func TestBrowserMounted(t *testing.T) {
	const chromium = "/usr/bin/chromium"
	if _, err := os.Stat(chromium); err != nil {
		testkit.Missing(t, testkit.DockerEnv, chromium+" is missing", "apt-get install chromium")
	}
	tok := computerToken(t, "c-browser")
	srv := New(Config{
		TokenHash: token.Hash(tok), Home: t.TempDir(), ComputerID: "c-browser", Logger: testLogger(t),
		Env:     map[string]string{"NO_PROXY": "127.0.0.1"},
		Browser: &browser.LauncherConfig{Binary: chromium, Flags: []string{"--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"}, ProfileRoot: t.TempDir()},
	})
	ts := httptest.NewServer(srv)
	defer ts.Close()
	closed := false
	defer func() {
		if !closed {
			srv.Close()
		}
	}()
	ctx := testkit.ContextTimeout(t, 2*time.Minute)

	_, err := browser.NewClient(ts.URL, "wrong", ts.Client(), nil).Tabs(ctx, browser.TabsRequest{})
	if he, ok := err.(*httpjson.Error); !ok || he.Status != 401 {
		t.Fatalf("tabs with a wrong token = %v", err)
	}
	c := browser.NewClient(ts.URL, tok, ts.Client(), nil)
	tabs, err := c.Tabs(ctx, browser.TabsRequest{})
	if err != nil || len(tabs.Tabs) != 1 {
		t.Fatalf("tabs = %+v, %v", tabs, err)
	}
	pid := srv.browser.PID()
	srv.reap()
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the browser %d is gone after a reap: %v", pid, err)
	}
	srv.Close()
	closed = true
	if err := syscall.Kill(pid, 0); err == nil {
		t.Fatalf("the browser %d still runs after Close", pid)
	}
	if _, err := c.Tabs(ctx, browser.TabsRequest{}); !browser.IsBrowserFailed(err) {
		t.Fatalf("tabs after Close = %v", err)
	}
}
