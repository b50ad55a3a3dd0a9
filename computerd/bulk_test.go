package computerd

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"
	"testing/iotest"
)

// writeSizes records the size of every write.
type writeSizes struct {
	buf   bytes.Buffer
	sizes []int
}

func (w *writeSizes) Write(p []byte) (int, error) {
	w.sizes = append(w.sizes, len(p))
	return w.buf.Write(p)
}

// TestBulkReader: io.Copy through a bulkReader writes whole pieces of its
// size, however little each Read of the source yields, and every byte once.
func TestBulkReader(t *testing.T) {
	data := make([]byte, 2*bulkSize+bulkSize/2)
	rand.NewChaCha8([32]byte{1}).Read(data)
	var w writeSizes
	// HalfReader: a source that yields half of what each Read asks.
	n, err := io.Copy(&w, bulkReader{r: iotest.HalfReader(bytes.NewReader(data)), size: bulkSize})
	if err != nil || n != int64(len(data)) {
		t.Fatalf("copy: %d bytes, %v; want %d", n, err, len(data))
	}
	if !bytes.Equal(w.buf.Bytes(), data) {
		t.Fatal("the bytes written differ from the source")
	}
	want := []int{bulkSize, bulkSize, bulkSize / 2}
	if len(w.sizes) != len(want) || w.sizes[0] != want[0] || w.sizes[1] != want[1] || w.sizes[2] != want[2] {
		t.Fatalf("writes %v, want %v", w.sizes, want)
	}

	// A source error ends the copy with that error.
	_, err = io.Copy(io.Discard, bulkReader{r: iotest.TimeoutReader(bytes.NewReader(data)), size: bulkSize})
	if err != iotest.ErrTimeout {
		t.Fatalf("copy from a failing source: %v, want %v", err, iotest.ErrTimeout)
	}
}
