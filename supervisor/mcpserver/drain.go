package mcpserver

import "sync"

// pending counts the tool calls that have not been answered yet, so that a
// shutdown can wait until they are.
type pending struct {
	mu      sync.Mutex
	n       int
	waiters []chan struct{}
}

func (p *pending) add(d int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n += d
	if p.n <= 0 {
		p.n = 0
		for _, w := range p.waiters {
			close(w)
		}
		p.waiters = nil
	}
}

// idle returns a channel that is closed when no call is pending.
func (p *pending) idle() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch := make(chan struct{})
	if p.n == 0 {
		close(ch)
	} else {
		p.waiters = append(p.waiters, ch)
	}
	return ch
}
