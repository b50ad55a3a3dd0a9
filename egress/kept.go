package egress

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"
)

// A client that sends plain GETs over a kept-alive connection has its
// connection taken over from net/http after the first of them, and served
// by keptConn, one goroutine that reads each request, forwards it and
// writes the answer. net/http's server reads every connection from a
// second goroutine while a request runs, so that it notices a client that
// goes away, and stops that reader with a deadline after each request; the
// hand-overs that costs were most of what the proxy added to a small GET.
// keptConn only watches the client while upstream is slow to answer, and
// not during the first request, which runs as the connection is taken
// over; a client gone meanwhile is seen when its answer is written.
//
// Anything but a GET or HEAD without a body, from an authenticated-looking
// HTTP/1.1 client that keeps its connection, with a head that fits in the
// connection's read buffer, is given back to net/http unread: CONNECT,
// bodies, refusals of malformed requests and the like stay net/http's.

// watchAfter is how long a request waits for upstream before keptConn
// watches its client for a close.
const watchAfter = 50 * time.Millisecond

// keptConn is a client connection served by the proxy itself.
type keptConn struct {
	p    *Proxy
	g    *group
	conn net.Conn
	br   *bufio.Reader // the connection's, from net/http
	bw   *bufio.Writer

	head  bytes.Reader  // the head of the next request, peeked
	parse *bufio.Reader // reads head

	timer   *time.Timer        // starts watchClient
	cancel  context.CancelFunc // ends the request being served
	watched chan struct{}      // watchClient has returned
}

// keepable reports whether the connection of r, a request that
// forwardPlain carries, can be taken over after it: r comes from Serve,
// over HTTP/1.1, and does not close its connection.
func keepable(r *http.Request) bool {
	g, ok := r.Context().Value(groupKey{}).(*group)
	return ok && g.back != nil && r.ProtoMajor == 1 && r.ProtoMinor >= 1 && !r.Close
}

// forwardKept takes over the connection of r, forwards r on it, and
// serves the requests that follow in a goroutine of its own. If the
// connection cannot be taken over, r goes to forwardPlain.
func (p *Proxy) forwardKept(w http.ResponseWriter, r *http.Request, rec *record, target netip.AddrPort, authority string) {
	g := r.Context().Value(groupKey{}).(*group)
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		p.forwardPlain(w, r, rec, target, authority)
		return
	}
	conn = unwrapConn(conn)
	// net/http no longer closes the connection when Serve ends.
	stop := context.AfterFunc(g.ctx, func() { conn.Close() })
	bw := brw.Writer
	bw.Reset(clientWriter{conn, p.cfg.IdleTimeout})
	kc := &keptConn{p: p, g: g, conn: conn, br: brw.Reader, bw: bw, watched: make(chan struct{}, 1)}
	kc.timer = time.AfterFunc(time.Hour, kc.watchClient)
	kc.timer.Stop()
	cw := newConnWriter(kc.bw, r)
	p.forwardPlain(cw, r, rec, target, authority)
	rec.then = func() {
		defer stop()
		kc.serve(cw)
	}
}

// clientWriter writes to a kept client connection, each write within
// timeout: a client that takes no byte of an answer for IdleTimeout is
// gone, as a tunnel that moves none for as long is idle.
type clientWriter struct {
	conn    net.Conn
	timeout time.Duration
}

func (w clientWriter) Write(p []byte) (int, error) {
	w.conn.SetWriteDeadline(time.Now().Add(w.timeout))
	return w.conn.Write(p)
}

// serve ends the answer in first and serves the connection's next
// requests, until it closes, fails, goes idle for KeepAliveTimeout or
// Serve ends, or a request comes that net/http must serve. It runs after
// the first request is logged, in its handler's goroutine.
func (kc *keptConn) serve(first *connWriter) {
	defer func() {
		// net/http recovers a handler's panic but does not close a
		// connection it no longer owns.
		if v := recover(); v != nil {
			kc.conn.Close()
			panic(v)
		}
	}()
	if !first.finish() {
		kc.conn.Close()
		return
	}
	for {
		r, n, err := kc.next()
		if err != nil {
			kc.conn.Close()
			return
		}
		if r == nil {
			// net/http sets the deadlines it needs, and a tunnel none.
			kc.conn.SetDeadline(time.Time{})
			if !kc.g.back.give(&bufConn{Conn: kc.conn, r: kc.br}) {
				kc.conn.Close()
			}
			return
		}
		kc.br.Discard(n)
		ctx, cancel := context.WithCancel(kc.g.ctx)
		r = r.WithContext(ctx)
		r.RemoteAddr = kc.conn.RemoteAddr().String()
		cw := newConnWriter(kc.bw, r)
		kc.cancel = cancel
		kc.timer.Reset(watchAfter)
		kc.p.ServeHTTP(cw, r)
		if !kc.timer.Stop() {
			// watchClient runs: stop it, and wait until it has.
			kc.conn.SetReadDeadline(aLongTimeAgo)
			<-kc.watched
		}
		cancel()
		if !cw.finish() {
			kc.conn.Close()
			return
		}
	}
}

