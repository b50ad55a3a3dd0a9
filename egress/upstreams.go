package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Idle upstream connections of plain requests are kept as net/http's
// Transport keeps them for the other plain requests: at most
// maxIdlePerTarget for one checked address, maxIdle in all, and each for
// idleConnTimeout.
const (
	maxIdlePerTarget = 16
	maxIdle          = 256
	idleConnTimeout  = 90 * time.Second
	// maxResponseHeaderBytes bounds the head of an answer from upstream,
	// 1xx answers before it included.
	maxResponseHeaderBytes = 1 << 20
)

// aLongTimeAgo is a deadline that has passed: setting it stops a read or
// write that is waiting.
var aLongTimeAgo = time.Unix(1, 0)

// upConn is a connection to an upstream server that carries one plain
// request at a time and is kept between them.
type upConn struct {
	conn   net.Conn
	target netip.AddrPort
	br     *bufio.Reader // reads through limitedRead
	bw     *bufio.Writer

	limit int64 // bytes that may still be read; bounds a response head
	nread int64 // bytes read since the request was sent

	gone atomic.Bool // the client went away while this request ran
	stop func() bool // stops watching the client's context

	idleSince time.Time   // under the pool's lock
	timer     *time.Timer // closes the connection when idle too long
}

// newUpConn wraps a connection to target.
func newUpConn(c net.Conn, target netip.AddrPort) *upConn {
	u := &upConn{conn: c, target: target, limit: math.MaxInt64}
	u.br = bufio.NewReaderSize(limitedRead{u}, 4<<10)
	u.bw = bufio.NewWriterSize(c, 4<<10)
	return u
}

// limitedRead reads from an upConn's connection, within its limit.
type limitedRead struct{ u *upConn }

var errHeadTooLarge = fmt.Errorf("upstream answer head larger than %d bytes", maxResponseHeaderBytes)

func (l limitedRead) Read(p []byte) (int, error) {
	u := l.u
	if u.limit <= 0 {
		return 0, errHeadTooLarge
	}
	if int64(len(p)) > u.limit {
		p = p[:u.limit]
	}
	n, err := u.conn.Read(p)
	u.limit -= int64(n)
	u.nread += int64(n)
	return n, err
}

// watch stops the connection's reads and writes when ctx ends (the
// client went away, or the proxy is shutting down).
func (u *upConn) watch(ctx context.Context) {
	u.gone.Store(false)
	u.stop = context.AfterFunc(ctx, func() {
		u.gone.Store(true)
		u.conn.SetDeadline(aLongTimeAgo)
	})
}

// unwatch stops watching and reports whether the connection is still
// fit for use, that is, ctx did not end meanwhile.
func (u *upConn) unwatch() bool {
	return u.stop() && !u.gone.Load()
}

// extend gives the next read from upstream d more time, unless the
// client has gone.
func (u *upConn) extend(d time.Duration) error {
	u.conn.SetReadDeadline(time.Now().Add(d))
	if u.gone.Load() {
		u.conn.SetDeadline(aLongTimeAgo)
		return context.Canceled
	}
	return nil
}

// close closes the connection for good.
func (u *upConn) close() {
	u.conn.Close()
	if u.timer != nil {
		u.timer.Stop()
	}
}

// upstreamPool holds the idle upstream connections of plain requests, by
// the checked address they are connected to.
type upstreamPool struct {
	mu   sync.Mutex
	idle map[netip.AddrPort][]*upConn
	n    int
}

// get takes the most recently used idle connection to target, or nil.
// Nothing reads an idle connection: one on which upstream has sent
// anything meanwhile (bytes, an end, a reset) is closed, not used, so
// that late bytes are never taken for the next request's answer, which
// may be another computer's.
func (p *upstreamPool) get(target netip.AddrPort) *upConn {
	for {
		u := p.take(target)
		if u == nil || quiet(u.conn) {
			return u
		}
		u.close()
	}
}

// take takes the most recently used idle connection to target, or nil.
func (p *upstreamPool) take(target netip.AddrPort) *upConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	cs := p.idle[target]
	if len(cs) == 0 {
		return nil
	}
	u := cs[len(cs)-1]
	cs[len(cs)-1] = nil
	if len(cs) == 1 {
		delete(p.idle, target)
	} else {
		p.idle[target] = cs[:len(cs)-1]
	}
	p.n--
	return u
}

// put keeps u for the next request to its target, or closes it when the
// pool is full.
func (p *upstreamPool) put(u *upConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.idle[u.target]) >= maxIdlePerTarget || p.n >= maxIdle {
		u.close()
		return
	}
	if p.idle == nil {
		p.idle = map[netip.AddrPort][]*upConn{}
	}
	p.idle[u.target] = append(p.idle[u.target], u)
	p.n++
	u.idleSince = time.Now()
	if u.timer == nil {
		u.timer = time.AfterFunc(idleConnTimeout, func() { p.expire(u) })
	} else {
		u.timer.Reset(idleConnTimeout)
	}
}

// expire closes u if it is still idle and has been for idleConnTimeout.
func (p *upstreamPool) expire(u *upConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(u.idleSince) < idleConnTimeout || !p.remove(u) {
		return
	}
	u.conn.Close()
}

// remove takes u out of the idle connections; false if it was not one.
// The caller holds p.mu.
func (p *upstreamPool) remove(u *upConn) bool {
	cs := p.idle[u.target]
	for i, c := range cs {
		if c == u {
			cs = slices.Delete(cs, i, i+1)
			if len(cs) == 0 {
				delete(p.idle, u.target)
			} else {
				p.idle[u.target] = cs
			}
			p.n--
			return true
		}
	}
	return false
}

// closeIdle closes every idle connection.
func (p *upstreamPool) closeIdle() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, cs := range p.idle {
		for _, u := range cs {
			u.close()
		}
	}
	p.idle, p.n = nil, 0
}

// idleConns is the number of idle connections to target.
func (p *upstreamPool) idleConns(target netip.AddrPort) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle[target])
}

// isTimeout reports whether err is a deadline that passed.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
