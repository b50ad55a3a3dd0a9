package egress

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/testkit"
)

var epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// roundTrip sends s into a tunnel to an echo server and reads it back.
func roundTrip(t *testing.T, c net.Conn, br *bufio.Reader, s string) error {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, s); err != nil {
		return err
	}
	buf := make([]byte, len(s))
	if _, err := io.ReadFull(br, buf); err != nil {
		return err
	}
	if string(buf) != s {
		t.Fatalf("echo %q, want %q", buf, s)
	}
	return nil
}

// closed reports whether the proxy has closed the tunnel, waiting briefly.
func closed(c net.Conn, br *bufio.Reader) bool {
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := br.ReadByte()
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

func TestIdleTimeout(t *testing.T) {
	fake := clock.NewFake(epoch)
	const idle = time.Minute
	h := start(t, func(c *Config) {
		c.Clock = fake
		c.IdleTimeout = idle
	})
	echo := newEchoServer(t)
	h.resolver.set("echo.example", []netip.Addr{publicA})
	h.dialer.route(ap(publicA, 7), echo.addr())
	c, br := h.connect("echo.example:7")

	// Traffic keeps the tunnel open past the timeout.
	fake.Advance(idle / 2)
	if err := roundTrip(t, c, br, "ping"); err != nil {
		t.Fatal(err)
	}
	fake.Advance(idle / 2)
	if err := roundTrip(t, c, br, "pong"); err != nil {
		t.Fatalf("closed with traffic %v ago: %v", idle/2, err)
	}
	fake.Advance(idle - time.Second)
	if closed(c, br) {
		t.Fatal("closed before the idle timeout")
	}
	// A full timeout without a byte closes it. The watcher re-arms
	// asynchronously, so time moves until it has seen the deadline.
	ctx := testContext(t)
	for !closed(c, br) {
		if ctx.Err() != nil {
			t.Fatal("tunnel never closed")
		}
		fake.Advance(idle)
	}
	testkit.EventuallyContext(t, testContext(t), "closed=idle in the log", func() bool { return strings.Contains(h.logs.String(), "closed=idle") })
}

func TestDialTimeout(t *testing.T) {
	fake := clock.NewFake(epoch)
	h := start(t, func(c *Config) {
		c.Clock = fake
		c.DialTimeout = 7 * time.Second
	})
	h.resolver.set("slow.example", []netip.Addr{publicA})
	h.dialer.hang = true
	h.dialer.entered = make(chan netip.AddrPort, 1)
	type answer struct {
		resp *http.Response
		raw  string
	}
	got := make(chan answer, 1)
	go func() {
		resp, raw, _, _ := h.raw("CONNECT slow.example:443 HTTP/1.1\r\nHost: slow.example:443\r\n" + h.auth() + "\r\n")
		got <- answer{resp, raw}
	}()
	select {
	case <-h.dialer.entered:
	case <-testContext(t).Done():
		t.Fatal("never dialled")
	}
	fake.Advance(7*time.Second - time.Millisecond)
	select {
	case a := <-got:
		t.Fatalf("answered before the timeout: %s", a.resp.Status)
	case <-time.After(20 * time.Millisecond):
	}
	fake.Advance(time.Millisecond)
	a := <-got
	if a.resp.StatusCode != http.StatusBadGateway || a.resp.Header.Get(HeaderRefused) != string(VerdictUpstreamFailure) {
		t.Fatalf("%s %q", a.resp.Status, a.resp.Header.Get(HeaderRefused))
	}
	if strings.Contains(a.raw, publicA.String()) {
		t.Errorf("answer names the address:\n%s", a.raw)
	}
	testkit.EventuallyContext(t, testContext(t), "\"timed out\" in the log", func() bool { return strings.Contains(h.logs.String(), "timed out") })
}

func TestLookupTimeout(t *testing.T) {
	fake := clock.NewFake(epoch)
	h := start(t, func(c *Config) {
		c.Clock = fake
		c.LookupTimeout = 3 * time.Second
	})
	h.resolver.block = make(chan struct{})
	got := make(chan *http.Response, 1)
	go func() {
		resp, _, _, _ := h.raw("GET http://slow.example/ HTTP/1.1\r\nHost: slow.example\r\n" + h.auth() + "\r\n")
		got <- resp
	}()
	testkit.EventuallyContext(t, testContext(t), "one lookup of slow.example", func() bool { return h.resolver.count("slow.example") == 1 })
	fake.Advance(3 * time.Second)
	resp := <-got
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get(HeaderRefused) != string(VerdictDNSFailure) {
		t.Fatalf("%s %q", resp.Status, resp.Header.Get(HeaderRefused))
	}
}

func TestMaxHeaderBytes(t *testing.T) {
	h := start(t, func(c *Config) { c.MaxHeaderBytes = 4 << 10 })
	h.resolver.set("example.com", []netip.Addr{publicA})
	resp, _, _, _ := h.raw("GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n" + h.auth() +
		"X-Big: " + strings.Repeat("a", 16<<10) + "\r\n\r\n")
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("%s", resp.Status)
	}
	if n := h.resolver.count("example.com"); n != 0 {
		t.Errorf("resolved %d times", n)
	}
}

// Ending Serve's context closes open tunnels and waits for them.
func TestServeEndsTunnels(t *testing.T) {
	d := deriver(t)
	r, dl := newFakeResolver(), newMapDialer(t)
	p, err := New(Config{Authenticate: authenticator(d, computer), Resolver: r, Dialer: dl})
	if err != nil {
		t.Fatal(err)
	}
	echo := newEchoServer(t)
	r.set("echo.example", []netip.Addr{publicA})
	dl.route(ap(publicA, 7), echo.addr())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testContext(t))
	served := make(chan error, 1)
	go func() { served <- p.Serve(ctx, ln) }()

	h := &harness{t: t, p: p, addr: ln.Addr().String(), password: d.Derive("egress", computer)}
	c, br := h.connect("echo.example:7")
	if err := roundTrip(t, c, br, "hi"); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if p.Stats().Active != 0 {
		t.Error("Serve returned with connections open")
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(br); err != nil {
		t.Fatalf("tunnel not closed: %v", err)
	}
	if _, err := net.Dial("tcp", h.addr); err == nil {
		t.Error("listener still open")
	}
}

// failingListener fails its first Accept.
type failingListener struct{ net.Listener }

func (l failingListener) Accept() (net.Conn, error) { return nil, errors.New("accept: broken") }

func TestServeListenerFails(t *testing.T) {
	d := deriver(t)
	p, err := New(Config{Authenticate: authenticator(d, computer), Resolver: newFakeResolver(), Dialer: newMapDialer(t)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = p.Serve(testContext(t), failingListener{ln})
	if err == nil || !strings.Contains(err.Error(), "broken") {
		t.Fatalf("Serve: %v", err)
	}
}
