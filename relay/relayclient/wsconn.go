package relayclient

import (
	"context"
	"encoding/binary"
	"net"
	"net/http"
	"sync"
	"time"
)

// The agent is the websocket client, and a client must mask every byte it
// sends. The websocket library masks through its own 4 KB buffer and hands
// each 4 KB to the connection below as a separate write, so a bulk download
// would cost one system call (and one TCP push) per 4 KB. The agent's
// connection to the relay therefore goes through a coalescer: while the
// link writes a yamux frame, the coalescer gathers what the websocket
// writes, and it sends it on when the frame is done, in writes of up to
// coalesceSize. A yamux data header is held back until its body follows,
// so that the two leave in one write.
const coalesceSize = 256 << 10

// coalescer is the connection under the agent's websocket.
type coalescer struct {
	net.Conn
	mu   sync.Mutex
	hold bool
	buf  []byte
}

// Write sends p, or gathers it while a frame is being written.
func (c *coalescer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.hold {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
		return c.Conn.Write(p)
	}
	if len(c.buf)+len(p) > coalesceSize {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
		if len(p) >= coalesceSize {
			return c.Conn.Write(p)
		}
	}
	if c.buf == nil {
		c.buf = make([]byte, 0, coalesceSize)
	}
	c.buf = append(c.buf, p...)
	return len(p), nil
}

// begin starts gathering writes.
func (c *coalescer) begin() {
	c.mu.Lock()
	c.hold = true
	c.mu.Unlock()
}

// done ends a frame: it sends what was gathered unless more of the frame
// follows.
func (c *coalescer) done(more bool) error {
	if more {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hold = false
	return c.flushLocked()
}

func (c *coalescer) flushLocked() error {
	if len(c.buf) == 0 {
		return nil
	}
	_, err := c.Conn.Write(c.buf)
	c.buf = c.buf[:0]
	return err
}

// linkConn is the net.Conn that yamux runs on: a websocket carried over a
// coalescer. Only yamux's send loop writes to it.
type linkConn struct {
	net.Conn // websocket.NetConn
	raw      *coalescer
	// inBody is set while the write that follows is the body of the
	// data header just written: a body is never itself a header, even
	// when its bytes look like one.
	inBody bool
}

func (c *linkConn) Write(p []byte) (int, error) {
	c.raw.begin()
	n, err := c.Conn.Write(p)
	more := err == nil && !c.inBody && bodyFollows(p)
	c.inBody = more
	ferr := c.raw.done(more)
	if err == nil {
		err = ferr
	}
	return n, err
}

// bodyFollows reports whether p is a yamux data header announcing a body,
// which yamux's send loop writes next.
func bodyFollows(p []byte) bool {
	const (
		headerSize = 12
		protoVer   = 0
		typeData   = 0
	)
	return len(p) == headerSize && p[0] == protoVer && p[1] == typeData &&
		binary.BigEndian.Uint32(p[8:12]) > 0
}

// coalescingClient returns a copy of base (nil is http.DefaultClient) whose
// connections are dialled through coalescers, and a function that returns
// the coalescer of the last connection it dialled. ok is false when base's
// transport is not an *http.Transport, which cannot be wrapped.
func coalescingClient(base *http.Client) (c *http.Client, last func() *coalescer, ok bool) {
	if base == nil {
		base = http.DefaultClient
	}
	rt := base.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	tr, isTransport := rt.(*http.Transport)
	if !isTransport {
		return base, nil, false
	}
	tr = tr.Clone()
	var mu sync.Mutex
	var lastConn *coalescer
	wrap := func(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
		return func(ctx context.Context, network, addr string) (net.Conn, error) {
			nc, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			cc := &coalescer{Conn: nc}
			mu.Lock()
			lastConn = cc
			mu.Unlock()
			return cc, nil
		}
	}
	dial := tr.DialContext
	if dial == nil {
		d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
		dial = d.DialContext
	}
	tr.DialContext = wrap(dial)
	if tr.DialTLSContext != nil {
		tr.DialTLSContext = wrap(tr.DialTLSContext)
	}
	cp := *base
	cp.Transport = tr
	return &cp, func() *coalescer {
		mu.Lock()
		defer mu.Unlock()
		return lastConn
	}, true
}
