package daemon

import (
	"crypto/tls"
	"fmt"
	"net"
)

// listenTLS opens TURN over TLS; a :PORT address takes the TURN host.
func listenTLS(addr, host, certFile, keyFile string) (net.Listener, error) {
	if certFile == "" || keyFile == "" {
		return nil, fmt.Errorf("TURN_TLS_LISTEN=%q needs TURN_TLS_CERT and TURN_TLS_KEY", addr)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("TURN_TLS_CERT/TURN_TLS_KEY: %w", err)
	}
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("TURN_TLS_LISTEN=%q: want HOST:PORT or :PORT", addr)
	}
	if h == "" {
		h = host
	}
	ln, err := net.Listen("tcp4", net.JoinHostPort(h, p))
	if err != nil {
		return nil, fmt.Errorf("TURN_TLS_LISTEN %s: %w", addr, err)
	}
	return tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}), nil
}
