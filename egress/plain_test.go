package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/internal/token"
)

// rawUpstream is a loopback server that answers each connection with
// serve, and counts the connections it accepted.
type rawUpstream struct {
	ln    net.Listener
	conns atomic.Int32
	wg    sync.WaitGroup
	mu    sync.Mutex
	open  []net.Conn
}

func newRawUpstream(t *testing.T, serve func(c net.Conn, br *bufio.Reader)) *rawUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &rawUpstream{ln: ln}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.conns.Add(1)
			u.mu.Lock()
			u.open = append(u.open, c)
			u.mu.Unlock()
			u.wg.Add(1)
			go func() {
				defer u.wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(20 * time.Second))
				serve(c, bufio.NewReader(c))
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		u.mu.Lock()
		for _, c := range u.open {
			c.Close()
		}
		u.mu.Unlock()
		u.wg.Wait()
	})
	return u
}

func (u *rawUpstream) addr() string { return u.ln.Addr().String() }

// closeAfter ends an answer after which the upstream closes.
const closeAfter = "\x00close"

// answerEach reads requests on c and writes answer for each, until c ends
// or answer returns "" or one that ends in closeAfter.
func answerEach(answer func(r *http.Request) string) func(net.Conn, *bufio.Reader) {
	return func(c net.Conn, br *bufio.Reader) {
		for {
			r, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			a := answer(r)
			if a == "" {
				return
			}
			a, closing := strings.CutSuffix(a, closeAfter)
			if err := writeInPieces(c, a); err != nil || closing {
				return
			}
		}
	}
}

// writeInPieces writes s to c 64 KiB at a time, so that the head of a
// large answer leaves at once rather than after s is copied whole.
func writeInPieces(c net.Conn, s string) error {
	for len(s) > 0 {
		n := min(len(s), 64<<10)
		if _, err := c.Write([]byte(s[:n])); err != nil {
			return err
		}
		s = s[n:]
	}
	return nil
}

// client is a kept-alive connection to the proxy that sends requests as
// written and reads their answers.
type client struct {
	t  *testing.T
	h  *harness
	c  net.Conn
	br *bufio.Reader
}

