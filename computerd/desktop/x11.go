package desktop

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// xconn is a minimal X11 client over the display's Unix socket: the
// connection setup, GetImage of the root window in ZPixmap format and
// QueryPointer. That is all a screenshot and the cursor position need,
// and it spares a process per screenshot. It is not safe for concurrent
// use; the Desktop serialises its calls.
type xconn struct {
	c   net.Conn
	r   *bufio.Reader
	seq uint16

	root          uint32
	width, height int
	depth         uint8
	bpp           int // bits per pixel of the root depth's ZPixmap format
	pad           int // scanline pad in bits
	msb           bool
	red, green    uint32
	blue          uint32

	minKey, maxKey uint8
	xtest          uint8 // the XTEST extension's major opcode; 0 when absent
	keymap         map[uint32]keyOf
	spare          []uint8 // keycodes with no keysym, for characters off the map
	nextSpare      int
}

// keyOf is how a keysym is typed: its keycode, with Shift or without.
type keyOf struct {
	code  uint8
	shift bool
}

// X11 opcodes and reply codes used here.
const (
	xOpQueryPointer  = 38
	xOpGetInputFocus = 43
	xOpGetImage      = 73
	xOpQueryExt      = 98
	xOpGetKeyMap     = 101
	xOpChangeKeyMap  = 100
	xZPixmap         = 2

	// XTEST FakeInput event types.
	xKeyPress      = 2
	xKeyRelease    = 3
	xButtonPress   = 4
	xButtonRelease = 5
	xMotionNotify  = 6
)

// displaySocket returns the Unix socket path of an X display such as ":0"
// or ":1.0"; only local displays are supported.
func displaySocket(display string) (string, error) {
	d, ok := strings.CutPrefix(display, ":")
	if !ok {
		return "", fmt.Errorf("display %q: only local displays (:N) are supported", display)
	}
	d, _, _ = strings.Cut(d, ".")
	if _, err := strconv.Atoi(d); err != nil {
		return "", fmt.Errorf("display %q: want :N", display)
	}
	return "/tmp/.X11-unix/X" + d, nil
}

// xauthCookie returns the MIT-MAGIC-COOKIE-1 for display number n from the
// Xauthority file ($XAUTHORITY, or ~/.Xauthority), or nil when there is
// none: Xvfb started without -auth accepts local clients without one.
func xauthCookie(n string) []byte {
	path := os.Getenv("XAUTHORITY")
	if path == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil
		}
		path = filepath.Join(home, ".Xauthority")
	}
	data, err := os.ReadFile(path)
	if err != nil || len(data) > 1<<20 {
		return nil
	}
	field := func() ([]byte, bool) {
		if len(data) < 2 {
			return nil, false
		}
		l := int(binary.BigEndian.Uint16(data))
		if len(data) < 2+l {
			return nil, false
		}
		f := data[2 : 2+l]
		data = data[2+l:]
		return f, true
	}
	for len(data) >= 2 {
		data = data[2:] // family
		var fs [4][]byte
		for i := range fs {
			f, ok := field()
			if !ok {
				return nil
			}
			fs[i] = f
		}
		// address, number, name, data
		if (len(fs[1]) == 0 || string(fs[1]) == n) && string(fs[2]) == "MIT-MAGIC-COOKIE-1" {
			return fs[3]
		}
	}
	return nil
}

func pad4(n int) int { return (4 - n%4) % 4 }

// dialX connects to display and reads the server's setup.
func dialX(display string, timeout time.Duration) (*xconn, error) {
	sock, err := displaySocket(display)
	if err != nil {
		return nil, err
	}
	c, err := net.DialTimeout("unix", sock, timeout)
	if err != nil {
		return nil, fmt.Errorf("connect to X display %s: %w", display, err)
	}
	c.SetDeadline(time.Now().Add(timeout))
	n := strings.TrimPrefix(display, ":")
	n, _, _ = strings.Cut(n, ".")
	x := &xconn{c: c, r: bufio.NewReaderSize(c, 64<<10)}
	if err := x.setup(xauthCookie(n)); err != nil {
		c.Close()
		return nil, fmt.Errorf("the X display %s: %w", display, err)
	}
	c.SetDeadline(time.Time{})
	return x, nil
}

