package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/textproto"
	"strings"
	"time"
)

// max1xx bounds the informational answers forwarded before the final one.
const max1xx = 8

// errInvalidHeader is a request header that cannot be sent as it is.
var errInvalidHeader = errors.New("invalid request header")

// errSwitched is an upstream answering 101 to a request that asked for no
// protocol switch.
var errSwitched = errors.New("upstream switched protocols unasked")

// plainOnly reports whether forwardPlain carries r: a GET or HEAD without a
// body or an Expect, whose query and authority go upstream unchanged. The
// rest goes through httputil.ReverseProxy, whose rewriting they need.
func plainOnly(r *http.Request, authority string) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) &&
		(r.Body == nil || r.Body == http.NoBody) && r.ContentLength == 0 &&
		len(r.TransferEncoding) == 0 && r.Header["Expect"] == nil &&
		cleanQuery(r.URL.RawQuery) && asciiPrint(authority)
}

// forwardPlain forwards r as forward does, on a kept-alive upstream
// connection that it uses in the handler's goroutine: the request head
// goes out in one write and the answer is read and copied back here, so
// that a small answer costs the proxy one read and one write each way and
// no hand-over between goroutines. Upstream has IdleTimeout to start its
// answer and as long between any two reads of it; the head of the answer
// is bounded by maxResponseHeaderBytes.
func (p *Proxy) forwardPlain(w http.ResponseWriter, r *http.Request, rec *record, target netip.AddrPort, authority string) {
	rec.verdict = VerdictAllowed
	u, resp, err := p.exchange(w, r, target, authority)
	if err != nil {
		rec.err = err
		if errors.Is(r.Context().Err(), context.Canceled) {
			// The client has gone; there is no one to answer.
			return
		}
		p.refuse(w, r, rec, VerdictUpstreamFailure)
		return
	}

	h := w.Header()
	copyEndToEnd(h, resp.Header)
	announced := len(resp.Trailer)
	if announced > 0 {
		keys := make([]string, 0, announced)
		for k := range resp.Trailer {
			keys = append(keys, k)
		}
		h.Add("Trailer", strings.Join(keys, ", "))
	}
	w.WriteHeader(resp.StatusCode)

	if err := p.copyBody(w, resp, u, rec); err != nil {
		// The answer is cut short: the client must see it cut, not
		// complete, so its connection is dropped.
		u.unwatch()
		u.close()
		rec.err = err
		if cw, ok := w.(*connWriter); ok {
			cw.abort()
		} else if r.Context().Value(http.ServerContextKey) != nil {
			panic(http.ErrAbortHandler)
		}
		return
	}
	if cw, ok := w.(*connWriter); ok && len(resp.Trailer) == 0 {
		// The answer is whole: the client has it before the upstream
		// connection is put back and the request logged.
		cw.finish()
	}
	// An upstream that sends a body after its answer to a HEAD would
	// leave it for the next request: those connections are not kept.
	if u.unwatch() && !resp.Close && u.br.Buffered() == 0 && r.Method != http.MethodHead {
		p.upstreams.put(u)
	} else {
		u.close()
	}

	if len(resp.Trailer) > 0 {
		// Trailers force a chunked answer, as in httputil.ReverseProxy.
		http.NewResponseController(w).Flush()
	}
	if len(resp.Trailer) == announced {
		for k, vs := range resp.Trailer {
			h[k] = vs
		}
		return
	}
	for k, vs := range resp.Trailer {
		for _, v := range vs {
			h.Add(http.TrailerPrefix+k, v)
		}
	}
}