func (h *harness) dialClient(t *testing.T) *client {
	t.Helper()
	c, err := net.DialTimeout("tcp", h.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{t: t, h: h, c: c, br: bufio.NewReader(c)}
}

// do sends method url with the computer's credentials, extra header
// lines and body, and returns the answer with its body read.
func (cl *client) do(method, url, extra string, body ...string) (*http.Response, string, error) {
	cl.t.Helper()
	host := strings.TrimPrefix(url, "http://")
	host, _, _ = strings.Cut(host, "/")
	cl.c.SetDeadline(time.Now().Add(10 * time.Second))
	req := method + " " + url + " HTTP/1.1\r\nHost: " + host + "\r\n" + cl.h.auth() + extra + "\r\n" + strings.Join(body, "")
	if _, err := io.WriteString(cl.c, req); err != nil {
		return nil, "", err
	}
	resp, err := http.ReadResponse(cl.br, &http.Request{Method: method})
	if err != nil {
		return nil, "", err
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(got), err
}

func (cl *client) get(url string) (*http.Response, string) {
	cl.t.Helper()
	resp, body, err := cl.do(http.MethodGet, url, "")
	if err != nil {
		cl.t.Fatalf("GET %s: %v", url, err)
	}
	return resp, body
}

// Hop-by-hop headers (named in Connection too), the proxy credentials and
// the client's forwarding headers stay out of a plain GET both ways, on
// the first request of a connection and on the ones that follow.
func TestPlainGetHeaders(t *testing.T) {
	h := start(t, nil)
	up := newUpstream(t, false, hopHeaders)
	h.resolver.set("example.com", []netip.Addr{publicA})
	h.dialer.route(ap(publicA, 8080), up.addr())
	cl := h.dialClient(t)
	for i := range 3 {
		resp, body, err := cl.do(http.MethodGet, "http://example.com:8080/path?q=1", "Proxy-Connection: keep-alive\r\n"+
			"Connection: X-Hop, keep-alive\r\nX-Hop: secret-hop\r\nKeep-Alive: 300\r\nUpgrade: websocket\r\n"+
			"Te: trailers\r\nX-Forwarded-For: 10.9.9.9\r\nForwarded: for=10.9.9.9\r\nX-End: kept\r\n")
		if err != nil || resp.StatusCode != http.StatusOK || body != "ok" {
			t.Fatalf("request %d: %v %v %q", i, err, resp, body)
		}
		r := up.last(t)
		if r.Host != "example.com:8080" || r.URL.RequestURI() != "/path?q=1" || r.Method != http.MethodGet {
			t.Errorf("request %d: upstream got %s %s Host %q", i, r.Method, r.URL.RequestURI(), r.Host)
		}
		for _, k := range []string{"Proxy-Authorization", "Proxy-Connection", "X-Hop", "Keep-Alive", "Upgrade", "X-Forwarded-For", "Forwarded", "User-Agent"} {
			if v := r.Header.Get(k); v != "" {
				t.Errorf("request %d: upstream got %s: %q", i, k, v)
			}
		}
		if r.Header.Get("X-End") != "kept" || r.Header.Get("Te") != "trailers" {
			t.Errorf("request %d: upstream header %v", i, r.Header)
		}
		for _, k := range []string{"X-Up-Hop", "Keep-Alive", "Proxy-Authenticate"} {
			if v := resp.Header.Get(k); v != "" {
				t.Errorf("request %d: client got %s: %q", i, k, v)
			}
		}
		if resp.Header.Get("X-End") != "kept" || resp.Header.Get("Date") == "" {
			t.Errorf("request %d: client header %v", i, resp.Header)
		}
	}
}

// Sequential requests of a connection, and of other connections, share one
// upstream connection; the bytes of each answer are counted.
func TestPlainUpstreamReuse(t *testing.T) {
	h := start(t, nil)
	up := newRawUpstream(t, answerEach(func(r *http.Request) string {
		return "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
	}))
	h.exampleAt(up.addr())
	for range 2 {
		cl := h.dialClient(t)
		for range 3 {
			if resp, body := cl.get("http://example.com/"); resp.StatusCode != http.StatusOK || body != "hello" {
				t.Fatalf("%s %q", resp.Status, body)
			}
		}
		// The upstream connection is put back just after the answer
		// leaves, and before the request is logged.
		testkit.EventuallyContext(t, testContext(t), "the requests logged", func() bool { return h.p.Stats().Active == 0 })
	}
	if n := up.conns.Load(); n != 1 {
		t.Errorf("upstream got %d connections, want 1", n)
	}
	if d := h.dialer.dials(); len(d) != 1 {
		t.Errorf("dialled %v", d)
	}
	testkit.EventuallyContext(t, testContext(t), "30 bytes down", func() bool { return h.p.Stats().BytesDown == 30 })
	if st := h.p.Stats(); st.Verdicts[VerdictAllowed] != 6 {
		t.Errorf("stats %v", st.Verdicts)
	}
}

// Answers of every framing reach the client whole: chunked with trailers,
// read to close, HEAD, 204, 304 and 1xx before the final answer.
func TestPlainAnswerFraming(t *testing.T) {
	h := start(t, nil)
	up := newRawUpstream(t, answerEach(func(r *http.Request) string {
		switch r.URL.Path {
		case "/chunked":
			return "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n" +
				"5\r\nhello\r\n6\r\n world\r\n0\r\nX-Sum: 42\r\n\r\n"
		case "/close":
			return "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end" + closeAfter
		case "/head":
			return "HTTP/1.1 200 OK\r\nContent-Length: 1234\r\nContent-Type: text/plain\r\n\r\n"
		case "/204":
			return "HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n"
		case "/304":
			return "HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n"
		case "/early":
			return "HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
		}
		return "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
	}))
	h.exampleAt(up.addr())
	cl := h.dialClient(t)

	// The first request takes the connection over; the checks run on
	// the later ones, and on a new connection each.
	cl.get("http://example.com/")
	check := func(what string, f func(cl *client)) {
		t.Run(what, func(t *testing.T) {
			f(cl)
			fresh := h.dialClient(t)
			f(fresh)
		})
	}
	check("chunked", func(cl *client) {
		resp, body := cl.get("http://example.com/chunked")
		if body != "hello world" || resp.Trailer.Get("X-Sum") != "42" {
			t.Errorf("%q trailer %v", body, resp.Trailer)
		}
	})
	check("head", func(cl *client) {
		resp, body, err := cl.do(http.MethodHead, "http://example.com/head", "")
		if err != nil || resp.ContentLength != 1234 || body != "" {
			t.Errorf("%v %v %q", err, resp, body)
		}
	})
	check("204", func(cl *client) {
		resp, body := cl.get("http://example.com/204")
		if resp.StatusCode != http.StatusNoContent || resp.Header.Get("X-A") != "1" || body != "" {
			t.Errorf("%s %v %q", resp.Status, resp.Header, body)
		}
	})
	check("304", func(cl *client) {
		resp, body := cl.get("http://example.com/304")
		if resp.StatusCode != http.StatusNotModified || resp.Header.Get("Etag") != `"x"` || body != "" {
			t.Errorf("%s %v %q", resp.Status, resp.Header, body)
		}
	})
	check("1xx", func(cl *client) {
		cl.c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(cl.c, "GET http://example.com/early HTTP/1.1\r\nHost: example.com\r\n"+h.auth()+"\r\n")
		resp, err := http.ReadResponse(cl.br, nil)
		if err != nil || resp.StatusCode != http.StatusEarlyHints || resp.Header.Get("Link") != "</s.css>" {
			t.Fatalf("%v %v", err, resp)
		}
		resp, err = http.ReadResponse(cl.br, nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%v %v", err, resp)
		}
		if b, _ := io.ReadAll(resp.Body); string(b) != "ok" {
			t.Errorf("%q", b)
		}
	})
	// Last: an answer read to its close, which leaves the upstream
	// connection closed.
	check("close", func(cl *client) {
		resp, body := cl.get("http://example.com/close")
		if body != "until the end" || resp.Header.Get("Content-Type") != "text/plain" {
			t.Errorf("%q %v", body, resp.Header)
		}
	})
	if resp, body := cl.get("http://example.com/"); resp.StatusCode != http.StatusNotFound || body != "" {
		t.Errorf("after the close: %s %q", resp.Status, body)
	}
}

// An upstream that closes in the middle of an answer leaves the client with
// a cut answer and a closed connection, not a complete-looking one.
func TestPlainUpstreamCutsAnswer(t *testing.T) {
	h := start(t, nil)
	up := newRawUpstream(t, answerEach(func(r *http.Request) string {
		return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	}))
	h.exampleAt(up.addr())
	// Each closes after its cut answer.
	up2 := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		http.ReadRequest(br)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
	})
	up3 := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		http.ReadRequest(br)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b")
	})
	h.resolver.set("chunked.example", []netip.Addr{publicB})
	h.dialer.route(ap(publicB, 80), up2.addr())
	h.resolver.set("sized.example", []netip.Addr{publicB})
	h.dialer.route(ap(publicB, 81), up3.addr())
	// The first request of a connection, a later one, and one that
	// closes its connection (net/http's server writes that answer).
	for _, url := range []string{"http://chunked.example/", "http://sized.example:81/"} {
		for _, way := range []string{"first", "later", "close"} {
			cl := h.dialClient(t)
			extra := ""
			switch way {
			case "later":
				cl.get("http://example.com/")
			case "close":
				extra = "Connection: close\r\n"
			}
			_, body, err := cl.do(http.MethodGet, url, extra)
			if err == nil {
				t.Errorf("%s (%s): the client got a whole answer %q", url, way, body)
			}
			cl.c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := cl.br.ReadByte(); err == nil {
				t.Errorf("%s: connection still open", url)
			}
		}
	}
}

