//go:build unix

package egress

import (
	"errors"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// rawConn returns the socket behind c, or nil when c is not one.
func rawConn(c net.Conn) syscall.RawConn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// waitReadable waits until the socket behind rc has bytes to read, has
// ended or has an error, without reading any. A pending error (a reset,
// say) is left for the read that follows to report.
func waitReadable(rc syscall.RawConn) error {
	var b [1]byte
	return rc.Read(func(fd uintptr) bool {
		for {
			_, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return !errors.Is(err, unix.EAGAIN)
		}
	})
}

// peerClosed reports whether the peer of the socket behind rc has closed
// it or reset it, without reading a byte.
func peerClosed(rc syscall.RawConn) bool {
	closed := false
	rc.Read(func(fd uintptr) bool {
		n, err := peek(fd)
		closed = n == 0 && err == nil || err != nil && !errors.Is(err, unix.EAGAIN)
		return true
	})
	return closed
}

// quiet reports whether the socket behind c has nothing to read and no
// end or error waiting, without reading a byte; false when c is not a
// socket.
func quiet(c net.Conn) bool {
	rc := rawConn(c)
	if rc == nil {
		return false
	}
	quiet := false
	err := rc.Control(func(fd uintptr) {
		_, err := peek(fd)
		quiet = errors.Is(err, unix.EAGAIN)
	})
	return err == nil && quiet
}

// peek looks at the socket fd without taking a byte or waiting: n is 1
// when a byte waits, 0 with a nil error at the peer's end, and the error
// is EAGAIN when nothing waits.
func peek(fd uintptr) (int, error) {
	var b [1]byte
	for {
		n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		if !errors.Is(err, unix.EINTR) {
			return n, err
		}
	}
}