func (x *xconn) setup(cookie []byte) error {
	var name []byte
	if cookie != nil {
		name = []byte("MIT-MAGIC-COOKIE-1")
	}
	req := make([]byte, 12, 12+len(name)+len(cookie)+8)
	req[0] = 'l'
	binary.LittleEndian.PutUint16(req[2:], 11)
	binary.LittleEndian.PutUint16(req[6:], uint16(len(name)))
	binary.LittleEndian.PutUint16(req[8:], uint16(len(cookie)))
	req = append(req, name...)
	req = append(req, make([]byte, pad4(len(name)))...)
	req = append(req, cookie...)
	req = append(req, make([]byte, pad4(len(cookie)))...)
	if _, err := x.c.Write(req); err != nil {
		return err
	}
	var head [8]byte
	if _, err := io.ReadFull(x.r, head[:]); err != nil {
		return fmt.Errorf("read setup: %w", err)
	}
	body := make([]byte, 4*int(binary.LittleEndian.Uint16(head[6:])))
	if _, err := io.ReadFull(x.r, body); err != nil {
		return fmt.Errorf("read setup: %w", err)
	}
	if head[0] != 1 {
		reason := body
		if head[0] == 0 && int(head[1]) <= len(body) {
			reason = body[:head[1]]
		}
		return fmt.Errorf("connection refused: %s", strings.TrimSpace(string(reason)))
	}
	if len(body) < 32 {
		return errors.New("setup reply too short")
	}
	le := binary.LittleEndian
	vendorLen := int(le.Uint16(body[16:]))
	nScreens, nFormats := int(body[20]), int(body[21])
	x.msb = body[22] == 1
	x.minKey, x.maxKey = body[26], body[27]
	off := 32 + vendorLen + pad4(vendorLen)
	type format struct{ bpp, pad int }
	formats := map[uint8]format{}
	for range nFormats {
		if off+8 > len(body) {
			return errors.New("setup reply cut short (formats)")
		}
		formats[body[off]] = format{int(body[off+1]), int(body[off+2])}
		off += 8
	}
	if nScreens < 1 || off+40 > len(body) {
		return errors.New("setup reply has no screen")
	}
	s := body[off:]
	x.root = le.Uint32(s[0:])
	x.width, x.height = int(le.Uint16(s[20:])), int(le.Uint16(s[22:]))
	rootVisual := le.Uint32(s[32:])
	x.depth = s[38]
	nDepths := int(s[39])
	p := 40
	for range nDepths {
		if p+8 > len(s) {
			return errors.New("setup reply cut short (depths)")
		}
		nVisuals := int(le.Uint16(s[p+2:]))
		p += 8
		for range nVisuals {
			if p+24 > len(s) {
				return errors.New("setup reply cut short (visuals)")
			}
			if le.Uint32(s[p:]) == rootVisual {
				x.red, x.green, x.blue = le.Uint32(s[p+8:]), le.Uint32(s[p+12:]), le.Uint32(s[p+16:])
			}
			p += 24
		}
	}
	f, ok := formats[x.depth]
	if !ok {
		return fmt.Errorf("no pixmap format for the root depth %d", x.depth)
	}
	x.bpp, x.pad = f.bpp, f.pad
	if x.bpp != 32 && x.bpp != 16 && x.bpp != 24 {
		return fmt.Errorf("unsupported %d bits per pixel", x.bpp)
	}
	if x.red == 0 || x.green == 0 || x.blue == 0 {
		return errors.New("the root visual is not a true-colour visual")
	}
	return nil
}

func (x *xconn) Close() error { return x.c.Close() }

// send sends requests that have no reply, each a whole request.
func (x *xconn) send(deadline time.Time, reqs ...[]byte) error {
	x.c.SetWriteDeadline(deadline)
	defer x.c.SetWriteDeadline(time.Time{})
	var all []byte
	for _, r := range reqs {
		all = append(all, r...)
	}
	if _, err := x.c.Write(all); err != nil {
		return err
	}
	x.seq += uint16(len(reqs))
	return nil
}

