package egress

import "sync"

// Default tunnel limits (Config.MaxTunnelsPerComputer, Config.MaxTunnels).
const (
	DefaultMaxTunnelsPerComputer = 256
	DefaultMaxTunnels            = 16384
)

// tunnelSlots counts the open tunnels, each computer's and in all, so that
// one computer cannot hold every socket of the proxy's process.
type tunnelSlots struct {
	perComputer, total int

	mu    sync.Mutex
	n     int
	byKey map[string]int
}

// take reserves a tunnel for computer; false when it, or the proxy, is at
// its limit.
func (s *tunnelSlots) take(computer string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n >= s.total || s.byKey[computer] >= s.perComputer {
		return false
	}
	if s.byKey == nil {
		s.byKey = map[string]int{}
	}
	s.n++
	s.byKey[computer]++
	return true
}

// give releases a tunnel taken for computer.
func (s *tunnelSlots) give(computer string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n--
	if s.byKey[computer]--; s.byKey[computer] <= 0 {
		delete(s.byKey, computer)
	}
}

// open returns the open tunnels of computer.
func (s *tunnelSlots) open(computer string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byKey[computer]
}
