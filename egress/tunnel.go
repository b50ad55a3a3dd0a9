package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

var errStratum = errors.New("stratum login in the first bytes of the tunnel")

// tunnel answers a CONNECT: it dials the checked address target, takes
// over the client's connection, and moves bytes both ways until both sides
// are done, the tunnel has been idle for IdleTimeout, or r's context ends.
// A side that ends cleanly half-closes the other, so that each direction
// finishes on its own.
func (p *Proxy) tunnel(w http.ResponseWriter, r *http.Request, rec *record, target netip.AddrPort) {
	up, err := p.dial(r.Context(), target)
	if err != nil {
		rec.err = err
		p.refuse(w, r, rec, VerdictUpstreamFailure)
		return
	}
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		up.Close()
		rec.err = fmt.Errorf("take over client connection: %w", err)
		p.refuse(w, r, rec, VerdictBadRequest)
		return
	}
	rec.verdict = VerdictAllowed
	// A connection that keptConn gave back is seen as the socket it is,
	// as a new one is, for the waits and counters of the tunnel.
	client = unwrapConn(client)
	// Bytes the client sent right after its request are already buffered.
	early, _ := brw.Reader.Peek(brw.Reader.Buffered())
	early = append([]byte(nil), early...)
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		client.Close()
		up.Close()
		rec.err = err
		return
	}
	t := &tunnel{p: p, rec: rec, client: client, up: up}
	if p.cfg.Abuse {
		t.sniff = &stratumSniffer{}
	}
	t.run(r.Context(), early)
}

// tunnel is one open CONNECT tunnel.
type tunnel struct {
	p          *Proxy
	rec        *record
	client, up net.Conn
	sniff      *stratumSniffer // nil unless abuse checks are on
	last       atomic.Int64    // clock time of the last read, in ns
	endOnce    sync.Once
}

func (t *tunnel) run(ctx context.Context, early []byte) {
	t.touch()
	done := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		t.watch(ctx, done)
	}()
	downErr := make(chan error, 1)
	go func() {
		err := t.pipe(t.client, t.up, t.rec.addDown, nil)
		t.finishDirection(t.client, err)
		downErr <- err
	}()

	err := t.pipeUp(early)
	if errors.Is(err, errStratum) {
		t.rec.verdict = VerdictAbuseMining
		t.end("stratum login")
		t.p.report(t.rec)
	}
	t.finishDirection(t.up, err)
	derr := <-downErr
	close(done)
	<-watched
	t.end("")
	if t.rec.err == nil {
		t.rec.err = firstReal(err, derr)
	}
}

// pipeUp moves the client's bytes upstream, early ones first, looking at
// the first of them for a stratum login when abuse checks are on.
func (t *tunnel) pipeUp(early []byte) error {
	if len(early) > 0 {
		t.touch()
		if t.sniff != nil && t.sniff.feed(early) {
			return errStratum
		}
		n, err := t.up.Write(early)
		t.rec.addUp(n)
		if err != nil {
			return err
		}
	}
	return t.pipe(t.up, t.client, t.rec.addUp, t.sniff)
}

// pipe copies src to dst until src ends, and returns nil at a clean end.
// With a sniffer, the first bytes are shown to it until it has decided.
// Buffers come from getBuffer, sized as bufferSizes explains; while src is
// a quiet socket, the direction waits with no buffer.
func (t *tunnel) pipe(dst, src net.Conn, add func(int), sniff *stratumSniffer) error {
	rc := rawConn(src)
	var buf *[]byte
	class := 0
	defer func() {
		if buf != nil {
			putBuffer(buf, class)
		}
	}()
	for {
		if buf == nil {
			if rc != nil {
				if err := waitReadable(rc); err != nil {
					return err
				}
			}
			buf, class = getBuffer(class)
		}
		b := *buf
		n, rerr := src.Read(b)
		if n > 0 {
			t.touch()
			if sniff != nil && !sniff.done && sniff.feed(b[:n]) {
				return errStratum
			}
			wn, werr := dst.Write(b[:n])
			add(wn)
			if werr != nil {
				return werr
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
		// A read that did not fill the buffer drained src for now: the
		// buffer goes back, so that a direction gone quiet holds none.
		if next := nextClass(class, n); next != class || (n < len(b) && rc != nil) {
			putBuffer(buf, class)
			buf, class = nil, next
		}
	}
}

// finishDirection ends the direction that writes to dst: with a
// half-close after a clean end, or by closing the tunnel after an error.
func (t *tunnel) finishDirection(dst net.Conn, err error) {
	if err == nil {
		if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
			return
		}
	}
	t.end("")
}

// touch notes that bytes were read.
func (t *tunnel) touch() { t.last.Store(t.p.clock.Now().UnixNano()) }

// watch closes the tunnel when it has been idle for IdleTimeout or ctx
// ends, until done is closed. A write to a slow reader can take long
// with no sign of progress until it returns, so besides the bytes read,
// watch reads the kernel's counters of both sockets (bytes received, and
// bytes sent and acknowledged) every quarter of the timeout: a tunnel is
// idle when neither has moved for IdleTimeout.
func (t *tunnel) watch(ctx context.Context, done <-chan struct{}) {
	idle := t.p.cfg.IdleTimeout
	poll := max(idle/4, time.Millisecond)
	moved, _ := kernelBytes(t.client, t.up)
	wake := t.p.clock.After(poll)
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			t.end("shutdown")
			return
		case <-wake:
		}
		if n, ok := kernelBytes(t.client, t.up); ok && n != moved {
			moved = n
			t.touch()
		}
		quiet := t.p.clock.Now().Sub(time.Unix(0, t.last.Load()))
		if quiet >= idle {
			t.end("idle")
			return
		}
		wake = t.p.clock.After(min(poll, idle-quiet))
	}
}

// end closes both sides once, noting why when the proxy ended the tunnel.
func (t *tunnel) end(why string) {
	t.endOnce.Do(func() {
		t.rec.closed = why
		t.client.Close()
		t.up.Close()
	})
}

// firstReal returns the first error that is not the result of the proxy
// closing the tunnel itself.
func firstReal(errs ...error) error {
	for _, err := range errs {
		if err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, errStratum) {
			return err
		}
	}
	return nil
}
