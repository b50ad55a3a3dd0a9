//go:build !unix

package egress

import (
	"net"
	"syscall"
)

// rawConn returns nil here: without a way to peek at a socket, a quiet
// direction of a tunnel waits in Read with its buffer.
func rawConn(net.Conn) syscall.RawConn { return nil }

// waitReadable is never called here (rawConn is always nil).
func waitReadable(syscall.RawConn) error { return nil }

// peerClosed is never called here (rawConn is always nil).
func peerClosed(syscall.RawConn) bool { return false }

// quiet is always false here: an idle upstream connection that cannot be
// looked at is not used again.
func quiet(net.Conn) bool { return false }
