package relayclient

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
)

// recordConn records the writes that reach the agent's TCP connection.
type recordConn struct {
	net.Conn
	writes [][]byte
	all    bytes.Buffer
}

func (c *recordConn) Write(p []byte) (int, error) {
	c.writes = append(c.writes, append([]byte(nil), p...))
	c.all.Write(p)
	return len(p), nil
}

// maskingConn stands in for the websocket: like the library, it writes a
// frame header and then the payload in 4 KB pieces to the connection
// below, here the coalescer.
type maskingConn struct {
	net.Conn
	raw *coalescer
}

func (c *maskingConn) Write(p []byte) (int, error) {
	if _, err := c.raw.Write([]byte{0x82, 0xfe, 0, 0, 1, 2, 3, 4}); err != nil {
		return 0, err
	}
	for rest := p; len(rest) > 0; {
		n := min(len(rest), 4096)
		if _, err := c.raw.Write(rest[:n]); err != nil {
			return 0, err
		}
		rest = rest[n:]
	}
	return len(p), nil
}

// FuzzLinkCoalescing sends the frames yamux would write (a header, then
// its body when it announces one) through the agent's coalescer. Every
// byte reaches the connection once and in order, nothing is held back
// once a frame is complete, and a data header leaves in the same write as
// its body.
func FuzzLinkCoalescing(f *testing.F) {
	hdr := func(typ byte, length uint32) []byte {
		b := make([]byte, 12)
		b[1] = typ
		binary.BigEndian.PutUint32(b[8:], length)
		return b
	}
	f.Add(hdr(0, 5), []byte("hello"))
	f.Add(hdr(0, 0), []byte{})
	f.Add(hdr(1, 1<<20), []byte{})
	f.Add(hdr(2, 1), []byte{})
	f.Add(hdr(0, 70000), bytes.Repeat([]byte("x"), 70000))
	f.Add(hdr(0, 300<<10), bytes.Repeat([]byte("y"), 300<<10))
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9}, []byte("123456789"))
	f.Add([]byte("short"), []byte("x"))

	f.Fuzz(func(t *testing.T, header, body []byte) {
		rec := &recordConn{}
		raw := &coalescer{Conn: rec}
		link := &linkConn{Conn: &maskingConn{raw: raw}, raw: raw}
		var sent bytes.Buffer
		// Three rounds of the frame, as a stream of frames would go.
		for range 3 {
			before := len(rec.writes)
			if _, err := link.Write(header); err != nil {
				t.Fatal(err)
			}
			sent.Write([]byte{0x82, 0xfe, 0, 0, 1, 2, 3, 4})
			for rest := header; len(rest) > 0; rest = rest[min(len(rest), 4096):] {
				sent.Write(rest[:min(len(rest), 4096)])
			}
			follows := bodyFollows(header)
			if !follows {
				if !bytes.Equal(rec.all.Bytes(), sent.Bytes()) {
					t.Fatalf("after a complete frame %x, %d bytes reached the connection, %d were written", header, rec.all.Len(), sent.Len())
				}
				continue
			}
			if !bytes.HasPrefix(sent.Bytes(), rec.all.Bytes()) {
				t.Fatalf("bytes reached the connection out of order")
			}
			if _, err := link.Write(body); err != nil {
				t.Fatal(err)
			}
			sent.Write([]byte{0x82, 0xfe, 0, 0, 1, 2, 3, 4})
			for rest := body; len(rest) > 0; rest = rest[min(len(rest), 4096):] {
				sent.Write(rest[:min(len(rest), 4096)])
			}
			if !bytes.Equal(rec.all.Bytes(), sent.Bytes()) {
				t.Fatalf("after header %x and a %d-byte body, %d bytes reached the connection, %d were written", header, len(body), rec.all.Len(), sent.Len())
			}
			if 2*8+len(header)+len(body) <= coalesceSize && len(rec.writes)-before != 1 {
				t.Fatalf("header %x and a %d-byte body left in %d writes, want 1", header, len(body), len(rec.writes)-before)
			}
		}
		for _, w := range rec.writes {
			if len(w) > coalesceSize && len(w) > 4096 {
				t.Fatalf("a write of %d bytes, more than %d", len(w), coalesceSize)
			}
		}
	})
}

// FuzzCheckURL checks which relay URLs may carry the agent's token: a
// URL accepted without --insecure is encrypted or goes to loopback, one
// accepted without it is accepted with it, and the error for a plain URL
// offers the encrypted scheme.
func FuzzCheckURL(f *testing.F) {
	for _, s := range []string{"wss://relay.example.com/v1/agents/connect", "ws://127.0.0.1:8080/x", "ws://localhost./x",
		"ws://[::1]:80/", "ws://relay.example.com/", "http://127.0.0.2/", "WS://LOCALHOST/", "ws://127.0.0.1.nip.io/",
		"ws://localhost@evil.example/", "ws://evil.example#@127.0.0.1/", "ws://0x7f000001/", "ws:///x", "ftp://x", "::",
		"ws://127.0.0.1/, wss://relay.example.com/", "wss://a.example/,ws://b.example/", " , ", "ws://127.0.0.0  "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		strict := CheckURL(s, false)
		loose := CheckURL(s, true)
		if strict == nil && loose != nil {
			t.Fatalf("CheckURL(%q): accepted without --insecure, refused with it: %v", s, loose)
		}
		if strict == nil {
			urls := URLs(s)
			if len(urls) == 0 || len(urls) > MaxURLs {
				t.Fatalf("CheckURL(%q) accepted a setting naming %d relays", s, len(urls))
			}
			for _, one := range urls {
				u, err := url.Parse(one)
				if err != nil {
					t.Fatalf("CheckURL(%q) accepted the unparsable URL %q", s, one)
				}
				switch strings.ToLower(u.Scheme) {
				case "wss", "https":
				case "ws", "http":
					h := u.Hostname()
					if !strings.EqualFold(strings.TrimSuffix(h, "."), "localhost") {
						ip := net.ParseIP(h)
						if ip == nil || !ip.IsLoopback() {
							t.Fatalf("CheckURL(%q) sends the token in clear to %q", s, h)
						}
					}
				default:
					t.Fatalf("CheckURL(%q) accepted scheme %q", s, u.Scheme)
				}
			}
		}
		if strict != nil && loose == nil {
			if !errors.Is(strict, ErrInsecureURL) {
				t.Fatalf("CheckURL(%q) refused a URL --insecure allows, but not as insecure: %v", s, strict)
			}
			if msg := strict.Error(); !strings.Contains(msg, "wss://") && !strings.Contains(msg, "https://") {
				t.Fatalf("CheckURL(%q): the refusal offers no encrypted scheme: %v", s, msg)
			}
		}
	})
}
