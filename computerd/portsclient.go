package computerd

import (
	"context"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// PreviewHeaderTimeout bounds the wait for the answer's headers from a
// port preview (the body, and a websocket, may then last).
const PreviewHeaderTimeout = 60 * time.Second

// PortProxy returns a handler that passes each request it serves on to
// port inside the computer (see PortsPath): the request's path becomes
// the path at that port; its Authorization header is replaced by the
// client's. Errors are written with onError.
func (c *Client) PortProxy(port int, onError func(http.ResponseWriter, *http.Request, error)) *httputil.ReverseProxy {
	base, err := url.Parse(c.base)
	if err != nil {
		return &httputil.ReverseProxy{Rewrite: func(*httputil.ProxyRequest) {}, Transport: failing{err}, ErrorHandler: onError}
	}
	prefix := PortsPath + strconv.Itoa(port)
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = base.Scheme, base.Host
			pr.Out.URL.Path = base.Path + prefix + pr.In.URL.Path
			pr.Out.URL.RawPath = ""
			pr.Out.Host = base.Host
			pr.Out.Header.Del("Authorization")
			c.setHeaders(pr.Out.Header)
			pr.SetXForwarded()
		},
		Transport:    headerDeadline{next: c.hc.Transport, d: PreviewHeaderTimeout},
		BufferPool:   PreviewBuffers,
		ErrorHandler: onError,
		// No FlushInterval: answers of unknown length (event streams,
		// long polls) are flushed as they come anyway.
	}
}

// PreviewBuffers are the buffers port previews copy bodies through.
var PreviewBuffers httputil.BufferPool = &bufferPool{size: 256 << 10}

type bufferPool struct {
	size int
	pool sync.Pool
}

func (b *bufferPool) Get() []byte {
	if v, ok := b.pool.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, b.size)
}

func (b *bufferPool) Put(p []byte) {
	if cap(p) == b.size {
		p = p[:b.size]
		b.pool.Put(&p)
	}
}

// headerDeadline fails a round trip whose answer's headers take longer
// than d.
type headerDeadline struct {
	next http.RoundTripper
	d    time.Duration
}

func (h headerDeadline) RoundTrip(r *http.Request) (*http.Response, error) {
	next := h.next
	if next == nil {
		next = http.DefaultTransport
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	t := time.AfterFunc(h.d, func() { cancel(context.DeadlineExceeded) })
	resp, err := next.RoundTrip(r.WithContext(ctx))
	if !t.Stop() || err != nil {
		cancel(nil)
		return resp, err
	}
	// The body (or the upgraded connection) lives on; the context ends
	// with the request's.
	context.AfterFunc(r.Context(), func() { cancel(nil) })
	return resp, nil
}

// failing fails every round trip with err.
type failing struct{ err error }

func (f failing) RoundTrip(*http.Request) (*http.Response, error) { return nil, f.err }