// next waits for the next request and returns it with the length of its
// head, or returns nil when keptConn does not serve it, its bytes unread.
func (kc *keptConn) next() (*http.Request, int, error) {
	cfg := &kc.p.cfg
	kc.conn.SetReadDeadline(time.Now().Add(cfg.KeepAliveTimeout))
	if _, err := kc.br.Peek(1); err != nil {
		return nil, 0, err
	}
	deadline := false
	var b []byte
	for {
		b, _ = kc.br.Peek(kc.br.Buffered())
		if i := bytes.Index(b, []byte("\r\n\r\n")); i >= 0 {
			b = b[:i+4]
		}
		if bareLF(b) {
			// net/http reads such heads; where they end is its to find.
			return nil, 0, nil
		}
		if bytes.HasSuffix(b, []byte("\r\n\r\n")) {
			break
		}
		if len(b) == kc.br.Size() || len(b) >= cfg.MaxHeaderBytes {
			return nil, 0, nil
		}
		if !deadline {
			kc.conn.SetReadDeadline(time.Now().Add(cfg.ReadHeaderTimeout))
			deadline = true
		}
		if _, err := kc.br.Peek(len(b) + 1); err != nil {
			return nil, 0, err
		}
	}
	kc.head.Reset(b)
	if kc.parse == nil {
		kc.parse = bufio.NewReaderSize(&kc.head, kc.br.Size())
	} else {
		kc.parse.Reset(&kc.head)
	}
	r, err := http.ReadRequest(kc.parse)
	if err != nil || kc.parse.Buffered() > 0 || !validHostLine(b) || !serves(r) {
		return nil, 0, nil
	}
	return r, len(b), nil
}

// bareLF reports whether b has a line feed without a carriage return
// before it.
func bareLF(b []byte) bool {
	for i, c := range b {
		if c == '\n' && (i == 0 || b[i-1] != '\r') {
			return true
		}
	}
	return false
}

// validHostLine reports whether head has a Host line with a valid value,
// as net/http's server requires of HTTP/1.1 requests (http.ReadRequest
// takes the line out of the header).
func validHostLine(head []byte) bool {
	for line := range bytes.SplitSeq(head, []byte("\r\n")) {
		if len(line) >= 5 && bytes.EqualFold(line[:5], []byte("host:")) {
			return httpguts.ValidHostHeader(string(bytes.TrimSpace(line[5:])))
		}
	}
	return false
}

// serves reports whether keptConn serves r: a GET or HEAD without a body
// that forwardPlain carries, from an HTTP/1.1 client that keeps its
// connection, with proxy credentials, and well-formed as net/http's
// server requires.
func serves(r *http.Request) bool {
	if r.ProtoMajor != 1 || r.ProtoMinor < 1 || r.Close || r.Header["Proxy-Authorization"] == nil {
		return false
	}
	for k, vs := range r.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return false
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				return false
			}
		}
	}
	_, _, authority, ok := requestTarget(r)
	return ok && plainOnly(r, authority)
}

// watchClient cancels the request being served if its client closes the
// connection meanwhile. It waits for the client's socket until serve stops
// it with a read deadline. Bytes from the client (a pipelined request)
// end the watch.
func (kc *keptConn) watchClient() {
	defer func() { kc.watched <- struct{}{} }()
	rc := rawConn(kc.conn)
	if rc == nil || kc.br.Buffered() > 0 {
		return
	}
	if err := waitReadable(rc); err != nil {
		return
	}
	if peerClosed(rc) {
		kc.cancel()
	}
}

// handBack is a listener of the connections that keptConn gives back to
// Serve's http.Server, which serves it besides the proxy's own listener.
type handBack struct {
	addr net.Addr
	ch   chan net.Conn
	once sync.Once
	done chan struct{}
}

func newHandBack(addr net.Addr) *handBack {
	return &handBack{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

// give hands c to the server; false once the listener is closed.
func (l *handBack) give(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

// Accept returns the next connection given back.
func (l *handBack) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close ends Accept and give.
func (l *handBack) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr is the address of the proxy's own listener.
func (l *handBack) Addr() net.Addr { return l.addr }

// bufConn is a connection given back with the bytes already read from it
// in r, which are read first.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

// unwrapConn returns the connection under c when c is a bufConn whose
// early bytes have all been read, so that the socket itself is seen.
func unwrapConn(c net.Conn) net.Conn {
	if bc, ok := c.(*bufConn); ok && (bc.r == nil || bc.r.Buffered() == 0) {
		return bc.Conn
	}
	return c
}

func (c *bufConn) Read(p []byte) (int, error) {
	if c.r != nil {
		if c.r.Buffered() > 0 {
			return c.r.Read(p)
		}
		c.r = nil
	}
	return c.Conn.Read(p)
}

// CloseWrite half-closes the connection, as net/http's server does
// before it closes some.
func (c *bufConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}
