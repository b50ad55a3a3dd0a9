package server

import (
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// zstdFrames compresses what is written to it as a series of zstd frames
// of frameBytes each (the last one shorter), compressed side by side by
// up to maxFrameWorkers goroutines and written to out in order. Concatenated frames are one zstd stream to every decoder (RFC
// 8878, section 3.1), `zstd -d` included. One zstd encoder compresses
// one block after another; frames that start afresh let two cores share
// the work, for a ratio a little worse than one frame's.
//
// Memory stays bounded: at most 2*workers+2 frames exist at once, each
// with its input and its compressed output.
type zstdFrames struct {
	out     io.Writer
	enc     *zstd.Encoder
	cur     *zstdFrame // being filled
	jobs    chan *zstdFrame
	order   chan *zstdFrame
	free    chan *zstdFrame
	workers sync.WaitGroup
	wrote   chan struct{} // closed when the writing goroutine ends

	mu      sync.Mutex
	err     error // the first write error; nothing is written after it
	aborted bool
}

// zstdFrame is one frame: its input, and its compressed bytes once ready
// is closed.
type zstdFrame struct {
	in    []byte
	out   []byte
	ready chan struct{}
}

const (
	// frameBytes is the input of one frame.
	frameBytes = 2 << 20
	// maxFrameWorkers bounds the goroutines that compress.
	maxFrameWorkers = 4
)

// newZstdFrames returns a zstdFrames onto out at zstd's fastest level,
// compressing on up to workers goroutines.
func newZstdFrames(out io.Writer, workers int) (*zstdFrames, error) {
	workers = min(max(workers, 1), maxFrameWorkers)
	enc, err := zstd.NewWriter(nil,
		zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderConcurrency(workers),
		zstd.WithWindowSize(frameBytes))
	if err != nil {
		return nil, err
	}
	w := &zstdFrames{
		out:   out,
		enc:   enc,
		jobs:  make(chan *zstdFrame, workers),
		order: make(chan *zstdFrame, 2*workers),
		free:  make(chan *zstdFrame, 2*workers+2),
		wrote: make(chan struct{}),
	}
	for range workers {
		w.workers.Go(func() {
			for j := range w.jobs {
				j.out = w.enc.EncodeAll(j.in, j.out[:0])
				close(j.ready)
			}
		})
	}
	go w.write()
	return w, nil
}

// write writes the frames to out in order, until the first error or
// abort, then only recycles them.
func (w *zstdFrames) write() {
	defer close(w.wrote)
	for j := range w.order {
		<-j.ready
		w.mu.Lock()
		ok := w.err == nil && !w.aborted
		w.mu.Unlock()
		if ok {
			if _, err := w.out.Write(j.out); err != nil {
				w.mu.Lock()
				w.err = err
				w.mu.Unlock()
			}
		}
		j.in = j.in[:0]
		select {
		case w.free <- j:
		default:
		}
	}
}

// failed returns the first write error.
func (w *zstdFrames) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Write implements io.Writer.
func (w *zstdFrames) Write(p []byte) (int, error) {
	if err := w.failed(); err != nil {
		return 0, err
	}
	n := 0
	for len(p) > 0 {
		if w.cur == nil {
			select {
			case w.cur = <-w.free:
			default:
				w.cur = &zstdFrame{in: make([]byte, 0, frameBytes)}
			}
		}
		k := copy(w.cur.in[len(w.cur.in):frameBytes], p)
		w.cur.in = w.cur.in[:len(w.cur.in)+k]
		p, n = p[k:], n+k
		if len(w.cur.in) == frameBytes {
			w.submit()
			if err := w.failed(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// submit hands the frame being filled to the workers and the writer.
func (w *zstdFrames) submit() {
	j := w.cur
	w.cur = nil
	j.ready = make(chan struct{})
	w.order <- j
	w.jobs <- j
}

// Close writes what is left as the last frame and waits for every frame
// to be written. It returns the first write error.
func (w *zstdFrames) Close() error {
	if w.cur != nil && len(w.cur.in) > 0 {
		w.submit()
	}
	w.stop()
	return w.failed()
}

// Abort ends the stream where it is: frames not yet written are dropped.
func (w *zstdFrames) Abort() {
	w.mu.Lock()
	w.aborted = true
	w.mu.Unlock()
	w.stop()
}

func (w *zstdFrames) stop() {
	close(w.jobs)
	close(w.order)
	w.workers.Wait()
	<-w.wrote
	w.enc.Close()
}
