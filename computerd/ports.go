package computerd

import (
	"fmt"
	"strconv"
	"strings"
)

// Port previews: computerd passes any request under PortsPath + "{port}/"
// on to http://127.0.0.1:{port} inside the computer, with the rest of the
// path, the query and the body, websockets included, so that whoever may
// call computerd reaches the computer's own web servers through the one
// link every provider gives (a Docker network, the relay, a tunnel). The
// Authorization header that computerd checked is not passed on, and
// computerd's own port is refused. A port nobody listens on answers 502
// CodePortClosed.
const PortsPath = "/v1/ports/"

// CodePortClosed is the code of a port preview whose port refuses
// connections (502).
const CodePortClosed = "port_closed"

// ParsePort reads a TCP port that previews may reach: 1..65535, not
// computerd's own.
func ParsePort(s string) (int, error) {
	// Digits only, no leading zero: one spelling per port.
	p, err := strconv.Atoi(s)
	if err != nil || strings.Trim(s, "0123456789") != "" || s[0] == '0' || p > 65535 {
		return 0, fmt.Errorf("port: %q is not a TCP port (1 to 65535)", s)
	}
	if p == Port {
		return 0, fmt.Errorf("port: %d is computerd's own", p)
	}
	return p, nil
}
