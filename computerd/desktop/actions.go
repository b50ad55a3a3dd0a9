package desktop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
	"math"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/httpjson"
)

// actionTimeout bounds an action beside its own waits; xTimeout bounds
// one exchange with the X server.
const (
	actionTimeout = 10 * time.Second
	xTimeout      = 5 * time.Second
)

// BadRequestError is an action refused for its arguments; its message
// names the field and the limit.
type BadRequestError struct{ Message string }

func (e *BadRequestError) Error() string { return e.Message }

func badRequest(format string, args ...any) error {
	return &BadRequestError{Message: fmt.Sprintf(format, args...)}
}

// actionRoutes serves the desktop actions.
func (d *Desktop) actionRoutes() {
	d.mux.HandleFunc("GET "+PathShot, d.handleShot)
	d.mux.HandleFunc("GET "+PathCursor, d.handleCursor)
	d.mux.HandleFunc("POST "+PathMouse, d.handleMouse)
	d.mux.HandleFunc("POST "+PathKeyboard, d.handleKeyboard)
	d.mux.HandleFunc("POST "+PathWait, d.handleWait)
}

// withX runs fn with the connection to the X server, connecting first when
// there is none. A connection that failed is dropped; idempotent calls
// (retry) are then tried once more on a new one.
func (d *Desktop) withX(ctx context.Context, retry bool, fn func(x *xconn, deadline time.Time) error) error {
	d.xmu.Lock()
	defer d.xmu.Unlock()
	deadline := time.Now().Add(xTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	for attempt := 0; ; attempt++ {
		if d.x == nil {
			x, err := dialX(d.cfg.Display, time.Until(deadline))
			if err != nil {
				return err
			}
			if err := x.initInput(deadline); err != nil {
				x.Close()
				return err
			}
			d.x = x
		}
		err := fn(d.x, deadline)
		if err == nil {
			return nil
		}
		var bad *BadRequestError
		if errors.As(err, &bad) {
			return err
		}
		d.x.Close()
		d.x = nil
		if !retry || attempt > 0 || ctx.Err() != nil {
			return err
		}
	}
}

// screen returns the screen's size.
func (d *Desktop) screen(ctx context.Context) (int, int, error) {
	var w, h int
	err := d.withX(ctx, true, func(x *xconn, _ time.Time) error {
		w, h = x.width, x.height
		return nil
	})
	return w, h, err
}

// checkShot validates a screenshot request against a screen width.
func checkShot(r *ShotRequest, screenW int) error {
	switch r.Format {
	case "":
		r.Format = FormatPNG
	case FormatPNG, FormatJPEG:
	case "jpg":
		r.Format = FormatJPEG
	default:
		return badRequest("format: %q must be %q or %q", r.Format, FormatPNG, FormatJPEG)
	}
	if r.Quality == 0 {
		r.Quality = DefaultJPEGQuality
	}
	if r.Quality < 1 || r.Quality > 100 {
		return badRequest("quality: %d is outside 1..100", r.Quality)
	}
	if r.Width < 0 || r.Width > screenW || (r.Width > 0 && r.Width < 16) {
		return badRequest("width: %d is outside 16..%d (the screen's width)", r.Width, screenW)
	}
	return nil
}

var pngEncoder = png.Encoder{CompressionLevel: png.BestSpeed, BufferPool: &pngPool{}}

type pngPool struct{ p sync.Pool }

func (p *pngPool) Get() *png.EncoderBuffer {
	b, _ := p.p.Get().(*png.EncoderBuffer)
	return b
}
func (p *pngPool) Put(b *png.EncoderBuffer) { p.p.Put(b) }

// Screenshot captures the screen, scales it to req.Width and encodes it.
func (d *Desktop) Screenshot(ctx context.Context, req ShotRequest) (Shot, error) {
	var img *image.RGBA
	err := d.withX(ctx, true, func(x *xconn, deadline time.Time) error {
		if err := checkShot(&req, x.width); err != nil {
			return err
		}
		var err error
		img, err = x.Capture(deadline)
		return err
	})
	if err != nil {
		return Shot{}, err
	}
	s := Shot{Format: req.Format, ScreenWidth: img.Rect.Dx(), ScreenHeight: img.Rect.Dy(), Scale: 1}
	out := img
	if req.Width > 0 && req.Width != s.ScreenWidth {
		h := max(1, int(math.Round(float64(s.ScreenHeight)*float64(req.Width)/float64(s.ScreenWidth))))
		out = scaleImage(img, req.Width, h)
		s.Scale = float64(req.Width) / float64(s.ScreenWidth)
	}
	s.Width, s.Height = out.Rect.Dx(), out.Rect.Dy()
	var buf bytes.Buffer
	buf.Grow(s.Width * s.Height / 2)
	if req.Format == FormatJPEG {
		err = jpeg.Encode(&buf, out, &jpeg.Options{Quality: req.Quality})
	} else {
		err = pngEncoder.Encode(&buf, out)
	}
	if err != nil {
		return Shot{}, fmt.Errorf("encode the screenshot: %w", err)
	}
	s.Data = buf.Bytes()
	return s, nil
}

// The states of WarmScreen after it ends (Desktop.warmed).
const (
	screenReady = iota + 1
	screenUnavailable
)

// WarmScreen takes one screenshot, and throws it away, as soon as the X
// server answers, waiting for it at most wait: the connection to the
// server, the capture and the encoder are then ready before a session's
// first screenshot. A desktop computer waiting in a warm pool pays for
// them there, instead of in its session's first call. ScreenState says
// how it went.
func (d *Desktop) WarmScreen(ctx context.Context, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	retry := time.NewTimer(0)
	defer retry.Stop()
	for {
		_, err := d.Screenshot(ctx, ShotRequest{Format: FormatPNG})
		if err == nil {
			d.warmed.Store(screenReady)
			return nil
		}
		// The display's server may still be starting.
		retry.Reset(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			d.warmed.Store(screenUnavailable)
			return fmt.Errorf("warm the screen of %s: %w", d.cfg.Display, err)
		case <-retry.C:
		}
	}
}

// ScreenState is the screen's state for computerd's health answer:
// computerd.ScreenStarting until WarmScreen ends, then ScreenReady or
// ScreenUnavailable.
func (d *Desktop) ScreenState() string {
	switch d.warmed.Load() {
	case screenReady:
		return computerd.ScreenReady
	case screenUnavailable:
		return computerd.ScreenUnavailable
	}
	return computerd.ScreenStarting
}

// scaleImage resizes src to w x h, bilinearly.
func scaleImage(src *image.RGBA, w, h int) *image.RGBA {
	dst := image.NewRGBA(image.Rect(0, 0, w, h))
	sw, sh := src.Rect.Dx(), src.Rect.Dy()
	fx := float64(sw) / float64(w)
	fy := float64(sh) / float64(h)
	for y := range h {
		sy := (float64(y)+0.5)*fy - 0.5
		y0 := int(math.Floor(sy))
		wy := int((sy - float64(y0)) * 256)
		y1 := min(y0+1, sh-1)
		y0 = max(y0, 0)
		r0 := src.Pix[y0*src.Stride:]
		r1 := src.Pix[y1*src.Stride:]
		drow := dst.Pix[y*dst.Stride:]
		for x := range w {
			sx := (float64(x)+0.5)*fx - 0.5
			x0 := int(math.Floor(sx))
			wx := int((sx - float64(x0)) * 256)
			x1 := min(x0+1, sw-1)
			x0 = max(x0, 0)
			for c := range 3 {
				a := int(r0[4*x0+c])*(256-wx) + int(r0[4*x1+c])*wx
				b := int(r1[4*x0+c])*(256-wx) + int(r1[4*x1+c])*wx
				drow[4*x+c] = uint8((a*(256-wy) + b*wy) >> 16)
			}
			drow[4*x+3] = 0xff
		}
	}
	return dst
}

func (d *Desktop) handleShot(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := ShotRequest{Format: q.Get("format")}
	for _, f := range []struct {
		name string
		dst  *int
	}{{"quality", &req.Quality}, {"width", &req.Width}} {
		if v := q.Get(f.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				httpjson.WriteError(w, http.StatusBadRequest, computerd.CodeBadRequest, fmt.Sprintf("%s: %q is not a number", f.name, v))
				return
			}
			*f.dst = n
		}
	}
	s, err := d.Screenshot(r.Context(), req)
	if err != nil {
		d.writeErr(w, err)
		return
	}
	SetShotHeader(w.Header(), s)
	w.Write(s.Data)
}

