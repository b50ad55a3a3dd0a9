package egress

import (
	"bufio"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
)

// holdBody is how much of a body connWriter holds before it sends the
// head, as net/http's server does: an answer that ends within it gets a
// Content-Length, a longer one of unknown length is sent chunked.
const holdBody = 2048

var errBodyNotAllowed = errors.New("egress: this answer has no body")

// connWriter is the http.ResponseWriter of a request that keptConn serves:
// it writes one answer to the client connection through bw the way
// net/http's server writes it for the answers forwardPlain and refuse
// make. A small answer leaves in one write, when finish flushes it.
type connWriter struct {
	bw     *bufio.Writer
	req    *http.Request
	h      http.Header
	status int    // 0 until the final status is known
	held   []byte // body before the head is sent
	sent   bool   // the head is in bw
	length int64  // the Content-Length, or -1
	chunk  bool
	n      int64    // body bytes written
	tnames []string // trailers declared in the head
	close  bool     // the answer asks to close the connection
	broken bool     // the answer cannot be completed
	done   bool     // finish has run
	keep   bool     // what finish returned
}

func newConnWriter(bw *bufio.Writer, r *http.Request) *connWriter {
	return &connWriter{bw: bw, req: r, h: http.Header{}, length: -1}
}

// Header is the header of the answer, and after the body its trailers.
func (w *connWriter) Header() http.Header { return w.h }

// WriteHeader sends a 1xx answer at once, and notes any other status.
func (w *connWriter) WriteHeader(code int) {
	if w.status != 0 {
		return
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		writeStatusLine(w.bw, code)
		w.h.WriteSubset(w.bw, map[string]bool{"Content-Length": true, "Transfer-Encoding": true})
		w.bw.WriteString("\r\n")
		if err := w.bw.Flush(); err != nil {
			w.broken = true
		}
		return
	}
	w.status = code
	if cl := w.h.Get("Content-Length"); cl != "" {
		if v, err := strconv.ParseInt(cl, 10, 64); err == nil && v >= 0 {
			w.length = v
		} else {
			w.h.Del("Content-Length")
		}
	}
}

// bodyAllowed reports whether the answer has a body on the wire.
func (w *connWriter) bodyAllowed() bool {
	return w.req.Method != http.MethodHead && bodyAllowedForStatus(w.status)
}

func bodyAllowedForStatus(code int) bool {
	return !(code >= 100 && code <= 199 || code == http.StatusNoContent || code == http.StatusNotModified)
}

// Write adds p to the body.
func (w *connWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !bodyAllowedForStatus(w.status) {
		return 0, errBodyNotAllowed
	}
	if w.length >= 0 && w.n+int64(len(p)) > w.length {
		return 0, http.ErrContentLength
	}
	w.n += int64(len(p))
	if !w.sent {
		if len(w.held)+len(p) <= holdBody {
			w.held = append(w.held, p...)
			return len(p), nil
		}
		w.sendHead(false)
	}
	if err := w.writeBody(p); err != nil {
		w.broken = true
		return 0, err
	}
	return len(p), nil
}

// writeBody writes p to bw, as a chunk when the answer is chunked.
func (w *connWriter) writeBody(p []byte) error {
	if !w.bodyAllowed() {
		w.held = nil
		return nil
	}
	if len(w.held) > 0 {
		held := w.held
		w.held = nil
		if err := w.writeBody(held); err != nil {
			return err
		}
	}
	if len(p) == 0 {
		return nil
	}
	if w.chunk {
		w.bw.WriteString(strconv.FormatInt(int64(len(p)), 16))
		w.bw.WriteString("\r\n")
	}
	_, err := w.bw.Write(p)
	if w.chunk {
		_, err = w.bw.WriteString("\r\n")
	}
	return err
}

// FlushError sends what the answer has so far to the client.
func (w *connWriter) FlushError() error {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.sent {
		w.sendHead(false)
	}
	err := w.writeBody(nil)
	if err == nil {
		err = w.bw.Flush()
	}
	if err != nil {
		w.broken = true
	}
	return err
}

