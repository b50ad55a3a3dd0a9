package egress

import (
	"errors"
	"io"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// maxSpliceChunk bounds one splice. Each splice moves at most what src
// has already received, so that it never waits for the sender while it
// holds a pipe; an idle direction waits for readability with no buffer
// and no pipe at all.
const maxSpliceChunk = 4 << 20

// spliceable returns dst and src as TCP connections when both are, so that
// bytes can move between them in the kernel.
func spliceable(dst, src net.Conn) (d, s *net.TCPConn, ok bool) {
	d, ok1 := dst.(*net.TCPConn)
	s, ok2 := src.(*net.TCPConn)
	return d, s, ok1 && ok2
}

// splice moves src to dst with splice(2) (Go's TCPConn.ReadFrom), one
// chunk of already-received bytes at a time, until src ends. It returns
// nil at a clean end. Byte counts are added after each chunk, including
// the part of a chunk moved before an error.
func (t *tunnel) splice(dst, src *net.TCPConn, add func(int)) error {
	rc, err := src.SyscallConn()
	if err != nil {
		_, err := t.copy(dst, src, add, nil)
		return err
	}
	for {
		avail, err := waitReadable(rc)
		if err != nil {
			return err
		}
		if avail == 0 {
			// Readable with nothing queued: the end of the stream, or
			// an error, which a plain read reports.
			var b [1]byte
			n, err := src.Read(b[:])
			if n > 0 {
				wn, werr := dst.Write(b[:n])
				add(wn)
				if werr != nil {
					return werr
				}
				continue
			}
			if err == io.EOF {
				return nil
			}
			if err == nil {
				continue
			}
			return err
		}
		lr := &io.LimitedReader{R: src, N: int64(min(avail, maxSpliceChunk))}
		n, err := dst.ReadFrom(lr)
		add(int(n))
		if err != nil {
			return err
		}
		if lr.N > 0 {
			return nil // src ended inside the chunk
		}
	}
}

// waitReadable waits until the socket behind rc has bytes to read or has
// ended, without reading any, and returns how many bytes are queued.
func waitReadable(rc syscall.RawConn) (avail int, err error) {
	var b [1]byte
	var serr error
	err = rc.Read(func(fd uintptr) bool {
		for {
			_, _, serr = unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
			if serr != unix.EINTR {
				break
			}
		}
		if serr == unix.EAGAIN {
			return false
		}
		if serr == nil {
			avail, serr = unix.IoctlGetInt(int(fd), unix.SIOCINQ)
		}
		return true
	})
	if err != nil {
		return 0, err
	}
	if serr != nil && !errors.Is(serr, unix.EAGAIN) {
		// A pending socket error (a reset, say): the read that follows
		// reports it.
		return 0, nil
	}
	return avail, nil
}

// kernelBytes sums the kernel's counters of bytes received and bytes sent
// and acknowledged over the TCP connections among cs. ok is false when
// none of them is a TCP connection whose counters can be read.
func kernelBytes(cs ...net.Conn) (n uint64, ok bool) {
	for _, c := range cs {
		tc, isTCP := c.(*net.TCPConn)
		if !isTCP {
			continue
		}
		rc, err := tc.SyscallConn()
		if err != nil {
			continue
		}
		var info *unix.TCPInfo
		var ierr error
		if err := rc.Control(func(fd uintptr) {
			info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		}); err != nil || ierr != nil {
			continue
		}
		n += info.Bytes_received + info.Bytes_acked
		ok = true
	}
	return n, ok
}
