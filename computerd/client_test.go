package computerd_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/computerd/server"
	"github.com/berthdev/berth/internal/httpjson"
	"github.com/berthdev/berth/internal/syncbuf"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/internal/token"
)

func TestMain(m *testing.M) {
	testkit.VerifyTestMain(m)
}

func testContext(t *testing.T) context.Context {
	return testkit.ContextTimeout(t, 30*time.Second)
}

// fake serves one handler and returns a client for it.
func fake(t *testing.T, h http.HandlerFunc, opts ...computerd.Option) *computerd.Client {
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return computerd.NewClient(ts.URL+"/", "tok", append([]computerd.Option{computerd.WithHTTPClient(ts.Client())}, opts...)...)
}

func TestClientAgainstServer(t *testing.T) {
	ctx := testContext(t)
	srv := server.New(server.Config{TokenHash: token.Hash("tok"), Home: t.TempDir(), Version: "v1"})
	ts := httptest.NewServer(srv)
	defer ts.Close()
	defer srv.Close()
	c := computerd.NewClient(ts.URL, "tok", computerd.WithHTTPClient(ts.Client()))

	if h, err := c.Health(ctx); err != nil || h.Version != "v1" {
		t.Fatalf("Health = %+v, %v", h, err)
	}
	res, err := c.Exec(ctx, computerd.ExecRequest{Command: "echo hi", TimeoutMs: 5000})
	if err != nil || res.Stdout != "hi\n" {
		t.Fatalf("Exec = %+v, %v", res, err)
	}
	w, err := c.Write(ctx, computerd.WriteRequest{Path: "f.txt", Content: "<b>&</b>"})
	if err != nil || w.Bytes != 8 {
		t.Fatalf("Write = %+v, %v", w, err)
	}
	r, err := c.Read(ctx, "f.txt", 3, 1)
	if err != nil || r.Content != "&" || r.NextOffset != 4 || !r.Truncated {
		t.Fatalf("Read = %+v, %v", r, err)
	}
	if err := c.Kill(ctx, computerd.KillRequest{PID: 1 << 30}); !computerd.IsAPIError(err) {
		t.Errorf("Kill of no process: %v, want an API error", err)
	}
}

func TestClientAPIError(t *testing.T) {
	ctx := testContext(t)
	c := fake(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnprocessableEntity)
		io.WriteString(w, `{"error":{"code":"not_utf8","message":"x is not UTF-8 text"}}`)
	})
	_, err := c.Read(ctx, "x", 0, 0)
	var ae *computerd.APIError
	if !errors.As(err, &ae) || !computerd.IsAPIError(err) {
		t.Fatalf("err = %v (%T), want *APIError", err, err)
	}
	if ae.Status != 422 || ae.Code != computerd.CodeNotUTF8 || ae.Message != "x is not UTF-8 text" {
		t.Errorf("APIError = %+v", ae)
	}
}

func TestClientNotComputerdAnswer(t *testing.T) {
	ctx := testContext(t)
	c := fake(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		io.WriteString(w, "<html>upstream connect error</html>")
	})
	_, err := c.Exec(ctx, computerd.ExecRequest{Command: "true", TimeoutMs: 1000})
	if err == nil || computerd.IsAPIError(err) {
		t.Fatalf("a proxy's 502: err = %v, want an error that is not an APIError", err)
	}
	if !strings.Contains(err.Error(), "502") {
		t.Errorf("err %q does not name the status", err)
	}
}

func TestClientTransportErrors(t *testing.T) {
	ctx := testContext(t)

	// Nothing listens.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := computerd.NewClient("http://"+addr, "tok", computerd.WithTransport(tr))
	_, err = c.Exec(ctx, computerd.ExecRequest{Command: "true", TimeoutMs: 1000})
	var ne net.Error
	if err == nil || computerd.IsAPIError(err) || !errors.As(err, &ne) {
		t.Fatalf("connection refused: err = %v (%T), want a net.Error", err, err)
	}

	// The answer is cut off in the middle.
	c = fake(t, func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n{\"exitCode\":0,\"stdout\":\"par")
		buf.Flush()
		conn.Close()
	})
	_, err = c.Exec(ctx, computerd.ExecRequest{Command: "true", TimeoutMs: 1000})
	if err == nil || computerd.IsAPIError(err) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("cut answer: err = %v, want io.ErrUnexpectedEOF and no APIError", err)
	}

	// The connection is dropped before any answer.
	c = fake(t, func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		conn.Close()
	})
	_, err = c.Exec(ctx, computerd.ExecRequest{Command: "true", TimeoutMs: 1000})
	if err == nil || computerd.IsAPIError(err) {
		t.Fatalf("dropped connection: err = %v, want a transport error", err)
	}
}