func (d *Desktop) writeErr(w http.ResponseWriter, err error) {
	var bad *BadRequestError
	if errors.As(err, &bad) {
		httpjson.WriteError(w, http.StatusBadRequest, computerd.CodeBadRequest, bad.Message)
		return
	}
	d.log.Warn("desktop action failed", "err", err)
	httpjson.WriteError(w, http.StatusServiceUnavailable, computerd.CodeInternal, "desktop: "+err.Error())
}

// Cursor returns the pointer's position and the screen's size.
func (d *Desktop) Cursor(ctx context.Context) (ActionResult, error) {
	var res ActionResult
	err := d.withX(ctx, true, func(x *xconn, deadline time.Time) error {
		px, py, err := x.Pointer(deadline)
		res = ActionResult{Cursor: []int{px, py}, ScreenWidth: x.width, ScreenHeight: x.height}
		return err
	})
	return res, err
}

func (d *Desktop) handleCursor(w http.ResponseWriter, r *http.Request) {
	res, err := d.Cursor(r.Context())
	if err != nil {
		d.writeErr(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, res)
}

// point checks a coordinate against the screen.
func point(field string, c []int, w, h int) (int, int, error) {
	if len(c) != 2 {
		return 0, 0, badRequest("%s: want [x, y], got %d numbers", field, len(c))
	}
	if c[0] < 0 || c[1] < 0 || c[0] >= w || c[1] >= h {
		return 0, 0, badRequest("%s: [%d, %d] is off the %dx%d screen (x 0..%d, y 0..%d)", field, c[0], c[1], w, h, w-1, h-1)
	}
	return c[0], c[1], nil
}

var buttons = map[string]uint8{"": 1, "left": 1, "middle": 2, "right": 3}

var scrollButtons = map[string]uint8{"up": 4, "down": 5, "left": 6, "right": 7}

// mouseSteps checks a mouse request against a w x h screen and turns it
// into input steps.
func mouseSteps(r MouseRequest, w, h int) ([]step, error) {
	var steps []step
	moveTo := func(field string, c []int, required bool) error {
		if c == nil && !required {
			return nil
		}
		if c == nil {
			return badRequest("%s: required for %s", field, r.Action)
		}
		x, y, err := point(field, c, w, h)
		if err != nil {
			return err
		}
		steps = append(steps, step{typ: xMotionNotify, x: x, y: y})
		return nil
	}
	button := func() (uint8, error) {
		b, ok := buttons[r.Button]
		if !ok {
			return 0, badRequest("button: %q must be left, right or middle", r.Button)
		}
		return b, nil
	}
	mods, err := parseModifiers(r.Modifiers)
	if err != nil {
		return nil, err
	}
	if len(mods) > 0 && r.Action != MouseClick && r.Action != MouseDrag && r.Action != MouseScroll {
		return nil, badRequest("modifiers: only for click, drag and scroll, not %s", r.Action)
	}
	if r.Path != nil && r.Action != MouseDrag {
		return nil, badRequest("path: only for drag")
	}
	switch r.Action {
	case MouseMove:
		if err := moveTo("coordinate", r.Coordinate, true); err != nil {
			return nil, err
		}
	case MouseClick:
		b, err := button()
		if err != nil {
			return nil, err
		}
		n := r.Clicks
		if n == 0 {
			n = 1
		}
		if n < 1 || n > MaxClicks {
			return nil, badRequest("clicks: %d is outside 1..%d", r.Clicks, MaxClicks)
		}
		if err := moveTo("coordinate", r.Coordinate, false); err != nil {
			return nil, err
		}
		steps = append(steps, presses(mods, b, n)...)
	case MouseDown, MouseUp:
		b, err := button()
		if err != nil {
			return nil, err
		}
		if err := moveTo("coordinate", r.Coordinate, false); err != nil {
			return nil, err
		}
		typ := uint8(xButtonPress)
		if r.Action == MouseUp {
			typ = xButtonRelease
		}
		steps = append(steps, step{typ: typ, detail: b})
	case MouseDrag:
		b, err := button()
		if err != nil {
			return nil, err
		}
		if r.Coordinate != nil {
			return nil, badRequest("coordinate: a drag takes path, its points from the first to the last")
		}
		if len(r.Path) < 2 || len(r.Path) > MaxDragPoints {
			return nil, badRequest("path: %d points, want 2..%d", len(r.Path), MaxDragPoints)
		}
		var px, py int
		for i, c := range r.Path {
			x, y, err := point(fmt.Sprintf("path[%d]", i), c, w, h)
			if err != nil {
				return nil, err
			}
			if i == 0 {
				steps = append(steps, step{typ: xMotionNotify, x: x, y: y})
				steps = append(steps, keySteps(mods, true)...)
				steps = append(steps, step{typ: xButtonPress, detail: b, pause: 20 * time.Millisecond})
			} else {
				// Intermediate motion, so that programs that follow the
				// pointer see it travel.
				n := max(1, min(10, int(math.Hypot(float64(x-px), float64(y-py))/40)))
				for k := 1; k <= n; k++ {
					steps = append(steps, step{typ: xMotionNotify, x: px + (x-px)*k/n, y: py + (y-py)*k/n, pause: 5 * time.Millisecond})
				}
			}
			px, py = x, y
		}
		steps[len(steps)-1].pause = 20 * time.Millisecond
		steps = append(steps, step{typ: xButtonRelease, detail: b})
		steps = append(steps, keySteps(mods, false)...)
	case MouseScroll:
		b, ok := scrollButtons[r.Direction]
		if !ok {
			return nil, badRequest("direction: %q must be up, down, left or right", r.Direction)
		}
		n := r.Amount
		if n == 0 {
			n = 3
		}
		if n < 1 || n > MaxScrollAmount {
			return nil, badRequest("amount: %d is outside 1..%d", r.Amount, MaxScrollAmount)
		}
		if err := moveTo("coordinate", r.Coordinate, false); err != nil {
			return nil, err
		}
		steps = append(steps, presses(mods, b, n)...)
	case "":
		return nil, badRequest("action: required (move, click, down, up, drag or scroll)")
	default:
		return nil, badRequest("action: %q must be move, click, down, up, drag or scroll", r.Action)
	}
	return steps, nil
}

// step is one input event: a FakeInput of typ with detail (a button; for
// keys, sym is the keysym), or a motion to x, y; then a pause.
type step struct {
	typ    uint8
	detail uint8
	sym    uint32
	x, y   int
	pause  time.Duration
}

// keySteps presses (down) or releases keys, releasing in reverse order.
// presses clicks button b n times with the keys mods held.
func presses(mods []keyName, b uint8, n int) []step {
	steps := keySteps(mods, true)
	for range n {
		steps = append(steps, step{typ: xButtonPress, detail: b}, step{typ: xButtonRelease, detail: b})
	}
	return append(steps, keySteps(mods, false)...)
}

func keySteps(keys []keyName, down bool) []step {
	var out []step
	for i := range keys {
		k := keys[i]
		if down {
			out = append(out, step{typ: xKeyPress, sym: k.sym})
		} else {
			k = keys[len(keys)-1-i]
			out = append(out, step{typ: xKeyRelease, sym: k.sym})
		}
	}
	return out
}

// errUnmapped is returned when a key is not on the keyboard map: xdotool
// then types it, mapping it on a spare keycode for the time of the key.
var errUnmapped = errors.New("key not on the keyboard map")

// play sends steps through XTEST and returns the pointer's position once
// the server has applied them.
func (d *Desktop) play(ctx context.Context, steps []step) (ActionResult, error) {
	var res ActionResult
	err := d.withX(ctx, false, func(x *xconn, deadline time.Time) error {
		var batch [][]byte
		shift, hasShift := x.keymap[xkShiftL]
		// Check every key first: nothing is sent when one is missing.
		for _, s := range steps {
			if s.typ == xKeyPress || s.typ == xKeyRelease {
				if k, ok := x.keymap[s.sym]; !ok || (k.shift && !hasShift) {
					return errUnmapped
				}
			}
		}
		for _, s := range steps {
			switch s.typ {
			case xKeyPress, xKeyRelease:
				// A key typed with Shift (such as "A" or "exclam") is
				// pressed within Shift.
				k := x.keymap[s.sym]
				if k.shift && s.typ == xKeyPress {
					batch = append(batch, x.fake(xKeyPress, shift.code, 0, 0))
				}
				batch = append(batch, x.fake(s.typ, k.code, 0, 0))
				if k.shift && s.typ == xKeyRelease {
					batch = append(batch, x.fake(xKeyRelease, shift.code, 0, 0))
				}
			default:
				batch = append(batch, x.fake(s.typ, s.detail, s.x, s.y))
			}
			if s.pause > 0 {
				if err := x.send(deadline, batch...); err != nil {
					return err
				}
				batch = nil
				if err := x.sync(deadline); err != nil {
					return err
				}
				if !sleepCtx(ctx, s.pause) {
					return ctx.Err()
				}
			}
		}
		if err := x.send(deadline, batch...); err != nil {
			return err
		}
		// QueryPointer's reply comes after every request above is applied.
		px, py, err := x.Pointer(deadline)
		res = ActionResult{Cursor: []int{px, py}, ScreenWidth: x.width, ScreenHeight: x.height}
		return err
	})
	return res, err
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Mouse runs a mouse action.
func (d *Desktop) Mouse(ctx context.Context, r MouseRequest) (ActionResult, error) {
	w, h, err := d.screen(ctx)
	if err != nil {
		return ActionResult{}, err
	}
	steps, err := mouseSteps(r, w, h)
	if err != nil {
		return ActionResult{}, err
	}
	d.inputMu.Lock()
	defer d.inputMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, actionTimeout)
	defer cancel()
	res, err := d.play(ctx, steps)
	if errors.Is(err, errUnmapped) {
		return res, badRequest("modifiers: %q are not all keys of this screen's keyboard map", r.Modifiers)
	}
	return res, err
}

func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		httpjson.WriteError(w, http.StatusBadRequest, computerd.CodeBadRequest, "invalid JSON body: "+err.Error())
		return false
	}
	return true
}

