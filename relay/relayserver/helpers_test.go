package relayserver_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/relay"
	"github.com/berthdev/berth/relay/relayclient"
	"github.com/berthdev/berth/relay/relayserver"
)

// testCtx bounds a test.
func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// logBuf collects log output and prints it when the test ends.
type logBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func newLogger(t testing.TB) (*slog.Logger, *logBuf) {
	lb := &logBuf{}
	t.Cleanup(func() { t.Log("logs:\n" + lb.String()) })
	return slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug})), lb
}

// trackingListener remembers accepted connections so a test can cut them
// all, as if the relay process died.
type trackingListener struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

func (l *trackingListener) kill() {
	l.Listener.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		c.Close()
	}
}

type testRelay struct {
	*relayserver.Server
	http *httptest.Server
	ln   *trackingListener
	url  string
}

var tokens = map[string]string{"good-token-1": "agent-1", "good-token-2": "agent-2"}

func authenticate(tok string) (string, bool) {
	if id, ok := tokens[tok]; ok {
		return id, true
	}
	if len(tok) > 5 && tok[:5] == "sim--" {
		return tok[5:], true
	}
	return "", false
}

// startRelay runs a relay on addr ("127.0.0.1:0" for any port).
func startRelay(t testing.TB, addr string, cfg relayserver.Config) *testRelay {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Authenticate == nil {
		cfg.Authenticate = authenticate
	}
	rs := relayserver.New(cfg)
	mux := http.NewServeMux()
	mux.Handle(relay.ConnectPath, rs)
	hs := httptest.NewUnstartedServer(mux)
	tl := &trackingListener{Listener: ln}
	hs.Listener = tl
	hs.Start()
	r := &testRelay{Server: rs, http: hs, ln: tl, url: "ws://" + ln.Addr().String() + relay.ConnectPath}
	t.Cleanup(r.stop)
	return r
}

func (r *testRelay) stop() {
	r.Server.Close()
	r.ln.kill()
	r.http.Close()
}

func (r *testRelay) addr() string { return r.ln.Addr().String() }

// startAgent runs relayclient.Run until the test ends.
func startAgent(t testing.TB, cfg relayclient.Config) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- relayclient.Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v", err)
		}
	})
}

func fastBackoff() *relayclient.Backoff {
	b := relayclient.NewBackoff(clock.Real{})
	b.Min, b.Max = 20*time.Millisecond, 200*time.Millisecond
	return b
}

func online(r *testRelay, id string) func() bool {
	return func() bool {
		p, ok := r.Presence(id)
		return ok && p.Online
	}
}