// Flush is FlushError without the error.
func (w *connWriter) Flush() { w.FlushError() }

// abort notes that the answer was cut short: the client must see it cut,
// so the connection closes without ending it.
func (w *connWriter) abort() { w.broken = true }

// sendHead puts the head into bw: the status, the header, and the framing
// that net/http's server would choose; done says the handler has
// returned, so that a held body is the whole body.
func (w *connWriter) sendHead(done bool) {
	w.sent = true
	h := w.h
	prefixed := trailerKeys(h)
	trailers := h["Trailer"] != nil || len(prefixed) > 0
	for _, v := range h["Trailer"] {
		for name := range strings.SplitSeq(v, ",") {
			name = http.CanonicalHeaderKey(strings.TrimSpace(name))
			if name != "" && httpguts.ValidTrailerHeader(name) {
				w.tnames = append(w.tnames, name)
			}
		}
	}
	h.Del("Transfer-Encoding")
	if done && !trailers && bodyAllowedForStatus(w.status) && w.length < 0 && (w.req.Method != http.MethodHead || len(w.held) > 0) {
		w.length = int64(len(w.held))
		h.Set("Content-Length", strconv.FormatInt(w.length, 10))
	}
	if bodyAllowedForStatus(w.status) {
		if _, typed := h["Content-Type"]; !typed && h.Get("Content-Encoding") == "" && len(w.held) > 0 {
			h.Set("Content-Type", http.DetectContentType(w.held))
		}
	} else {
		h.Del("Content-Length")
		h.Del("Transfer-Encoding")
		if w.status == http.StatusNotModified {
			h.Del("Content-Type")
		}
		w.length = -1
	}
	if _, dated := h["Date"]; !dated {
		h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	}
	if w.bodyAllowed() && w.length < 0 {
		w.chunk = true
		h.Set("Transfer-Encoding", "chunked")
	}
	if h.Get("Connection") == "close" {
		w.close = true
	}
	writeStatusLine(w.bw, w.status)
	h.WriteSubset(w.bw, prefixed)
	w.bw.WriteString("\r\n")
}

// trailerKeys are the keys of h that name trailers, left out of the head.
func trailerKeys(h http.Header) map[string]bool {
	var ks map[string]bool
	for k := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			if ks == nil {
				ks = map[string]bool{}
			}
			ks[k] = true
		}
	}
	return ks
}

// finish ends the answer and sends it, and reports whether the
// connection can carry the next one. Once it has run, the answer is
// sent: later calls report the same.
func (w *connWriter) finish() bool {
	if !w.done {
		w.keep = w.end()
		w.done = true
	}
	return w.keep
}

func (w *connWriter) end() bool {
	if w.broken {
		return false
	}
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.sent {
		w.sendHead(true)
	}
	if err := w.writeBody(nil); err != nil {
		return false
	}
	if w.chunk {
		w.bw.WriteString("0\r\n")
		t := http.Header{}
		for k, vs := range w.h {
			if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
				t[name] = vs
			}
		}
		for _, k := range w.tnames {
			for _, v := range w.h[k] {
				t.Add(k, v)
			}
		}
		t.Write(w.bw)
		w.bw.WriteString("\r\n")
	}
	if err := w.bw.Flush(); err != nil {
		return false
	}
	// An answer shorter than its Content-Length leaves the client
	// waiting for the rest: only closing tells it.
	return !w.close && !(w.bodyAllowed() && w.length >= 0 && w.n != w.length)
}

// writeStatusLine writes the status line of code as net/http's server
// does.
func writeStatusLine(bw *bufio.Writer, code int) {
	if text := http.StatusText(code); text != "" {
		bw.WriteString("HTTP/1.1 ")
		bw.WriteString(strconv.Itoa(code))
		bw.WriteByte(' ')
		bw.WriteString(text)
		bw.WriteString("\r\n")
		return
	}
	fmt.Fprintf(bw, "HTTP/1.1 %03d status code %d\r\n", code, code)
}
