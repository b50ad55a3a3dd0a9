package egress

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"net/netip"
)

// forward sends a plain http:// request to the checked address target and
// streams the answer back. Hop-by-hop headers (those named in Connection
// too) and the proxy credentials are dropped both ways, and no
// X-Forwarded-* header is added. Protocol upgrades are not forwarded here:
// clients tunnel them through CONNECT.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, rec *record, target netip.AddrPort, authority string) {
	r.Header.Del("Upgrade")
	if plainOnly(r, authority) {
		if _, kept := w.(*connWriter); !kept && keepable(r) {
			p.forwardKept(w, r, rec, target, authority)
			return
		}
		p.forwardPlain(w, r, rec, target, authority)
		return
	}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = &countingBody{ReadCloser: r.Body, add: rec.addUp}
	}
	rec.verdict = VerdictAllowed
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = target.String()
			pr.Out.Host = authority
		},
		Transport:  p.transport,
		ErrorLog:   p.errLog,
		BufferPool: bufferPool{},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			rec.err = err
			if errors.Is(r.Context().Err(), context.Canceled) {
				// The client has gone; there is no one to answer.
				return
			}
			p.refuse(w, r, rec, VerdictUpstreamFailure)
		},
	}
	rp.ServeHTTP(&countingWriter{ResponseWriter: w, add: rec.addDown}, r)
}

// countingBody counts the bytes of a request body as they are read.
type countingBody struct {
	io.ReadCloser
	add func(int)
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.add(n)
	return n, err
}

// countingWriter counts the bytes of a response body as they are written.
type countingWriter struct {
	http.ResponseWriter
	add func(int)
}

func (w *countingWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	w.add(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the connection's Flush.
func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