func (d *Desktop) handleMouse(w http.ResponseWriter, r *http.Request) {
	var req MouseRequest
	if !decodeBody(w, r, &req) {
		return
	}
	res, err := d.Mouse(r.Context(), req)
	if err != nil {
		d.writeErr(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, res)
}

// Keysyms used by name.
const (
	xkShiftL = 0xffe1
)

// keyName is a key of a combination: the name xdotool knows and its keysym.
type keyName struct {
	name string
	sym  uint32
}

// keyAliases are the other names people and models give keys.
var keyAliases = map[string]string{
	"ctrl": "Control_L", "control": "Control_L", "shift": "Shift_L", "alt": "Alt_L", "option": "Alt_L",
	"super": "Super_L", "win": "Super_L", "windows": "Super_L", "cmd": "Super_L", "command": "Super_L", "meta": "Meta_L",
	"enter": "Return", "esc": "Escape", "backspace": "BackSpace", "del": "Delete", "ins": "Insert",
	"pageup": "Prior", "pgup": "Prior", "pagedown": "Next", "pgdn": "Next",
	"arrowup": "Up", "arrowdown": "Down", "arrowleft": "Left", "arrowright": "Right",
	"capslock": "Caps_Lock", "numlock": "Num_Lock", "printscreen": "Print", "spacebar": "space", " ": "space",
}

// keyFolded maps lower-case names to keysym names that are the only ones
// of their spelling, for names given in another case ("return", "f5").
var keyFolded = func() map[string]string {
	m := map[string]string{}
	dup := map[string]bool{}
	for n := range keysyms {
		l := strings.ToLower(n)
		if _, ok := m[l]; ok {
			dup[l] = true
		}
		m[l] = n
	}
	for l := range dup {
		if _, ok := keysyms[l]; ok {
			m[l] = l
		} else {
			delete(m, l)
		}
	}
	return m
}()

// latin1Names names the keysyms of Latin-1 characters, whose values are
// their code points ("eacute" for é).
var latin1Names = func() map[rune]string {
	m := map[rune]string{}
	for n, v := range keysyms {
		if v >= 0x20 && v <= 0xff {
			if old, ok := m[rune(v)]; !ok || n < old {
				m[rune(v)] = n
			}
		}
	}
	return m
}()

// parseKey resolves one key name.
func parseKey(s string) (keyName, bool) {
	if sym, ok := keysyms[s]; ok {
		return keyName{s, sym}, true
	}
	l := strings.ToLower(s)
	if n, ok := keyAliases[l]; ok {
		return keyName{n, keysyms[n]}, true
	}
	if n, ok := keyFolded[l]; ok {
		return keyName{n, keysyms[n]}, true
	}
	if r, size := utf8.DecodeRuneInString(s); size == len(s) && r != utf8.RuneError && unicode.IsPrint(r) {
		if r <= 0xff {
			if n, ok := latin1Names[r]; ok {
				return keyName{n, uint32(r)}, true
			}
		}
		// X names the keysym of any other character Uhhhh.
		return keyName{fmt.Sprintf("U%04X", r), 0x1000000 | uint32(r)}, true
	}
	if h, ok := strings.CutPrefix(l, "0x"); ok {
		if v, err := strconv.ParseUint(h, 16, 32); err == nil && v > 0 {
			return keyName{s, uint32(v)}, true
		}
	}
	return keyName{}, false
}

// parseCombo resolves a combination such as "ctrl+shift+t".
func parseCombo(field, combo string) ([]keyName, error) {
	if combo == "" {
		return nil, badRequest("%s: an empty key combination", field)
	}
	parts := strings.Split(combo, "+")
	if combo == "+" {
		parts = []string{"plus"}
	}
	var out []keyName
	for _, p := range parts {
		if p == "" {
			return nil, badRequest("%s: %q has an empty key name (write plus for the + key)", field, combo)
		}
		k, ok := parseKey(p)
		if !ok {
			return nil, badRequest("%s: unknown key name %q in %q; use X key names such as Return, Escape, Tab, BackSpace, Page_Down, F5, ctrl+c, alt+Tab", field, p, combo)
		}
		out = append(out, k)
	}
	return out, nil
}

// parseModifiers resolves a click's modifier keys.
func parseModifiers(mods []string) ([]keyName, error) {
	var out []keyName
	for i, m := range mods {
		ks, err := parseCombo(fmt.Sprintf("modifiers[%d]", i), strings.TrimSpace(m))
		if err != nil {
			return nil, err
		}
		out = append(out, ks...)
	}
	return out, nil
}

// checkKeyboard checks a keyboard request; it returns the combinations of
// a key or hold_key action.
func checkKeyboard(r KeyboardRequest) ([][]keyName, error) {
	switch r.Action {
	case KeyType:
		if r.Keys != "" || r.DurationMs != 0 {
			return nil, badRequest("type takes text only (keys and durationMs are for key and hold_key)")
		}
		if r.Text == "" {
			return nil, badRequest("text: required for type")
		}
		if !utf8.ValidString(r.Text) {
			return nil, badRequest("text: not valid UTF-8")
		}
		if n := utf8.RuneCountInString(r.Text); n > MaxTypeChars {
			return nil, badRequest("text: %d characters, at most %d per type action", n, MaxTypeChars)
		}
		if strings.ContainsRune(r.Text, 0) {
			return nil, badRequest("text: contains a NUL character")
		}
		return nil, nil
	case KeyPress, KeyHold:
		if r.Text != "" {
			return nil, badRequest("text: for type only; %s takes keys", r.Action)
		}
		if n := utf8.RuneCountInString(r.Keys); n > MaxKeyChars {
			return nil, badRequest("keys: %d characters, at most %d", n, MaxKeyChars)
		}
		fields := strings.Fields(r.Keys)
		if len(fields) == 0 {
			return nil, badRequest("keys: required for %s (for example \"ctrl+c\" or \"Return\")", r.Action)
		}
		if r.Action == KeyHold {
			if len(fields) != 1 {
				return nil, badRequest("keys: hold_key holds one combination, got %d", len(fields))
			}
			if r.DurationMs < 1 || time.Duration(r.DurationMs)*time.Millisecond > MaxWait {
				return nil, badRequest("durationMs: %d is outside 1..%d", r.DurationMs, MaxWait.Milliseconds())
			}
		} else if r.DurationMs != 0 {
			return nil, badRequest("durationMs: for hold_key only")
		}
		var out [][]keyName
		for _, f := range fields {
			ks, err := parseCombo("keys", f)
			if err != nil {
				return nil, err
			}
			out = append(out, ks)
		}
		return out, nil
	case "":
		return nil, badRequest("action: required (type, key or hold_key)")
	}
	return nil, badRequest("action: %q must be type, key or hold_key", r.Action)
}

// Keyboard types text or presses keys.
func (d *Desktop) Keyboard(ctx context.Context, r KeyboardRequest) (ActionResult, error) {
	combos, err := checkKeyboard(r)
	if err != nil {
		return ActionResult{}, err
	}
	d.inputMu.Lock()
	defer d.inputMu.Unlock()
	switch r.Action {
	case KeyType:
		n := utf8.RuneCountInString(r.Text)
		ctx, cancel := context.WithTimeout(ctx, actionTimeout+time.Duration(n)*time.Millisecond)
		defer cancel()
		return d.typeText(ctx, r.Text)
	case KeyPress:
		ctx, cancel := context.WithTimeout(ctx, actionTimeout)
		defer cancel()
		var steps []step
		for _, c := range combos {
			steps = append(steps, keySteps(c, true)...)
			steps = append(steps, keySteps(c, false)...)
		}
		res, err := d.play(ctx, steps)
		if !errors.Is(err, errUnmapped) {
			return res, err
		}
		args := []string{"key", "--delay", "12", "--"}
		for _, c := range combos {
			args = append(args, comboArg(c))
		}
		if err := d.xdotool(ctx, "", args...); err != nil {
			return ActionResult{}, err
		}
		return d.Cursor(ctx)
	default: // KeyHold
		hold := time.Duration(r.DurationMs) * time.Millisecond
		ctx, cancel := context.WithTimeout(ctx, actionTimeout+hold)
		defer cancel()
		c := combos[0]
		down := keySteps(c, true)
		down[len(down)-1].pause = hold
		res, err := d.play(ctx, append(down, keySteps(c, false)...))
		if !errors.Is(err, errUnmapped) {
			return res, err
		}
		if err := d.xdotool(ctx, "", "keydown", "--", comboArg(c), "sleep", strconv.FormatFloat(hold.Seconds(), 'f', 3, 64), "keyup", "--", comboArg(c)); err != nil {
			return ActionResult{}, err
		}
		return d.Cursor(ctx)
	}
}

func comboArg(c []keyName) string {
	var names []string
	for _, k := range c {
		names = append(names, k.name)
	}
	return strings.Join(names, "+")
}

// xdotool runs xdotool with args (and stdin), within ctx's deadline.
func (d *Desktop) xdotool(ctx context.Context, stdin string, args ...string) error {
	cmd := exec.CommandContext(ctx, d.cfg.XDotool, args...)
	cmd.Env = append(os.Environ(), "DISPLAY="+d.cfg.Display)
	cmd.Stdin = strings.NewReader(stdin)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	msg := strings.TrimSpace(errb.String())
	if i := strings.Index(msg, "No such key name"); i >= 0 {
		line, _, _ := strings.Cut(msg[i:], "\n")
		return badRequest("keys: %s", strings.TrimSuffix(line, " Ignoring it."))
	}
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("xdotool %s: stopped at its deadline", args[0])
		}
		return fmt.Errorf("xdotool %s: %v %s", args[0], err, msg)
	}
	return nil
}

