package relay_test

import (
	"encoding/binary"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/berthdev/berth/relay"
)

// FuzzBearerToken checks the agent token reader: a token it returns came
// after a case-insensitive "Bearer " and has no surrounding white space,
// and every token an agent sends reads back unchanged.
func FuzzBearerToken(f *testing.F) {
	for _, s := range []string{"Bearer abc", "bearer  abc ", "BEARER x", "Bearer ", "Bearer", "Basic abc", "Bearerabc", "Bearer \t", "bEaReR \u00a0x\u00a0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		tok := relay.BearerToken(h)
		if tok != "" {
			if len(h) < 7 || !strings.EqualFold(h[:7], "bearer ") {
				t.Fatalf("BearerToken(%q) = %q without a bearer prefix", h, tok)
			}
			if strings.TrimSpace(tok) != tok || !strings.HasSuffix(strings.TrimSpace(h), tok) {
				t.Fatalf("BearerToken(%q) = %q", h, tok)
			}
		}
		if want := strings.TrimSpace(h); want != "" {
			if got := relay.BearerToken("Bearer " + want); got != want {
				t.Fatalf("BearerToken(%q) = %q, want %q", "Bearer "+want, got, want)
			}
		}
	})
}

// frame is a yamux frame: version, type, flags, stream id, length, body.
func frame(typ uint8, flags uint16, id, length uint32, body string) []byte {
	b := make([]byte, 12, 12+len(body))
	b[1] = typ
	binary.BigEndian.PutUint16(b[2:], flags)
	binary.BigEndian.PutUint32(b[4:], id)
	binary.BigEndian.PutUint32(b[8:], length)
	return append(b, body...)
}

// FuzzMuxFrames plays a hostile agent: it sends the relay's side of a
// link (a yamux client with relay.MuxConfig) whatever frames it likes,
// then hangs up. The relay never panics, never hands its streams more
// bytes than the agent sent, and ends the session once the agent has gone.
func FuzzMuxFrames(f *testing.F) {
	const (
		typeData, typeWindow, typePing, typeGoAway = 0, 1, 2, 3
		syn, ack, fin, rst                         = 1, 2, 4, 8
	)
	cat := func(fs ...[]byte) []byte {
		var out []byte
		for _, b := range fs {
			out = append(out, b...)
		}
		return out
	}
	f.Add(cat(frame(typeWindow, syn, 2, 0, ""), frame(typeData, 0, 2, 5, "hello"), frame(typeData, fin, 2, 0, "")))
	f.Add(cat(frame(typeData, syn, 2, 3, "abc"), frame(typeData, rst, 2, 0, "")))
	f.Add(frame(typeData, syn, 2, 1<<20+1, strings.Repeat("x", 64)))               // more than the window
	f.Add(frame(typeWindow, syn, 2, 1<<31, ""))                                    // a huge window
	f.Add(frame(typeWindow, syn, 1, 0, ""))                                        // an id of the relay's own parity
	f.Add(cat(frame(typeWindow, syn, 2, 0, ""), frame(typeWindow, syn, 2, 0, ""))) // the same stream twice
	f.Add(frame(typePing, syn, 0, 7, ""))
	f.Add(frame(typePing, ack, 0, 1, ""))
	f.Add(frame(typeGoAway, 0, 0, 1, ""))
	f.Add(frame(9, 0, 0, 0, ""))
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0}) // another version
	f.Add(frame(typeData, 0, 4, 2, "no"))             // data on a stream never opened
	f.Add([]byte{0, 0})

	f.Fuzz(func(t *testing.T, in []byte) {
		relaySide, agentSide := net.Pipe()
		sess, err := yamux.Client(relaySide, relay.MuxConfig(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()

		var delivered atomic.Int64
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { // whatever the relay sends is read and dropped
			defer wg.Done()
			io.Copy(io.Discard, agentSide)
		}()
		go func() { // the relay reads every stream the agent opens
			defer wg.Done()
			for {
				st, err := sess.AcceptStream()
				if err != nil {
					return
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer st.Close()
					n, _ := io.Copy(io.Discard, st)
					delivered.Add(n)
				}()
			}
		}()

		agentSide.SetWriteDeadline(time.Now().Add(5 * time.Second))
		agentSide.Write(in)
		agentSide.Close()
		select {
		case <-sess.CloseChan():
		case <-time.After(10 * time.Second):
			t.Fatalf("session still open 10 s after the agent hung up (input %x)", in)
		}
		wg.Wait()
		if n := delivered.Load(); n > int64(len(in)) {
			t.Fatalf("streams got %d bytes from %d sent", n, len(in))
		}
	})
}
