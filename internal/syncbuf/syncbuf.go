// Package syncbuf is a bytes.Buffer that goroutines share: a process or a
// logger writes to it while a test reads what it holds so far.
package syncbuf

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer keeps everything written to it. Its zero value is ready to use.
type Buffer struct {
	// Echo, when set, is given each write without its trailing newline,
	// for a test that also shows what it keeps in its own log (t.Log).
	Echo func(string)

	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Echo != nil {
		s.Echo(strings.TrimRight(string(p), "\n"))
	}
	return s.b.Write(p)
}

// StopEcho stops the echo; the buffer goes on keeping what is written (a
// test's log must not be written once the test has ended).
func (s *Buffer) StopEcho() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Echo = nil
}

// String returns what has been written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Logged returns a Buffer that also echoes each write to log, as in
// syncbuf.Logged(t.Log).
func Logged(log func(args ...any)) *Buffer {
	return &Buffer{Echo: func(s string) { log(s) }}
}
