package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/syncbuf"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/internal/token"
)

func TestMain(m *testing.M) {
	// The egress peers benchmark runs this binary again as its source
	// server and its clients.
	if role := os.Getenv(peerRoleEnv); role != "" {
		os.Exit(runPeerRole(role))
	}
	testkit.VerifyTestMain(m)
}

// Public addresses used only as resolver answers. The test dialer maps them
// onto loopback servers; nothing ever connects to them.
var (
	publicA  = netip.MustParseAddr("93.184.215.14")
	publicB  = netip.MustParseAddr("151.101.1.69")
	public6  = netip.MustParseAddr("2606:2800:21f:cb07:6820:80da:af6b:8b2c")
	computer = "c-7f3a"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef-test-secret")

// testContext returns a context that ends before the test's deadline.
func testContext(t testing.TB) context.Context {
	return testkit.ContextTimeout(t, 30*time.Second)
}

// deriver gives the computers' egress passwords, as the supervisor does.
func deriver(t testing.TB) *token.Deriver {
	t.Helper()
	d, err := token.NewDeriver(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// authenticator accepts the computers in ids with their derived passwords.
func authenticator(d *token.Deriver, ids ...string) func(user, pass string) (string, bool) {
	known := map[string]bool{}
	for _, id := range ids {
		known[id] = true
	}
	return func(user, pass string) (string, bool) {
		want := d.Derive(token.Egress, user)
		if subtle.ConstantTimeCompare([]byte(pass), []byte(want)) != 1 || !known[user] {
			return "", false
		}
		return user, true
	}
}

// fakeResolver answers from a table. A name may have several answers,
// given in turn (the last repeats). It records every lookup.
type fakeResolver struct {
	mu      sync.Mutex
	answers map[string][][]netip.Addr
	errs    map[string]error
	lookups []string
	block   chan struct{} // when set, lookups wait for it or ctx
}

func newFakeResolver() *fakeResolver {
	return &fakeResolver{answers: map[string][][]netip.Addr{}, errs: map[string]error{}}
}

// set gives name (without the trailing dot) its answers, one per lookup.
func (r *fakeResolver) set(name string, answers ...[]netip.Addr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answers[name] = answers
}

func (r *fakeResolver) fail(name string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs[name] = err
}

func (r *fakeResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	r.lookups = append(r.lookups, host)
	block := r.block
	r.mu.Unlock()
	if network != "ip" || !strings.HasSuffix(host, ".") {
		return nil, fmt.Errorf("fake resolver: unexpected lookup %s %q", network, host)
	}
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	name := strings.TrimSuffix(host, ".")
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.errs[name]; err != nil {
		return nil, err
	}
	as, ok := r.answers[name]
	if !ok || len(as) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
	}
	a := as[0]
	if len(as) > 1 {
		r.answers[name] = as[1:]
	}
	return append([]netip.Addr(nil), a...), nil
}

func (r *fakeResolver) count(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, l := range r.lookups {
		if l == name+"." {
			n++
		}
	}
	return n
}

// mapDialer stands in for the network: it maps the public addresses the
// proxy checked onto loopback servers, records every address it is asked
// for, and refuses anything without a route. It only ever connects to
// loopback.
type mapDialer struct {
	t       testing.TB
	mu      sync.Mutex
	routes  map[netip.AddrPort]string
	dialed  []netip.AddrPort
	entered chan netip.AddrPort // when set, told of each dial
	hang    bool                // when set, dials wait for ctx
}

func newMapDialer(t testing.TB) *mapDialer {
	return &mapDialer{t: t, routes: map[netip.AddrPort]string{}}
}

// route makes dials of public go to the loopback listener at local.
func (d *mapDialer) route(public netip.AddrPort, local string) {
	ap := netip.MustParseAddrPort(local)
	if !ap.Addr().IsLoopback() {
		panic("route to a non-loopback address: " + local)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.routes[public] = local
}

func (d *mapDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		d.t.Errorf("proxy dialled %q, not an IP and port", addr)
		return nil, err
	}
	if network != "tcp" {
		d.t.Errorf("proxy dialled network %q", network)
	}
	d.mu.Lock()
	d.dialed = append(d.dialed, ap)
	local, ok := d.routes[ap]
	entered, hang := d.entered, d.hang
	d.mu.Unlock()
	if entered != nil {
		entered <- ap
	}
	if hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if !ok {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	var nd net.Dialer
	return nd.DialContext(ctx, "tcp", local)
}

func (d *mapDialer) dials() []netip.AddrPort {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]netip.AddrPort(nil), d.dialed...)
}

// events collects what the proxy reports.
type events struct {
	mu  sync.Mutex
	got []Event
}

func (e *events) add(ev Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, ev)
}

func (e *events) list() []Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Event(nil), e.got...)
}

// harness is a proxy served on loopback with fake DNS and network.
type harness struct {
	t        testing.TB
	p        *Proxy
	addr     string // the proxy's listener
	resolver *fakeResolver
	dialer   *mapDialer
	events   *events
	logs     *syncbuf.Buffer
	password string // computer's egress password

	stop     context.CancelFunc // ends Serve
	served   chan struct{}      // closed when Serve has returned
	serveErr error              // what it returned
}