// An answer head larger than the bound is refused as an upstream failure.
func TestPlainHeadTooLarge(t *testing.T) {
	h := start(t, nil)
	big := strings.Repeat("a", 8<<10)
	up := newRawUpstream(t, answerEach(func(r *http.Request) string {
		var b strings.Builder
		b.WriteString("HTTP/1.1 200 OK\r\n")
		for i := 0; b.Len() <= maxResponseHeaderBytes; i++ {
			fmt.Fprintf(&b, "X-Big-%d: %s\r\n", i, big)
		}
		b.WriteString("Content-Length: 2\r\n\r\nok")
		return b.String()
	}))
	h.exampleAt(up.addr())
	for _, first := range []bool{true, false} {
		cl := h.dialClient(t)
		if !first {
			h.resolver.set("ok.example", []netip.Addr{publicB})
			ok := newUpstream(t, false, nil)
			h.dialer.route(ap(publicB, 80), ok.addr())
			cl.get("http://ok.example/")
		}
		resp, _ := cl.get("http://example.com/")
		if resp.StatusCode != http.StatusBadGateway || resp.Header.Get(HeaderRefused) != string(VerdictUpstreamFailure) {
			t.Errorf("%s %q", resp.Status, resp.Header.Get(HeaderRefused))
		}
	}
	testkit.EventuallyContext(t, testContext(t), "the bound in the log", func() bool {
		return strings.Contains(h.logs.String(), "larger than")
	})
}

