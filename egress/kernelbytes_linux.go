package egress

import (
	"net"

	"golang.org/x/sys/unix"
)

// kernelBytes sums the kernel's counters of bytes received and bytes sent
// and acknowledged over the TCP connections among cs. ok is false when
// none of them is a TCP connection whose counters can be read.
func kernelBytes(cs ...net.Conn) (n uint64, ok bool) {
	for _, c := range cs {
		if bc, ok := c.(*bufConn); ok {
			c = bc.Conn // its counters are the socket's
		}
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
