package server

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// capture is an io.Writer that keeps the head and the tail of a stream
// within a bound and counts every byte written. Its memory grows with the
// output up to the bound and no further.
type capture struct {
	headCap int
	tailCap int
	head    []byte
	tail    []byte // a ring once len(tail) == tailCap; pos is its oldest byte
	pos     int
	total   int64
}

func newCapture(limit int) *capture {
	return &capture{headCap: limit / 2, tailCap: limit - limit/2}
}

// Write keeps p's bytes that fall in the head or the tail. It never fails.
func (c *capture) Write(p []byte) (int, error) {
	n := len(p)
	c.total += int64(n)
	if room := c.headCap - len(c.head); room > 0 {
		k := min(room, len(p))
		c.head = appendBounded(c.head, p[:k], c.headCap)
		p = p[k:]
	}
	if len(p) == 0 || c.tailCap == 0 {
		return n, nil
	}
	if len(p) >= c.tailCap {
		c.tail = appendBounded(c.tail[:0], p[len(p)-c.tailCap:], c.tailCap)
		c.pos = 0
		return n, nil
	}
	if room := c.tailCap - len(c.tail); room > 0 {
		k := min(room, len(p))
		c.tail = appendBounded(c.tail, p[:k], c.tailCap)
		p = p[k:]
	}
	for len(p) > 0 {
		k := copy(c.tail[c.pos:], p)
		c.pos = (c.pos + k) % c.tailCap
		p = p[k:]
	}
	return n, nil
}

// appendBounded appends p to b, never growing b's capacity past limit.
func appendBounded(b, p []byte, limit int) []byte {
	if need := len(b) + len(p); need > cap(b) {
		nb := make([]byte, len(b), min(max(2*cap(b), need, 512), limit))
		copy(nb, b)
		b = nb
	}
	return append(b, p...)
}

// truncationMarker is the line put between the head and the tail of a
// stream that was cut.
func truncationMarker(dropped int64) string {
	return fmt.Sprintf("\n[... %d bytes truncated ...]\n", dropped)
}

// result returns the captured text and whether the stream was cut. The
// text is valid UTF-8: a character split by the cut is dropped whole, and
// bytes that are not UTF-8 become U+FFFD.
func (c *capture) result() (string, bool) {
	// Put the ring in order, in place: oldest byte first.
	slices.Reverse(c.tail[:c.pos])
	slices.Reverse(c.tail[c.pos:])
	slices.Reverse(c.tail)
	c.pos = 0
	if c.total <= int64(c.headCap+c.tailCap) {
		// Nothing was dropped, and a character may span head and tail.
		all := make([]byte, 0, len(c.head)+len(c.tail))
		return toValidUTF8(append(append(all, c.head...), c.tail...)), false
	}
	head := trimPartialEnd(c.head)
	tail := trimPartialStart(c.tail)
	dropped := c.total - int64(len(head)) - int64(len(tail))
	var b strings.Builder
	b.Grow(len(head) + len(tail) + 40)
	writeValidUTF8(&b, head)
	b.WriteString(truncationMarker(dropped))
	writeValidUTF8(&b, tail)
	return b.String(), true
}

// trimPartialEnd drops an incomplete UTF-8 sequence at the end of b.
func trimPartialEnd(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			return b
		}
	}
	return b
}

// trimPartialStart drops the continuation bytes of a character whose start
// was cut off the front of b.
func trimPartialStart(b []byte) []byte {
	i := 0
	for i < len(b) && i < utf8.UTFMax-1 && !utf8.RuneStart(b[i]) {
		i++
	}
	return b[i:]
}

// toValidUTF8 returns b as a string with each byte that is not part of a
// valid UTF-8 sequence replaced by U+FFFD.
func toValidUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var s strings.Builder
	s.Grow(len(b) + 16)
	writeValidUTF8(&s, b)
	return s.String()
}

// writeValidUTF8 writes b to s, each byte that is not part of a valid
// UTF-8 sequence replaced by U+FFFD.
func writeValidUTF8(s *strings.Builder, b []byte) {
	if utf8.Valid(b) {
		s.Write(b)
		return
	}
	for len(b) > 0 {
		i := 0
		for i < len(b) {
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				break
			}
			i += size
		}
		s.Write(b[:i])
		if i < len(b) {
			s.WriteRune(utf8.RuneError)
			i++
		}
		b = b[i:]
	}
}