// start serves a proxy for computer. edit may change the config first.
func start(t testing.TB, edit func(*Config)) *harness {
	t.Helper()
	d := deriver(t)
	h := &harness{
		t:        t,
		resolver: newFakeResolver(),
		dialer:   newMapDialer(t),
		events:   &events{},
		logs:     syncbuf.Logged(t.Log),
		password: d.Derive(token.Egress, computer),
	}
	if _, ok := t.(*testing.B); ok {
		h.logs = &syncbuf.Buffer{}
	}
	cfg := Config{
		Authenticate: authenticator(d, computer, "c-other"),
		Resolver:     h.resolver,
		Dialer:       h.dialer,
		OnEvent:      h.events.add,
		Logger:       slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if edit != nil {
		edit(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.p = p
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	h.stop, h.served = cancel, make(chan struct{})
	go func() {
		h.serveErr = p.Serve(ctx, ln)
		close(h.served)
	}()
	t.Cleanup(func() {
		cancel()
		<-h.served
		if h.serveErr != nil {
			t.Errorf("Serve: %v", h.serveErr)
		}
		h.logs.StopEcho()
	})
	return h
}

// proxyURL is the proxy as a computer's HTTP_PROXY names it.
func (h *harness) proxyURL(user, pass string) *url.URL {
	u := &url.URL{Scheme: "http", Host: h.addr}
	if user != "" {
		u.User = url.UserPassword(user, pass)
	}
	return u
}

// client returns an HTTP client that goes through the proxy with the
// computer's credentials, trusting tlsConf for https.
func (h *harness) client(base *http.Transport) *http.Client {
	var tr *http.Transport
	if base != nil {
		tr = base.Clone()
	} else {
		tr = &http.Transport{}
	}
	tr.Proxy = http.ProxyURL(h.proxyURL(computer, h.password))
	h.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// basic is the Proxy-Authorization value for user and pass.
func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

// auth is the computer's Proxy-Authorization header line.
func (h *harness) auth() string {
	return "Proxy-Authorization: " + basic(computer, h.password) + "\r\n"
}

// waitIdleUpstream waits until the proxy holds one idle connection to
// target: a kept connection's upstream is put back just after its answer
// leaves, so a test that counts dials waits for it before the next request.
func (h *harness) waitIdleUpstream(target netip.AddrPort) {
	h.t.Helper()
	testkit.EventuallyContext(h.t, testContext(h.t), "an idle upstream connection to "+target.String(), func() bool {
		return h.p.upstreams.idleConns(target) == 1
	})
}

// raw sends req as written to the proxy and returns the parsed answer and
// its bytes. The connection is left open for CONNECT tunnels.
func (h *harness) raw(req string) (*http.Response, string, net.Conn, *bufio.Reader) {
	h.t.Helper()
	c, err := net.DialTimeout("tcp", h.addr, 5*time.Second)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		h.t.Fatal(err)
	}
	rec := &recorder{on: true}
	br := bufio.NewReader(io.TeeReader(c, rec))
	method, _, _ := strings.Cut(req, " ")
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		h.t.Fatalf("read answer to %q: %v", firstLine(req), err)
	}
	if method != http.MethodConnect || resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
	}
	// Tunnel bytes that follow are read from br, unrecorded.
	rec.on = false
	return resp, rec.buf.String(), c, br
}

// recorder keeps the bytes written to it while on.
type recorder struct {
	on  bool
	buf bytes.Buffer
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.on {
		r.buf.Write(p)
	}
	return len(p), nil
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\r\n")
	return l
}

// connect opens a tunnel to hostport and returns the connection, failing
// the test unless the proxy answers 200.
func (h *harness) connect(hostport string) (net.Conn, *bufio.Reader) {
	h.t.Helper()
	resp, _, c, br := h.raw("CONNECT " + hostport + " HTTP/1.1\r\nHost: " + hostport + "\r\n" + h.auth() + "\r\n")
	if resp.StatusCode != http.StatusOK {
		h.t.Fatalf("CONNECT %s: %s (%s)", hostport, resp.Status, resp.Header.Get(HeaderRefused))
	}
	return c, br
}

// echoServer is a loopback TCP server that records what it receives and
// echoes it back, until the client half-closes, then says "bye" and closes.
type echoServer struct {
	ln    net.Listener
	mu    sync.Mutex
	got   bytes.Buffer
	wg    sync.WaitGroup
	conns []net.Conn
}

func newEchoServer(t testing.TB) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &echoServer{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				buf := make([]byte, 32<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						s.mu.Lock()
						s.got.Write(buf[:n])
						s.mu.Unlock()
						if _, err := c.Write(buf[:n]); err != nil {
							return
						}
					}
					if errors.Is(err, io.EOF) {
						c.Write([]byte("bye"))
						return
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *echoServer) addr() string { return s.ln.Addr().String() }

func (s *echoServer) received() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got.String()
}

func (s *echoServer) close() {
	s.ln.Close()
	s.mu.Lock()
	for _, c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// ap is netip.AddrPortFrom for tests.
func ap(a netip.Addr, port uint16) netip.AddrPort { return netip.AddrPortFrom(a, port) }