// An upstream silent for IdleTimeout is an upstream failure, before the
// answer starts and between two reads of its body.
func TestPlainSlowUpstream(t *testing.T) {
	const idle = 300 * time.Millisecond
	h := start(t, func(c *Config) { c.IdleTimeout = idle })
	release := make(chan struct{})
	defer close(release)
	up := newRawUpstream(t, answerEach(func(r *http.Request) string {
		switch r.URL.Path {
		case "/silent":
			<-release
			return ""
		case "/stalls":
			return "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nstart"
		}
		return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	}))
	h.exampleAt(up.addr())
	cl := h.dialClient(t)
	cl.get("http://example.com/")
	t0 := time.Now()
	resp, _ := cl.get("http://example.com/silent")
	if d := time.Since(t0); resp.StatusCode != http.StatusBadGateway || d < idle || d > 5*time.Second {
		t.Errorf("%s after %v", resp.Status, d)
	}
	cl = h.dialClient(t)
	t0 = time.Now()
	if _, body, err := cl.do(http.MethodGet, "http://example.com/stalls", ""); err == nil {
		t.Errorf("whole answer %q", body)
	}
	if d := time.Since(t0); d < idle || d > 5*time.Second {
		t.Errorf("cut after %v", d)
	}
	testkit.EventuallyContext(t, testContext(t), "the timeout in the log", func() bool { return strings.Contains(h.logs.String(), "timeout") })
}

// An idle upstream connection that upstream closed is replaced by a new
// one for the next request.
func TestPlainStaleUpstream(t *testing.T) {
	h := start(t, nil)
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err == nil {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
		// Closed without a word, as a server whose idle timeout passed.
	})
	h.exampleAt(up.addr())
	cl := h.dialClient(t)
	for i := range 3 {
		if resp, body := cl.get("http://example.com/"); resp.StatusCode != http.StatusOK || body != "ok" {
			t.Fatalf("request %d: %s %q", i, resp.Status, body)
		}
		// Let the close arrive before the next request.
		time.Sleep(20 * time.Millisecond)
	}
	if n := up.conns.Load(); n != 3 {
		t.Errorf("%d upstream connections", n)
	}
}