func (d *Desktop) handleKeyboard(w http.ResponseWriter, r *http.Request) {
	var req KeyboardRequest
	if !decodeBody(w, r, &req) {
		return
	}
	res, err := d.Keyboard(r.Context(), req)
	if err != nil {
		d.writeErr(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, res)
}

// Wait waits, then answers the pointer's position.
func (d *Desktop) Wait(ctx context.Context, r WaitRequest) (ActionResult, error) {
	if r.DurationMs < 0 || time.Duration(r.DurationMs)*time.Millisecond > MaxWait {
		return ActionResult{}, badRequest("durationMs: %d is outside 0..%d", r.DurationMs, MaxWait.Milliseconds())
	}
	if !sleepCtx(ctx, time.Duration(r.DurationMs)*time.Millisecond) {
		return ActionResult{}, ctx.Err()
	}
	return d.Cursor(ctx)
}

func (d *Desktop) handleWait(w http.ResponseWriter, r *http.Request) {
	var req WaitRequest
	if !decodeBody(w, r, &req) {
		return
	}
	res, err := d.Wait(r.Context(), req)
	if err != nil {
		d.writeErr(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, res)
}

// runeSym is the keysym that types r.
func runeSym(r rune) uint32 {
	switch {
	case r == '\n':
		return 0xff0d // Return
	case r == '\t':
		return 0xff09 // Tab
	case r == '\b':
		return 0xff08 // BackSpace
	case r >= 0x20 && r <= 0x7e, r >= 0xa0 && r <= 0xff:
		return uint32(r)
	}
	return 0x1000000 | uint32(r)
}

// typeText types text through XTEST. A character that no key types is
// put on a spare keycode first; spare keycodes are remapped only between
// batches, after the keys typed with their earlier mapping were taken in,
// so that no program reads a key with the wrong mapping.
func (d *Desktop) typeText(ctx context.Context, text string) (ActionResult, error) {
	var res ActionResult
	err := d.withX(ctx, false, func(x *xconn, deadline time.Time) error {
		if dl, ok := ctx.Deadline(); ok {
			deadline = dl
		}
		shift, hasShift := x.keymap[xkShiftL]
		runes := []rune(strings.ReplaceAll(text, "\r\n", "\n"))
		for len(runes) > 0 {
			// One batch: as many characters as the spare keycodes cover.
			var need []uint32
			seen := map[uint32]bool{}
			end := 0
			for end < len(runes) {
				sym := runeSym(runes[end])
				if k, ok := x.keymap[sym]; !ok || (k.shift && !hasShift) {
					if !seen[sym] {
						if len(need) == len(x.spare) {
							break
						}
						seen[sym] = true
						need = append(need, sym)
					}
				}
				end++
			}
			if end == 0 {
				return errors.New("the keyboard map has no spare keycode for characters off the map")
			}
			if len(need) > 0 {
				if len(x.spare) == 0 {
					return errors.New("the keyboard map has no spare keycode for characters off the map")
				}
				if err := x.mapSpare(need, deadline); err != nil {
					return err
				}
			}
			var batch [][]byte
			for _, r := range runes[:end] {
				k := x.keymap[runeSym(r)]
				if k.shift {
					batch = append(batch, x.fake(xKeyPress, shift.code, 0, 0))
				}
				batch = append(batch, x.fake(xKeyPress, k.code, 0, 0), x.fake(xKeyRelease, k.code, 0, 0))
				if k.shift {
					batch = append(batch, x.fake(xKeyRelease, shift.code, 0, 0))
				}
			}
			if err := x.send(deadline, batch...); err != nil {
				return err
			}
			if err := x.sync(deadline); err != nil {
				return err
			}
			runes = runes[end:]
			if len(runes) > 0 {
				// Let programs take the keys in before their keycodes change.
				if !sleepCtx(ctx, 100*time.Millisecond) {
					return ctx.Err()
				}
			}
		}
		px, py, err := x.Pointer(deadline)
		res = ActionResult{Cursor: []int{px, py}, ScreenWidth: x.width, ScreenHeight: x.height}
		return err
	})
	return res, err
}
