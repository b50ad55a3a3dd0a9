package relayclient

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/relay"
	"github.com/berthdev/berth/relay/relayserver"
)

// countingConn counts the writes made on the agent's TCP connection.
type countingConn struct {
	net.Conn
	mu     sync.Mutex
	writes int
	bytes  int
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.writes++
	c.bytes += len(p)
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *countingConn) counts() (writes, bytes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes, c.bytes
}

// A bulk response leaves the agent in large writes, not one per 4 KB the
// websocket masks, and small answers are not held back; over TLS too,
// where the writes gathered are TLS records.
func TestLinkCoalescesWrites(t *testing.T) {
	t.Run("ws", func(t *testing.T) { testLinkCoalescesWrites(t, false) })
	t.Run("wss", func(t *testing.T) { testLinkCoalescesWrites(t, true) })
}

func testLinkCoalescesWrites(t *testing.T, useTLS bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	blob := bytes.Repeat([]byte("berth relay "), 4<<20/12)
	mux := http.NewServeMux()
	mux.HandleFunc("/blob", func(w http.ResponseWriter, r *http.Request) { w.Write(blob) })
	mux.HandleFunc("/small", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })

	rs := relayserver.New(relayserver.Config{Authenticate: func(tok string) (string, bool) { return "a1", tok == "tok" }})
	rmux := http.NewServeMux()
	rmux.Handle(relay.ConnectPath, rs)
	hs := httptest.NewUnstartedServer(rmux)
	if useTLS {
		hs.StartTLS()
	} else {
		hs.Start()
	}
	defer hs.Close()
	defer rs.Close()

	var mu sync.Mutex
	var agentConn *countingConn
	tr := &http.Transport{TLSClientConfig: hs.Client().Transport.(*http.Transport).TLSClientConfig, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		agentConn = &countingConn{Conn: c}
		return agentConn, nil
	}}
	defer tr.CloseIdleConnections()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- Run(runCtx, Config{URL: "ws" + strings.TrimPrefix(hs.URL, "http") + relay.ConnectPath, Token: "tok",
			Handler: mux, HTTPClient: &http.Client{Transport: tr}})
	}()
	defer func() {
		stop()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run: %v", err)
		}
	}()
	for {
		if p, ok := rs.Presence("a1"); ok && p.Online {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("agent never came online")
		case <-time.After(5 * time.Millisecond):
		}
	}
	client := &http.Client{Transport: rs.Transport("a1"), Timeout: 20 * time.Second}
	get := func(path string) []byte {
		t.Helper()
		resp, err := client.Get("http://a1" + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for range 20 {
		if got := get("/small"); string(got) != "ok" {
			t.Fatalf("small answer %q", got)
		}
	}
	mu.Lock()
	cc := agentConn
	mu.Unlock()
	w0, b0 := cc.counts()
	if got := get("/blob"); sha256.Sum256(got) != sha256.Sum256(blob) {
		t.Fatalf("blob of %d bytes arrived as %d different bytes", len(blob), len(got))
	}
	w1, b1 := cc.counts()
	writes, sent := w1-w0, b1-b0
	if sent < len(blob) {
		t.Fatalf("agent sent %d bytes for a %d-byte body", sent, len(blob))
	}
	// One write per 4 KB would be over a thousand.
	if limit := len(blob)/(64<<10) + 64; writes > limit {
		t.Errorf("%d writes for %d bytes (%d B each); want at most %d", writes, sent, sent/writes, limit)
	}
	t.Logf("%d writes for %d bytes", writes, sent)
}

func TestBodyFollows(t *testing.T) {
	hdr := func(typ byte, length uint32) []byte {
		b := make([]byte, 12)
		b[1] = typ
		b[8], b[9], b[10], b[11] = byte(length>>24), byte(length>>16), byte(length>>8), byte(length)
		return b
	}
	for _, c := range []struct {
		p    []byte
		want bool
	}{
		{hdr(0, 4096), true},                         // data with a body
		{hdr(0, 0), false},                           // data header alone (a flag such as FIN)
		{hdr(1, 4096), false},                        // window update: the length is a delta
		{hdr(2, 7), false},                           // ping
		{make([]byte, 4096), false},                  // a body
		{hdr(0, 5)[:11], false},                      // short
		{append([]byte{1}, hdr(0, 5)[1:]...), false}, // another version
	} {
		if got := bodyFollows(c.p); got != c.want {
			t.Errorf("bodyFollows(% x) = %v, want %v", c.p, got, c.want)
		}
	}
}
