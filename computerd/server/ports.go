package server

import (
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/berthdev/berth/computerd"
)

// portDialTimeout bounds the connection to a port inside the computer.
const portDialTimeout = 5 * time.Second

// portTransport reaches the computer's own ports on loopback.
var portTransport = &http.Transport{
	DialContext:           (&net.Dialer{Timeout: portDialTimeout}).DialContext,
	MaxIdleConnsPerHost:   8,
	IdleConnTimeout:       30 * time.Second,
	ResponseHeaderTimeout: 60 * time.Second,
}

// handlePorts passes a request under computerd.PortsPath on to the port
// it names, on loopback.
func (s *Server) handlePorts(w http.ResponseWriter, r *http.Request) error {
	rest := strings.TrimPrefix(r.URL.Path, computerd.PortsPath)
	num, path, _ := strings.Cut(rest, "/")
	port, err := computerd.ParsePort(num)
	if err != nil {
		return badRequest("%v", err)
	}
	target := &url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = target.Scheme, target.Host
			pr.Out.URL.Path, pr.Out.URL.RawPath = "/"+path, ""
			pr.Out.Host = target.Host
			pr.Out.Header.Del("Authorization") // computerd's token, not the app's
			pr.SetXForwarded()
		},
		Transport:  portTransport,
		BufferPool: computerd.PreviewBuffers,
		// No FlushInterval: answers of unknown length (event streams,
		// long polls) are flushed as they come anyway.
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, syscall.ECONNREFUSED) {
				writeError(w, errorf(http.StatusBadGateway, computerd.CodePortClosed, "nothing listens on port %d in the computer", port))
				return
			}
			s.log.Info("port preview failed", "port", port, "err", err)
			writeError(w, errorf(http.StatusBadGateway, computerd.CodeInternal, "port %d: %v", port, err))
		},
	}
	rp.ServeHTTP(w, r)
	return nil
}