// A client that goes away while upstream is slow ends the upstream request.
func TestPlainClientGoes(t *testing.T) {
	h := start(t, nil)
	gone := make(chan struct{})
	up := newRawUpstream(t, answerEach(func(r *http.Request) string {
		return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	}))
	slow := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		http.ReadRequest(br)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := br.ReadByte(); errors.Is(err, io.EOF) {
			close(gone)
		}
	})
	h.exampleAt(up.addr())
	h.resolver.set("slow.example", []netip.Addr{publicB})
	h.dialer.route(ap(publicB, 80), slow.addr())
	cl := h.dialClient(t)
	cl.get("http://example.com/")
	io.WriteString(cl.c, "GET http://slow.example/ HTTP/1.1\r\nHost: slow.example\r\n"+h.auth()+"\r\n")
	testkit.EventuallyContext(t, testContext(t), "the request upstream", func() bool { return slow.conns.Load() == 1 })
	time.Sleep(2 * watchAfter)
	cl.c.Close()
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream connection stayed open")
	}
}

// A kept connection goes back to net/http for what the proxy does not
// serve itself (a POST with a body, a CONNECT), and comes back after.
func TestPlainKeptHandsBack(t *testing.T) {
	h := start(t, nil)
	up := newUpstream(t, false, nil)
	echo := newEchoServer(t)
	h.exampleAt(up.addr())
	h.dialer.route(ap(publicA, 7), echo.addr())
	cl := h.dialClient(t)
	for range 2 {
		if _, body := cl.get("http://example.com/a"); body != "hello from example.com/a" {
			t.Fatalf("%q", body)
		}
		resp, body, err := cl.do(http.MethodPost, "http://example.com/p", "Content-Length: 4\r\n", "body")
		if err != nil || body != "hello from example.com/p" {
			t.Fatalf("POST: %v %v %q", err, resp, body)
		}
		up.mu.Lock()
		got := up.body[len(up.body)-1]
		up.mu.Unlock()
		if got != "body" {
			t.Fatalf("upstream body %q", got)
		}
		// A request refused by net/http's own checks.
		if resp, _, err := cl.do(http.MethodGet, "http://example.com/", "Bad Header: x\r\n"); err != nil || resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("bad header: %v %v", err, resp)
		}
		cl = h.dialClient(t)
		cl.get("http://example.com/a")
	}
	// Refusals on a kept connection are answered there.
	resp, _, err := cl.do(http.MethodGet, "http://10.0.0.1/", "")
	if err != nil || resp.StatusCode != http.StatusForbidden || resp.Header.Get(HeaderRefused) != string(VerdictBlockedAddress) {
		t.Fatalf("%v %v", err, resp)
	}
	io.WriteString(cl.c, "GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\nProxy-Authorization: "+basic(computer, "wrong")+"\r\n\r\n")
	resp, err = http.ReadResponse(cl.br, nil)
	if err != nil || resp.StatusCode != http.StatusProxyAuthRequired {
		t.Fatalf("%v %v", err, resp)
	}
	io.Copy(io.Discard, resp.Body)
	// A CONNECT after plain requests tunnels.
	io.WriteString(cl.c, "CONNECT example.com:7 HTTP/1.1\r\nHost: example.com:7\r\n"+h.auth()+"\r\n")
	resp, err = http.ReadResponse(cl.br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %v %v", err, resp)
	}
	if err := roundTrip(t, cl.c, cl.br, "ping"); err != nil {
		t.Fatal(err)
	}
}

// Ending Serve closes kept connections, idle or waiting for upstream.
func TestPlainKeptServeEnds(t *testing.T) {
	h := start(t, nil)
	up := newRawUpstream(t, answerEach(func(r *http.Request) string {
		return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	}))
	h.exampleAt(up.addr())
	cl := h.dialClient(t)
	cl.get("http://example.com/")
	cl.get("http://example.com/")
	h.waitIdleUpstream(ap(publicA, 80))
	// The harness's cleanup ends Serve, which must not hang on the
	// kept connection; its leak check sees no goroutine left.
}

// bigAnswer is an answer far larger than socket buffers hold, made once
// (call it before the timing starts: under the race detector making it
// takes longer than a short IdleTimeout).
func bigAnswer(*http.Request) string { return bigAnswerText() }

