package egress

import (
	"sync"
	"sync/atomic"
)

// Each direction of a tunnel reads into a buffer sized to how fast its
// bytes come: it starts at the smallest size, moves up a size whenever a
// read fills its buffer and down a size whenever a read fills less than a
// quarter of it. A quiet socket is waited on with no buffer at all.
//
// Bulk transfers end at 4 MiB reads and writes. On a 2-core loopback a
// 1 GiB download through the proxy ran at a median 0.91x the speed of a
// direct connection, against 0.72x when the largest size was 1 MiB, 0.48x
// at 128 KiB and 0.50x with splice(2), with the least CPU per byte of all
// four (docs/performance.md, "The egress proxy").
var bufferSizes = [...]int{4 << 10, 128 << 10, 1 << 20, 4 << 20}

// Buffers from largeFrom up count against largeBudget, the memory all
// tunnels together may hold in them; a direction that finds the budget
// spent goes on with the largest size that fits.
const (
	largeFrom   = 2
	largeBudget = 256 << 20
)

var (
	bufferPools [len(bufferSizes)]sync.Pool
	largeHeld   atomic.Int64
	lentBytes   atomic.Int64 // all classes: Stats.Buffered
)

// getBuffer lends a buffer of size class i, or of the largest smaller
// class the budget allows. It returns the buffer and its class.
func getBuffer(i int) (*[]byte, int) {
	i = min(max(i, 0), len(bufferSizes)-1)
	for ; i >= largeFrom; i-- {
		size := int64(bufferSizes[i])
		if largeHeld.Add(size) <= largeBudget {
			break
		}
		largeHeld.Add(-size)
	}
	lentBytes.Add(int64(bufferSizes[i]))
	if b, ok := bufferPools[i].Get().(*[]byte); ok {
		return b, i
	}
	b := make([]byte, bufferSizes[i])
	return &b, i
}

// putBuffer gives back a buffer that getBuffer lent as class i.
func putBuffer(b *[]byte, i int) {
	if i >= largeFrom {
		largeHeld.Add(-int64(bufferSizes[i]))
	}
	lentBytes.Add(-int64(bufferSizes[i]))
	bufferPools[i].Put(b)
}

// nextClass is the class for the read after one that filled n bytes of a
// buffer of class i.
func nextClass(i, n int) int {
	size := bufferSizes[i]
	switch {
	case n == size && i < len(bufferSizes)-1:
		return i + 1
	case n < size/4 && i > 0:
		return i - 1
	}
	return i
}

// bufferPool lends plain requests' copy buffers (httputil.BufferPool).
type bufferPool struct{}

func (bufferPool) Get() []byte {
	b, _ := getBuffer(1)
	return *b
}

func (bufferPool) Put(b []byte) {
	if cap(b) == bufferSizes[1] {
		b = b[:cap(b)]
		putBuffer(&b, 1)
	}
}