func TestClientHeaders(t *testing.T) {
	ctx := testContext(t)
	var got http.Header
	var path string
	c := fake(t, func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		path = r.URL.RequestURI()
		w.WriteHeader(http.StatusNoContent)
	}, computerd.WithHeader(http.Header{"X-Gateway-Key": {"gk"}, "Authorization": {"Bearer gateway"}}))
	if err := c.Kill(ctx, computerd.KillRequest{PID: 7}); err != nil {
		t.Fatal(err)
	}
	if got.Get("X-Gateway-Key") != "gk" || got.Get("Authorization") != "Bearer tok" || len(got.Values("Authorization")) != 1 {
		t.Errorf("headers = %v", got)
	}
	if path != "/v1/processes/kill" {
		t.Errorf("path = %q (trailing slash of the base URL not trimmed?)", path)
	}
}

func TestClientDownloadCutShort(t *testing.T) {
	ctx := testContext(t)
	c := fake(t, func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n12345")
		buf.Flush()
	})
	rc, err := c.Download(ctx, "f")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(bufio.NewReader(rc))
	if !errors.Is(err, io.ErrUnexpectedEOF) || string(b) != "12345" {
		t.Errorf("ReadAll = %q, %v; want the part and io.ErrUnexpectedEOF", b, err)
	}
}

func TestStreamBroken(t *testing.T) {
	ctx := testContext(t)
	srv := server.New(server.Config{TokenHash: token.Hash("tok"), Home: t.TempDir()})
	ts := httptest.NewServer(srv)
	defer ts.Close()
	defer srv.Close()
	c := computerd.NewClient(ts.URL, "tok", computerd.WithHTTPClient(ts.Client()))

	sctx, cancel := context.WithCancel(ctx)
	var out syncbuf.Buffer
	s, err := c.ExecStream(sctx, computerd.StreamStart{Command: "echo started; sleep 300"}, &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the command's first output", func() bool { return strings.Contains(out.String(), "started") })
	cancel()
	_, _, err = s.Wait()
	if err == nil || computerd.IsAPIError(err) {
		t.Errorf("Wait after cancel: %v, want a non-API error", err)
	}
}

// TestWaitScreen: the wait ends once the health answer says the screen is
// ready, or at once when it says it is unavailable or says nothing of a
// screen; a screen that stays starting ends it with the context's error.
func TestWaitScreen(t *testing.T) {
	health := func(states ...string) (*httptest.Server, *atomic.Int32) {
		var calls atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			i := min(int(calls.Add(1)), len(states)) - 1
			httpjson.Write(w, http.StatusOK, computerd.Health{Status: "ok", Screen: states[i]})
		}))
		t.Cleanup(srv.Close)
		return srv, &calls
	}
	srv, calls := health(computerd.ScreenStarting, computerd.ScreenStarting, computerd.ScreenReady)
	if err := computerd.NewClient(srv.URL, "").WaitScreen(testContext(t)); err != nil {
		t.Fatalf("WaitScreen: %v", err)
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("health asked %d times, want 3", n)
	}
	srv, _ = health(computerd.ScreenStarting, computerd.ScreenUnavailable)
	if err := computerd.NewClient(srv.URL, "").WaitScreen(testContext(t)); err == nil || !strings.Contains(err.Error(), "did not start") {
		t.Fatalf("WaitScreen on a screen that did not start: %v", err)
	}
	srv, calls = health("")
	if err := computerd.NewClient(srv.URL, "").WaitScreen(testContext(t)); err != nil || calls.Load() != 1 {
		t.Fatalf("WaitScreen without a screen state: %v after %d calls", err, calls.Load())
	}
	// The deadline leaves a busy machine time for a first answer; an ask
	// that the deadline cuts short keeps the answer before it.
	srv, _ = health(computerd.ScreenStarting)
	ctx, cancel := context.WithTimeout(testContext(t), 500*time.Millisecond)
	defer cancel()
	if err := computerd.NewClient(srv.URL, "").WaitScreen(ctx); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "starting") {
		t.Fatalf("WaitScreen on a screen that stays starting: %v", err)
	}
}

// TestWaitHealthy: the wait ends once the daemon answers, and a daemon
// that never answers ends it with the context's error and the last one.
func TestWaitHealthy(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) < 4 {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	}))
	defer srv.Close()
	if err := computerd.NewClient(srv.URL, "").WaitHealthy(testContext(t)); err != nil {
		t.Fatalf("WaitHealthy: %v", err)
	}
	if n := calls.Load(); n != 4 {
		t.Fatalf("health asked %d times, want 4", n)
	}

	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "starting", http.StatusServiceUnavailable)
	}))
	defer down.Close()
	ctx, cancel := context.WithTimeout(testContext(t), 100*time.Millisecond)
	defer cancel()
	err := computerd.NewClient(down.URL, "").WaitHealthy(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), down.URL) {
		t.Fatalf("WaitHealthy on a daemon that never answers: %v", err)
	}
}
