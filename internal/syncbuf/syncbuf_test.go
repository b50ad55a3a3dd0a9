package syncbuf

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

func TestConcurrentWritesAndEcho(t *testing.T) {
	var echoed []string
	var mu sync.Mutex
	b := &Buffer{Echo: func(s string) { mu.Lock(); echoed = append(echoed, s); mu.Unlock() }}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 100 {
				fmt.Fprintf(b, "w%d-%d\n", i, j)
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if n := strings.Count(b.String(), "\n"); n != 800 {
		t.Errorf("%d lines kept, want 800", n)
	}
	if len(echoed) != 800 || strings.Contains(echoed[0], "\n") {
		t.Errorf("%d writes echoed (first %q), want 800 without their newline", len(echoed), echoed[0])
	}
}
