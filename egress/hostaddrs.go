package egress

import (
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/berthdev/berth/internal/clock"
)

// hostAddrRefresh is how old the host's address list may be before the
// next check reads it again.
const hostAddrRefresh = 30 * time.Second

// hostAddrs is the set of this host's own addresses (Config.BlockHost): a
// public address of the host is as private to a computer as its LAN. The
// list is read again when it is older than hostAddrRefresh, so an address
// the host gains is refused within that long.
type hostAddrs struct {
	list  func() ([]netip.Addr, error)
	clock clock.Clock

	mu   sync.Mutex
	set  map[netip.Addr]bool
	read time.Time
}

func (h *hostAddrs) has(a netip.Addr) bool {
	a = a.Unmap()
	h.mu.Lock()
	defer h.mu.Unlock()
	if now := h.clock.Now(); h.set == nil || now.Sub(h.read) >= hostAddrRefresh {
		as, err := h.list()
		if err == nil || h.set == nil {
			h.set = map[netip.Addr]bool{}
			for _, x := range as {
				h.set[x.Unmap()] = true
			}
		}
		h.read = now
	}
	return h.set[a]
}

// HostAddrs lists the addresses of this host's interfaces, unmapped.
func HostAddrs() ([]netip.Addr, error) {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(as))
	for _, a := range as {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().Unmap())
		}
	}
	return out, nil
}