var bigAnswerText = sync.OnceValue(func() string {
	return "HTTP/1.1 200 OK\r\nContent-Length: 67108864\r\n\r\n" + strings.Repeat("x", 64<<20)
})

// Ending Serve closes a kept connection whose client takes no byte of
// the first answer.
func TestPlainKeptServeEndsClientNotReading(t *testing.T) {
	h := start(t, nil)
	up := newRawUpstream(t, answerEach(bigAnswer))
	h.exampleAt(up.addr())
	cl := h.dialClient(t)
	io.WriteString(cl.c, "GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n"+h.auth()+"\r\n")
	testkit.EventuallyContext(t, testContext(t), "the request upstream", func() bool { return up.conns.Load() == 1 })
	time.Sleep(200 * time.Millisecond)
	h.stop()
	select {
	case <-h.served:
	case <-time.After(10 * time.Second):
		cl.c.Close()
		<-h.served
		t.Fatal("Serve still running 10 s after it was ended")
	}
}

// A client that takes no byte of an answer for IdleTimeout loses its
// connection, as an idle tunnel does.
func TestPlainKeptClientNotReading(t *testing.T) {
	const idle = 300 * time.Millisecond
	h := start(t, func(c *Config) { c.IdleTimeout = idle })
	bigAnswer(nil)
	up := newRawUpstream(t, answerEach(bigAnswer))
	h.exampleAt(up.addr())
	for _, first := range []bool{true, false} {
		cl := h.dialClient(t)
		if !first {
			h.resolver.set("ok.example", []netip.Addr{publicB})
			ok := newUpstream(t, false, nil)
			h.dialer.route(ap(publicB, 80), ok.addr())
			cl.get("http://ok.example/")
		}
		io.WriteString(cl.c, "GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n"+h.auth()+"\r\n")
		time.Sleep(10 * idle)
		cl.c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := io.Copy(io.Discard, cl.br)
		if isTimeout(err) || n >= 64<<20 {
			t.Errorf("first=%v: read %d bytes, then %v", first, n, err)
		}
	}
}

// An idle upstream connection that upstream reset is replaced by a new
// one for the next request, though the request's write is what fails.
func TestPlainResetUpstream(t *testing.T) {
	h := start(t, nil)
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err == nil {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
		c.(*net.TCPConn).SetLinger(0) // the close resets
	})
	h.exampleAt(up.addr())
	cl := h.dialClient(t)
	for i := range 5 {
		if resp, body := cl.get("http://example.com/"); resp.StatusCode != http.StatusOK || body != "ok" {
			t.Errorf("request %d: %s %q", i, resp.Status, body)
		}
		// Let the reset arrive before the next request.
		time.Sleep(20 * time.Millisecond)
	}
}

// Bytes that upstream sends on an idle connection after an answer are
// never taken as the answer to the next request on it, which may be
// another computer's for another host at the same address.
func TestPlainIdleUpstreamSpeaks(t *testing.T) {
	h := start(t, nil)
	up := newRawUpstream(t, answerEach(func(r *http.Request) string {
		if r.Host == "evil.example" {
			return "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n" +
				"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nPOISON"
		}
		if r.Method == http.MethodHead {
			return "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n"
		}
		return "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ngood"
	}))
	// Sent apart, so that the second answer comes to an idle connection.
	up2 := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		for {
			r, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if r.Host == "evil.example:81" {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
				time.Sleep(50 * time.Millisecond)
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nPOISON")
				continue
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ngood")
		}
	})
	for _, name := range []string{"evil.example", "victim.example"} {
		h.resolver.set(name, []netip.Addr{publicA})
	}
	h.dialer.route(ap(publicA, 80), up.addr())
	h.dialer.route(ap(publicA, 81), up2.addr())
	other := deriver(t).Derive(token.Egress, "c-other")
	for _, port := range []string{"", ":81"} {
		cl := h.dialClient(t)
		cl.get("http://evil.example" + port + "/")
		time.Sleep(200 * time.Millisecond)
		victim := h.dialClient(t)
		victim.c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(victim.c, "GET http://victim.example"+port+"/ HTTP/1.1\r\nHost: victim.example"+port+
			"\r\nProxy-Authorization: "+basic("c-other", other)+"\r\n\r\n")
		resp, err := http.ReadResponse(victim.br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if body, err := io.ReadAll(resp.Body); err != nil || string(body) != "good" {
			t.Errorf("port %q: the other computer got %v %q", port, err, body)
		}
	}
	// An upstream may send a body after its answer to a HEAD, any time:
	// its connection is not kept.
	h.dialer.route(ap(publicA, 82), up.addr())
	cl := h.dialClient(t)
	if resp, _, err := cl.do(http.MethodHead, "http://victim.example:82/", ""); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("HEAD: %v %v", err, resp)
	}
	// Its connection is put back or closed before the request is logged.
	testkit.EventuallyContext(t, testContext(t), "the HEAD logged", func() bool { return h.p.Stats().Active == 0 })
	if n := h.p.upstreams.idleConns(ap(publicA, 82)); n != 0 {
		t.Errorf("%d idle connections after a HEAD", n)
	}
}

