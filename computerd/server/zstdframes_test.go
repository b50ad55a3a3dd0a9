package server

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// TestZstdFramesRoundTrip writes in pieces of every size around the frame
// size and reads the frames back as one stream, in order.
func TestZstdFramesRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	in := make([]byte, 5*frameBytes+777)
	for i := range in {
		if i%3 == 0 {
			in[i] = byte(rng.IntN(256))
		} else {
			in[i] = byte('a' + i%7)
		}
	}
	for _, piece := range []int{4093, 64 << 10, frameBytes - 1, frameBytes, frameBytes + 1, len(in)} {
		var out bytes.Buffer
		w, err := newZstdFrames(&out, 2)
		if err != nil {
			t.Fatal(err)
		}
		for p := in; len(p) > 0; {
			k := min(piece, len(p))
			if n, err := w.Write(p[:k]); err != nil || n != k {
				t.Fatalf("piece %d: write %d of %d: %v", piece, n, k, err)
			}
			p = p[k:]
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		dec, err := zstd.NewReader(&out)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(dec)
		dec.Close()
		if err != nil || !bytes.Equal(got, in) {
			t.Fatalf("piece %d: read back %d bytes (%v), want the %d written", piece, len(got), err, len(in))
		}
	}
}

type brokenWriter struct{ after int }

func (b *brokenWriter) Write(p []byte) (int, error) {
	if b.after <= 0 {
		return 0, errors.New("link down")
	}
	b.after--
	return len(p), nil
}

// TestZstdFramesWriteError: the first error writing out is what Write or
// Close answers, and nothing hangs.
func TestZstdFramesWriteError(t *testing.T) {
	w, err := newZstdFrames(&brokenWriter{after: 1}, 2)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	var werr error
	for i := 0; i < 20*frameBytes/len(chunk) && werr == nil; i++ {
		_, werr = w.Write(chunk)
	}
	cerr := w.Close()
	if werr == nil && cerr == nil {
		t.Fatal("no error from a writer that fails")
	}
	for _, err := range []error{werr, cerr} {
		if err != nil && err.Error() != "link down" {
			t.Errorf("error %v, want the writer's", err)
		}
	}
}

// TestZstdFramesAbort drops what is not written yet.
func TestZstdFramesAbort(t *testing.T) {
	var out bytes.Buffer
	w, err := newZstdFrames(&out, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(make([]byte, frameBytes/2)); err != nil {
		t.Fatal(err)
	}
	w.Abort()
	if out.Len() != 0 {
		t.Fatalf("%d bytes written after abort of a half frame", out.Len())
	}
}