// copyBody copies the body of resp to w, counting it down. Bytes are
// flushed to the client whenever upstream has no more at hand.
func (p *Proxy) copyBody(w http.ResponseWriter, resp *http.Response, u *upConn, rec *record) error {
	if resp.Body == http.NoBody {
		return nil
	}
	buf, class := getBuffer(1)
	defer putBuffer(buf, class)
	b := *buf
	rc := http.NewResponseController(w)
	for first := true; ; first = false {
		if !first {
			if err := u.extend(p.cfg.IdleTimeout); err != nil {
				return err
			}
		}
		n, rerr := resp.Body.Read(b)
		if n > 0 {
			wn, werr := w.Write(b[:n])
			rec.addDown(wn)
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
		if n < len(b) && u.br.Buffered() == 0 {
			if err := rc.Flush(); err != nil {
				return err
			}
		}
	}
}

// exchange sends the head of r to target, on an idle connection or a new
// one, and reads the head of the answer, forwarding 1xx answers to w. An
// idle connection that fails before any byte of an answer came (upstream
// closed it meanwhile) is replaced by a new one, once: GET and HEAD may be
// sent again.
func (p *Proxy) exchange(w http.ResponseWriter, r *http.Request, target netip.AddrPort, authority string) (*upConn, *http.Response, error) {
	for retried := false; ; retried = true {
		u := p.upstreams.get(target)
		reused := u != nil
		if !reused {
			c, err := p.dialUpstream(r.Context(), target)
			if err != nil {
				return nil, nil, err
			}
			u = newUpConn(c, target)
		}
		// The deadline is set before the watch, which may end it at once.
		u.conn.SetDeadline(time.Now().Add(p.cfg.IdleTimeout))
		u.nread = 0
		u.watch(r.Context())
		resp, err := p.roundTrip(w, r, u, authority)
		if err == nil {
			return u, resp, nil
		}
		u.unwatch()
		u.close()
		if !reused || retried || u.nread > 0 || isTimeout(err) || errors.Is(err, errInvalidHeader) || r.Context().Err() != nil {
			return nil, nil, err
		}
	}
}

// roundTrip writes the head of r on u and reads the head of the answer.
func (p *Proxy) roundTrip(w http.ResponseWriter, r *http.Request, u *upConn, authority string) (*http.Response, error) {
	if err := writeHead(u.bw, r, authority); err != nil {
		return nil, err
	}
	for n := 0; ; n++ {
		u.limit = maxResponseHeaderBytes
		resp, err := http.ReadResponse(u.br, r)
		if err != nil {
			return nil, fmt.Errorf("read answer: %w", err)
		}
		code := resp.StatusCode
		switch {
		case code == http.StatusSwitchingProtocols:
			return nil, errSwitched
		case code >= 200:
			u.limit = maxInt64
			return resp, nil
		case n == max1xx:
			return nil, fmt.Errorf("more than %d informational answers", max1xx)
		}
		h := w.Header()
		copyEndToEnd(h, resp.Header)
		w.WriteHeader(code)
		clear(h)
	}
}

const maxInt64 = 1<<63 - 1

// writeHead writes the head of r as it goes upstream and sends it: the
// origin-form target, Host set to authority, and the end-to-end headers
// but the forwarding ones, in one write unless the head is large.
func writeHead(bw *bufio.Writer, r *http.Request, authority string) error {
	bw.WriteString(r.Method)
	bw.WriteByte(' ')
	bw.WriteString(r.URL.RequestURI())
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(authority)
	bw.WriteString("\r\n")
	conn := r.Header["Connection"]
	for k, vs := range r.Header {
		if hopByHop(k, conn) || notForwarded(k) {
			continue
		}
		if !validFieldName(k) {
			return fmt.Errorf("%w name %q", errInvalidHeader, k)
		}
		for _, v := range vs {
			v = textproto.TrimString(v)
			if !validFieldValue(v) {
				return fmt.Errorf("%w %q: invalid value", errInvalidHeader, k)
			}
			bw.WriteString(k)
			bw.WriteString(": ")
			bw.WriteString(v)
			bw.WriteString("\r\n")
		}
	}
	if hasToken(r.Header["Te"], "trailers") {
		// As httputil.ReverseProxy: upstream may know that trailers
		// reach the client.
		bw.WriteString("Te: trailers\r\n")
	}
	bw.WriteString("\r\n")
	return bw.Flush()
}

// copyEndToEnd copies the end-to-end headers of from into h.
func copyEndToEnd(h, from http.Header) {
	conn := from["Connection"]
	for k, vs := range from {
		if !hopByHop(k, conn) {
			h[k] = vs
		}
	}
}

// hopByHop reports whether header k belongs to one connection only: it is
// one of the hop-by-hop headers, or named in conn, the values of the
// Connection header of the same message.
func hopByHop(k string, conn []string) bool {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
		"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return hasToken(conn, k)
}

// notForwarded reports whether request header k is left out upstream
// besides the hop-by-hop ones: the ones the request line and framing
// carry, and the client's own forwarding headers, as
// httputil.ReverseProxy with Rewrite leaves them out.
func notForwarded(k string) bool {
	switch k {
	case "Host", "Content-Length", "Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto":
		return true
	}
	return false
}

// hasToken reports whether the comma-separated values vs hold token,
// in any case.
func hasToken(vs []string, token string) bool {
	for _, v := range vs {
		for v != "" {
			var t string
			t, v, _ = strings.Cut(v, ",")
			if strings.EqualFold(textproto.TrimString(t), token) {
				return true
			}
		}
	}
	return false
}

// cleanQuery reports whether httputil.ReverseProxy would send query as it
// is: it has no semicolon and no malformed percent escape.
func cleanQuery(q string) bool {
	for i := 0; i < len(q); i++ {
		switch q[i] {
		case ';':
			return false
		case '%':
			if i+2 >= len(q) || !isHex(q[i+1]) || !isHex(q[i+2]) {
				return false
			}
			i += 2
		}
	}
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// asciiPrint reports whether s is printable ASCII without spaces, as an
// authority sent unchanged must be.
func asciiPrint(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return s != ""
}

// validFieldName reports whether k is an HTTP token.
func validFieldName(k string) bool {
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return k != ""
}

// validFieldValue reports whether v holds no control character but tab.
func validFieldValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