// request sends one request and returns its reply (32 bytes plus the
// extra data), skipping events. An error answered to an earlier request
// without a reply is returned too.
func (x *xconn) request(req []byte, deadline time.Time) ([]byte, error) {
	x.c.SetDeadline(deadline)
	defer x.c.SetDeadline(time.Time{})
	if _, err := x.c.Write(req); err != nil {
		return nil, err
	}
	x.seq++
	var earlier error
	for {
		var head [32]byte
		if _, err := io.ReadFull(x.r, head[:]); err != nil {
			return nil, err
		}
		seq := binary.LittleEndian.Uint16(head[2:])
		switch head[0] {
		case 0: // error
			err := fmt.Errorf("an X error %d (request %d.%d)", head[1], head[10], binary.LittleEndian.Uint16(head[8:]))
			if seq == x.seq {
				return nil, err
			}
			earlier = err
		case 1: // reply
			extra := 4 * int(binary.LittleEndian.Uint32(head[4:]))
			if extra > 256<<20 {
				return nil, fmt.Errorf("an X reply of %d bytes", extra)
			}
			reply := make([]byte, 32+extra)
			copy(reply, head[:])
			if _, err := io.ReadFull(x.r, reply[32:]); err != nil {
				return nil, err
			}
			if seq == x.seq {
				return reply, earlier
			}
		default: // an event: not asked for, skipped
		}
	}
}

// Pointer returns the pointer's position on the root window.
func (x *xconn) Pointer(deadline time.Time) (int, int, error) {
	req := make([]byte, 8)
	req[0] = xOpQueryPointer
	binary.LittleEndian.PutUint16(req[2:], 2)
	binary.LittleEndian.PutUint32(req[4:], x.root)
	reply, err := x.request(req, deadline)
	if err != nil {
		return 0, 0, err
	}
	return int(int16(binary.LittleEndian.Uint16(reply[16:]))), int(int16(binary.LittleEndian.Uint16(reply[18:]))), nil
}

// Capture returns the whole screen.
func (x *xconn) Capture(deadline time.Time) (*image.RGBA, error) {
	req := make([]byte, 20)
	req[0] = xOpGetImage
	req[1] = xZPixmap
	le := binary.LittleEndian
	le.PutUint16(req[2:], 5)
	le.PutUint32(req[4:], x.root)
	le.PutUint16(req[12:], uint16(x.width))
	le.PutUint16(req[14:], uint16(x.height))
	le.PutUint32(req[16:], 0xffffffff)
	reply, err := x.request(req, deadline)
	if err != nil {
		return nil, err
	}
	data := reply[32:]
	stride := (x.width*x.bpp + x.pad - 1) / x.pad * x.pad / 8
	if len(data) < stride*x.height {
		return nil, fmt.Errorf("GetImage answered %d bytes, want %d", len(data), stride*x.height)
	}
	img := image.NewRGBA(image.Rect(0, 0, x.width, x.height))
	rs, gs, bs := shiftOf(x.red), shiftOf(x.green), shiftOf(x.blue)
	fast := x.bpp == 32 && !x.msb && x.red == 0xff0000 && x.green == 0xff00 && x.blue == 0xff
	for y := 0; y < x.height; y++ {
		src := data[y*stride:]
		dst := img.Pix[y*img.Stride : y*img.Stride+4*x.width]
		if fast {
			for i := 0; i < len(dst); i += 4 {
				dst[i], dst[i+1], dst[i+2], dst[i+3] = src[i+2], src[i+1], src[i], 0xff
			}
			continue
		}
		bytes := x.bpp / 8
		for i := 0; i < x.width; i++ {
			var v uint32
			b := src[i*bytes : i*bytes+bytes]
			for k := range bytes {
				if x.msb {
					v = v<<8 | uint32(b[k])
				} else {
					v |= uint32(b[k]) << (8 * k)
				}
			}
			dst[4*i] = channel(v, x.red, rs)
			dst[4*i+1] = channel(v, x.green, gs)
			dst[4*i+2] = channel(v, x.blue, bs)
			dst[4*i+3] = 0xff
		}
	}
	return img, nil
}

func shiftOf(mask uint32) int {
	s := 0
	for mask != 0 && mask&1 == 0 {
		mask >>= 1
		s++
	}
	return s
}

// channel scales the bits of mask in v to 0..255.
func channel(v, mask uint32, shift int) uint8 {
	max := mask >> shift
	return uint8((v & mask >> shift) * 255 / max)
}