// A request head whose lines end in a bare LF, which net/http accepts, is
// answered on a kept connection too, with a request pipelined after it.
func TestPlainKeptBareLF(t *testing.T) {
	h := start(t, func(c *Config) { c.ReadHeaderTimeout = time.Minute })
	up := newRawUpstream(t, answerEach(func(r *http.Request) string {
		return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(r.URL.Path), r.URL.Path)
	}))
	h.exampleAt(up.addr())
	lf := strings.ReplaceAll("GET http://example.com/lf HTTP/1.1\r\nHost: example.com\r\n"+h.auth()+"\r\n", "\r\n", "\n")
	crlf := "GET http://example.com/crlf HTTP/1.1\r\nHost: example.com\r\n" + h.auth() + "\r\n"
	for _, kept := range []bool{false, true} {
		for _, reqs := range [][]string{{lf}, {lf, crlf}} {
			cl := h.dialClient(t)
			if kept {
				cl.get("http://example.com/")
			}
			cl.c.SetDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(cl.c, strings.Join(reqs, ""))
			for i, want := range []string{"/lf", "/crlf"}[:len(reqs)] {
				resp, err := http.ReadResponse(cl.br, nil)
				if err != nil {
					t.Fatalf("kept=%v, answer %d of %d: %v", kept, i, len(reqs), err)
				}
				if body, _ := io.ReadAll(resp.Body); string(body) != want {
					t.Errorf("kept=%v, answer %d of %d: %q", kept, i, len(reqs), body)
				}
			}
		}
	}
}

// A CONNECT on a connection that was kept tunnels as on a new one: a
// quiet tunnel holds no buffer.
func TestPlainKeptConnectQuiet(t *testing.T) {
	h := start(t, nil)
	up := newUpstream(t, false, nil)
	echo := newEchoServer(t)
	h.exampleAt(up.addr())
	h.dialer.route(ap(publicA, 7), echo.addr())
	cl := h.dialClient(t)
	cl.get("http://example.com/a")
	cl.get("http://example.com/a")
	io.WriteString(cl.c, "CONNECT example.com:7 HTTP/1.1\r\nHost: example.com:7\r\n"+h.auth()+"\r\n")
	resp, err := http.ReadResponse(cl.br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %v %v", err, resp)
	}
	if err := roundTrip(t, cl.c, cl.br, "ping"); err != nil {
		t.Fatal(err)
	}
	waitBuffered(t, 0, "a quiet tunnel after kept requests")
}

