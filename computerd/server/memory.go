package server

import (
	"runtime"
	"runtime/debug"
	"time"
)

const (
	// largeAnswer is the size from which a request schedules a memory trim.
	largeAnswer = 1 << 20
	// trimDelay is how long after the last large request memory is trimmed.
	trimDelay = 5 * time.Second
)

// trimSoon schedules returning freed memory to the OS, when a request
// handled n bytes or more. Without it the heap a large output left behind
// is returned only slowly, long after the daemon went idle.
func (s *Server) trimSoon(n int) {
	if n < largeAnswer {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if s.trim == nil {
		s.trim = time.AfterFunc(trimDelay, trimMemory)
		return
	}
	s.trim.Reset(trimDelay)
}

// trimMemory returns freed memory to the OS. The first collection moves
// pooled buffers (encoding/json's, net/http's) to their victim caches;
// the second frees them.
func trimMemory() {
	runtime.GC()
	debug.FreeOSMemory()
}