// sync makes a round trip, so that every request sent before has been
// applied by the server.
func (x *xconn) sync(deadline time.Time) error {
	req := make([]byte, 4)
	req[0] = xOpGetInputFocus
	binary.LittleEndian.PutUint16(req[2:], 1)
	_, err := x.request(req, deadline)
	return err
}

// initInput finds the XTEST extension and reads the keyboard mapping.
func (x *xconn) initInput(deadline time.Time) error {
	name := "XTEST"
	req := make([]byte, 8, 8+len(name)+pad4(len(name)))
	req[0] = xOpQueryExt
	binary.LittleEndian.PutUint16(req[2:], uint16(2+(len(name)+pad4(len(name)))/4))
	binary.LittleEndian.PutUint16(req[4:], uint16(len(name)))
	req = append(req, name...)
	req = append(req, make([]byte, pad4(len(name)))...)
	reply, err := x.request(req, deadline)
	if err != nil {
		return fmt.Errorf("query XTEST: %w", err)
	}
	if reply[8] == 0 {
		return errors.New("the X server has no XTEST extension")
	}
	x.xtest = reply[9]
	return x.loadKeymap(deadline)
}

// loadKeymap reads which keycode types each keysym.
func (x *xconn) loadKeymap(deadline time.Time) error {
	count := int(x.maxKey) - int(x.minKey) + 1
	req := make([]byte, 8)
	req[0] = xOpGetKeyMap
	binary.LittleEndian.PutUint16(req[2:], 2)
	req[4], req[5] = x.minKey, uint8(count)
	reply, err := x.request(req, deadline)
	if err != nil {
		return fmt.Errorf("read the keyboard mapping: %w", err)
	}
	per := int(reply[1])
	syms := reply[32:]
	m := map[uint32]keyOf{}
	x.spare = nil
	for i := range count {
		empty := true
		for j := 0; j < per; j++ {
			if off := 4 * (i*per + j); off+4 <= len(syms) && binary.LittleEndian.Uint32(syms[off:]) != 0 {
				empty = false
			}
		}
		if empty {
			x.spare = append(x.spare, uint8(int(x.minKey)+i))
		}
		for j := 0; j < per && j < 2; j++ {
			off := 4 * (i*per + j)
			if off+4 > len(syms) {
				break
			}
			ks := binary.LittleEndian.Uint32(syms[off:])
			if ks == 0 {
				continue
			}
			if _, seen := m[ks]; !seen {
				m[ks] = keyOf{code: uint8(int(x.minKey) + i), shift: j == 1}
			}
		}
	}
	x.keymap = m
	return nil
}

// fake is one XTEST FakeInput request.
func (x *xconn) fake(typ, detail uint8, px, py int) []byte {
	req := make([]byte, 36)
	req[0], req[1] = x.xtest, 2
	le := binary.LittleEndian
	le.PutUint16(req[2:], 9)
	req[4], req[5] = typ, detail
	if typ == xMotionNotify {
		le.PutUint32(req[12:], x.root)
		le.PutUint16(req[24:], uint16(int16(px)))
		le.PutUint16(req[26:], uint16(int16(py)))
	}
	return req
}

// mapSpare puts keysyms on spare keycodes (both levels, so Shift does not
// change them) in one ChangeKeyboardMapping per keycode, and records them.
func (x *xconn) mapSpare(syms []uint32, deadline time.Time) error {
	var reqs [][]byte
	for _, sym := range syms {
		code := x.spare[x.nextSpare%len(x.spare)]
		x.nextSpare++
		for old, k := range x.keymap {
			if k.code == code {
				delete(x.keymap, old)
			}
		}
		req := make([]byte, 16)
		req[0], req[1] = xOpChangeKeyMap, 1
		binary.LittleEndian.PutUint16(req[2:], 4)
		req[4], req[5] = code, 2
		binary.LittleEndian.PutUint32(req[8:], sym)
		binary.LittleEndian.PutUint32(req[12:], sym)
		reqs = append(reqs, req)
		x.keymap[sym] = keyOf{code: code}
	}
	if err := x.send(deadline, reqs...); err != nil {
		return err
	}
	return x.sync(deadline)
}