// Hop-by-hop headers stay out of informational answers too.
func TestPlain1xxHeaders(t *testing.T) {
	h := start(t, nil)
	up := newRawUpstream(t, answerEach(func(r *http.Request) string {
		return "HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\nConnection: X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\n\r\n" +
			"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	}))
	h.exampleAt(up.addr())
	cl := h.dialClient(t)
	for i := range 2 {
		cl.c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(cl.c, "GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n"+h.auth()+"\r\n")
		resp, err := http.ReadResponse(cl.br, nil)
		if err != nil || resp.StatusCode != http.StatusEarlyHints || resp.Header.Get("Link") != "</s.css>" {
			t.Fatalf("request %d: %v %v", i, err, resp)
		}
		for _, k := range []string{"Connection", "X-Hop", "Keep-Alive"} {
			if v := resp.Header.Get(k); v != "" {
				t.Errorf("request %d: 103 with %s: %q", i, k, v)
			}
		}
		resp, err = http.ReadResponse(cl.br, nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %v %v", i, err, resp)
		}
		io.Copy(io.Discard, resp.Body)
	}
}

// A panic while a kept connection's request is served closes the client's
// connection, as net/http does for the connections it serves.
func TestPlainKeptPanicClosesClient(t *testing.T) {
	h := start(t, func(c *Config) {
		inner := c.Authenticate
		c.Authenticate = func(u, p string) (string, bool) {
			if u == "boom" {
				panic("boom")
			}
			return inner(u, p)
		}
	})
	up := newRawUpstream(t, answerEach(func(*http.Request) string {
		return "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
	}))
	h.exampleAt(up.addr())
	for _, kept := range []bool{false, true} {
		cl := h.dialClient(t)
		if kept {
			cl.get("http://example.com/a")
		}
		io.WriteString(cl.c, "GET http://example.com/b HTTP/1.1\r\nHost: example.com\r\nProxy-Authorization: "+basic("boom", "x")+"\r\n\r\n")
		cl.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := cl.br.ReadByte(); err != io.EOF {
			t.Errorf("kept=%v: after a panic the client read %v, want the connection closed", kept, err)
		}
	}
}

// exampleAt makes example.com resolve to publicA, whose port 80 leads to
// addr.
func (h *harness) exampleAt(addr string) {
	h.resolver.set("example.com", []netip.Addr{publicA})
	h.dialer.route(ap(publicA, 80), addr)
}

// On a kept connection the client has each answer before the proxy logs
// the request: a log that is slow to write holds no answer back.
func TestPlainKeptAnswerBeforeLog(t *testing.T) {
	logged := make(chan struct{})
	release := make(chan struct{})
	h := start(t, func(cfg *Config) {
		cfg.Logger = slog.New(&holdingHandler{logged: logged, release: release})
	})
	// Runs before the harness's cleanup, which waits for the handlers.
	t.Cleanup(func() { close(release) })
	up := newRawUpstream(t, answerEach(func(r *http.Request) string {
		return "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
	}))
	h.exampleAt(up.addr())
	cl := h.dialClient(t)
	for i := range 3 {
		answered := make(chan error, 1)
		go func() {
			_, body, err := cl.do(http.MethodGet, "http://example.com/", "")
			if err == nil && body != "hello" {
				err = fmt.Errorf("body %q", body)
			}
			answered <- err
		}()
		// The log of the request is held until the client has its answer.
		select {
		case <-logged:
		case <-time.After(10 * time.Second):
			t.Fatalf("request %d was not logged", i)
		}
		if err := <-answered; err != nil {
			t.Fatalf("request %d, its log held: %v", i, err)
		}
		release <- struct{}{}
	}
	if n := up.conns.Load(); n != 1 {
		t.Errorf("upstream got %d connections, want 1", n)
	}
}

// holdingHandler is a slog handler that, for each connection logged,
// signals logged and waits for release (at most 20 s); once release is
// closed, it holds nothing.
type holdingHandler struct {
	logged, release chan struct{}
}

func (h *holdingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *holdingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *holdingHandler) WithGroup(string) slog.Handler            { return h }

func (h *holdingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "egress connection" {
		return nil
	}
	select {
	case h.logged <- struct{}{}:
	case <-h.release:
		return nil
	}
	select {
	case <-h.release:
	case <-time.After(20 * time.Second):
	}
	return nil
}
