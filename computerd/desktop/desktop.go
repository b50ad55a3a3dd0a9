// Package desktop is computerd's live view and screenshot on a desktop
// computer: it captures the X display with ffmpeg (x11grab), encodes H264
// (libx264, ultrafast, zerolatency, baseline) or, for browsers that offer
// no H264, VP8 (libvpx realtime), and sends it to viewers over WebRTC
// (github.com/pion/webrtc/v4) through the TURN relay only.
//
// One encoder per codec serves every viewer. It starts with the first
// viewer (or a warm request) and stops IdleStop after the last one leaves.
// A viewer that joins a running encoder gets the frames since the last
// keyframe at once. Signalling is not trickled: computerd gathers its
// relay candidates, then answers the viewer's offer.
//
// It also serves the desktop actions agents use (actions.go): screenshots
// read straight from the X server (GetImage over the display's socket),
// the pointer's position, mouse and key input through the XTEST
// extension, and text typed with xdotool. Actions run one at a time and
// answer once the X server has applied them.
package desktop

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/webrtc/v4"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/httpjson"
)

// Environment variables a desktop computer is configured with.
const (
	EnvDesktop  = "BERTH_DESKTOP"       // "1" on the desktop image
	EnvSize     = "DESKTOP_SIZE"        // WIDTHxHEIGHT[xDEPTH], default 1280x720x24
	EnvFPS      = "DESKTOP_FPS"         // frames per second, default 15
	EnvIdleStop = "STREAM_IDLE_STOP_MS" // default 60000
	EnvTURNHost = "TURN_PUBLIC_HOST"
	EnvTURNPort = "TURN_PORT"
)

// Defaults of Config.
const (
	DefaultFPS         = 15
	DefaultIdleStop    = 60 * time.Second
	DefaultBitrateKbps = 2500
	DefaultMaxViewers  = 16
	maxSDPBytes        = 64 << 10
)

// Config configures a Desktop.
type Config struct {
	Display       string // X display, default ":0"
	Width, Height int    // screen size, default 1280x720
	FPS           int
	IdleStop      time.Duration // encoder stop after the last viewer
	BitrateKbps   int           // encoder ceiling
	MaxViewers    int           // viewers of this computer at once
	FFmpeg        string        // ffmpeg binary, default "ffmpeg"
	XDotool       string        // xdotool binary, default "xdotool" (types text)
	// TURNHost and TURNPort name the relay when an offer's ICE servers
	// carry only credentials.
	TURNHost string
	TURNPort int
	// Clock times the idle stop (default the real clock).
	Clock  clock.Clock
	Logger *slog.Logger
}

// ConfigFromEnv reads a Config from the environment of a desktop computer.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	c := Config{Display: cmp.Or(getenv("DISPLAY"), ":0"), TURNHost: getenv(EnvTURNHost)}
	size := cmp.Or(getenv(EnvSize), "1280x720x24")
	parts := strings.Split(size, "x")
	if len(parts) < 2 || len(parts) > 3 {
		return c, fmt.Errorf("%s=%q: want WIDTHxHEIGHT[xDEPTH]", EnvSize, size)
	}
	var err error
	if c.Width, err = strconv.Atoi(parts[0]); err != nil || c.Width < 64 || c.Width > 7680 || c.Width%2 != 0 {
		return c, fmt.Errorf("%s=%q: width must be an even number in 64..7680", EnvSize, size)
	}
	if c.Height, err = strconv.Atoi(parts[1]); err != nil || c.Height < 64 || c.Height > 4320 || c.Height%2 != 0 {
		return c, fmt.Errorf("%s=%q: height must be an even number in 64..4320", EnvSize, size)
	}
	if v := getenv(EnvFPS); v != "" {
		if c.FPS, err = strconv.Atoi(v); err != nil || c.FPS < 1 || c.FPS > 60 {
			return c, fmt.Errorf("%s=%q: want 1..60", EnvFPS, v)
		}
	}
	if v := getenv(EnvIdleStop); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms < 0 || ms > 24*3600*1000 {
			return c, fmt.Errorf("%s=%q: want milliseconds, 0..86400000", EnvIdleStop, v)
		}
		c.IdleStop = time.Duration(ms) * time.Millisecond
		if ms == 0 {
			c.IdleStop = time.Millisecond
		}
	}
	if v := getenv(EnvTURNPort); v != "" {
		if c.TURNPort, err = strconv.Atoi(v); err != nil || c.TURNPort < 1 || c.TURNPort > 65535 {
			return c, fmt.Errorf("%s=%q: want a port", EnvTURNPort, v)
		}
	}
	return c, nil
}

// Desktop serves live view and screenshots. It is an http.Handler for the
// paths in this package's Path constants; authentication is the caller's.
type Desktop struct {
	cfg Config
	log *slog.Logger
	mux *http.ServeMux

	apiOnce sync.Once
	api     *webrtc.API
	apiErr  error

	mu       sync.Mutex
	encoders map[string]*encoder
	holds    map[string]int           // viewers and warm requests per codec
	idle     map[string]chan struct{} // closed to cancel an idle stop
	viewers  map[*viewer]struct{}
	closed   bool
	seq      int

	// The desktop actions: one connection to the X server (screenshots,
	// the pointer, XTEST input), and one action at a time.
	xmu sync.Mutex
	x   *xconn
	// warmed is where WarmScreen got: 0 until it ends, then
	// screenReady or screenUnavailable (ScreenState).
	warmed  atomic.Int32
	inputMu sync.Mutex
}

// New returns a Desktop for cfg. Nothing runs until a viewer or a warm
// request comes.
func New(cfg Config) *Desktop {
	cfg.Display = cmp.Or(cfg.Display, ":0")
	cfg.Width = cmp.Or(cfg.Width, 1280)
	cfg.Height = cmp.Or(cfg.Height, 720)
	cfg.FPS = cmp.Or(cfg.FPS, DefaultFPS)
	cfg.IdleStop = cmp.Or(cfg.IdleStop, DefaultIdleStop)
	cfg.BitrateKbps = cmp.Or(cfg.BitrateKbps, DefaultBitrateKbps)
	cfg.MaxViewers = cmp.Or(cfg.MaxViewers, DefaultMaxViewers)
	cfg.FFmpeg = cmp.Or(cfg.FFmpeg, "ffmpeg")
	cfg.XDotool = cmp.Or(cfg.XDotool, "xdotool")
	cfg.TURNPort = cmp.Or(cfg.TURNPort, 3478)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	d := &Desktop{
		cfg: cfg, log: cfg.Logger.With("component", "desktop"), mux: http.NewServeMux(),
		encoders: map[string]*encoder{}, holds: map[string]int{}, idle: map[string]chan struct{}{}, viewers: map[*viewer]struct{}{},
	}
	d.mux.HandleFunc("POST "+PathOffer, d.handleOffer)
	d.mux.HandleFunc("POST "+PathWarm, d.handleWarm)
	d.mux.HandleFunc("GET "+PathStatus, d.handleStatus)
	d.mux.HandleFunc("GET "+PathScreenshot, d.handleScreenshot)
	d.actionRoutes()
	return d
}

// ServeHTTP implements http.Handler.
func (d *Desktop) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	d.mux.ServeHTTP(w, r)
}

// Close disconnects every viewer and stops the encoders.
func (d *Desktop) Close() error {
	d.mu.Lock()
	d.closed = true
	var vs []*viewer
	for v := range d.viewers {
		vs = append(vs, v)
	}
	var es []*encoder
	for _, e := range d.encoders {
		es = append(es, e)
	}
	for c, stop := range d.idle {
		close(stop)
		delete(d.idle, c)
	}
	d.mu.Unlock()
	for _, v := range vs {
		v.close()
	}
	d.xmu.Lock()
	if d.x != nil {
		d.x.Close()
		d.x = nil
	}
	d.xmu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for _, e := range es {
		e.stop(ctx)
	}
	return nil
}

// acquire returns the running encoder for codec, starting it if needed,
// and holds it until release.
func (d *Desktop) acquire(codec string) (*encoder, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, errors.New("desktop: shutting down")
	}
	if stop := d.idle[codec]; stop != nil {
		close(stop)
		delete(d.idle, codec)
	}
	e := d.encoders[codec]
	if e == nil {
		var err error
		if e, err = d.startEncoder(codec); err != nil {
			return nil, err
		}
		d.encoders[codec] = e
	}
	d.holds[codec]++
	return e, nil
}

// release drops a hold; the last one arms the idle stop.
func (d *Desktop) release(codec string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.holds[codec]--; d.holds[codec] > 0 {
		return
	}
	delete(d.holds, codec)
	e := d.encoders[codec]
	if e == nil || d.closed {
		return
	}
	stop, fire := make(chan struct{}), d.cfg.Clock.After(d.cfg.IdleStop)
	d.idle[codec] = stop
	go func() {
		select {
		case <-fire:
			d.idleStop(codec, e)
		case <-stop:
		}
	}()
}

func (d *Desktop) idleStop(codec string, e *encoder) {
	d.mu.Lock()
	if d.holds[codec] > 0 || d.encoders[codec] != e {
		d.mu.Unlock()
		return
	}
	delete(d.encoders, codec)
	if stop := d.idle[codec]; stop != nil {
		close(stop)
		delete(d.idle, codec)
	}
	d.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	e.stop(ctx)
	d.log.Info("encoder stopped: no viewers", "codec", codec, "idle", d.cfg.IdleStop)
}

// encoderExited forgets an encoder that ended by itself and disconnects
// its viewers, whose pages reconnect and start a new one.
func (d *Desktop) encoderExited(e *encoder) {
	d.mu.Lock()
	mine := d.encoders[e.codec] == e
	if mine {
		delete(d.encoders, e.codec)
	}
	var vs []*viewer
	for v := range d.viewers {
		if v.enc == e {
			vs = append(vs, v)
		}
	}
	d.mu.Unlock()
	if mine && e.err != nil {
		d.log.Warn("encoder ended", "codec", e.codec, "err", e.err)
	}
	for _, v := range vs {
		v.close()
	}
}

// Status reports the screen, the viewers and the running encoders.
func (d *Desktop) Status() Status {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := Status{Display: d.cfg.Display, Width: d.cfg.Width, Height: d.cfg.Height, FPS: d.cfg.FPS, Viewers: len(d.viewers), Encoders: []EncoderStatus{}}
	for _, c := range []string{CodecH264, CodecVP8} {
		if e := d.encoders[c]; e != nil {
			s.Encoders = append(s.Encoders, e.status())
		}
	}
	return s
}

func (d *Desktop) handleStatus(w http.ResponseWriter, r *http.Request) {
	httpjson.Write(w, http.StatusOK, d.Status())
}

func (d *Desktop) handleWarm(w http.ResponseWriter, r *http.Request) {
	var req WarmRequest
	if r.ContentLength != 0 {
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<10)).Decode(&req); err != nil {
			httpjson.WriteError(w, http.StatusBadRequest, computerd.CodeBadRequest, "invalid JSON body: "+err.Error())
			return
		}
	}
	codec := cmp.Or(req.Codec, CodecH264)
	if codec != CodecH264 && codec != CodecVP8 {
		httpjson.WriteError(w, http.StatusBadRequest, computerd.CodeBadRequest, fmt.Sprintf("codec: %q must be %q or %q", codec, CodecH264, CodecVP8))
		return
	}
	if _, err := d.acquire(codec); err != nil {
		httpjson.WriteError(w, http.StatusServiceUnavailable, computerd.CodeInternal, err.Error())
		return
	}
	d.release(codec)
	httpjson.Write(w, http.StatusOK, d.Status())
}

// handleScreenshot answers a PNG of the screen: one frame from ffmpeg.
func (d *Desktop) handleScreenshot(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, d.cfg.FFmpeg, "-hide_banner", "-loglevel", "error", "-nostdin",
		"-f", "x11grab", "-draw_mouse", "0", "-video_size", fmt.Sprintf("%dx%d", d.cfg.Width, d.cfg.Height), "-i", d.cfg.Display,
		"-frames:v", "1", "-c:v", "png", "-compression_level", "1", "-f", "image2pipe", "pipe:1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil || out.Len() == 0 {
		httpjson.WriteError(w, http.StatusServiceUnavailable, computerd.CodeInternal, fmt.Sprintf("screenshot of %s: %v %s", d.cfg.Display, err, strings.TrimSpace(errb.String())))
		return
	}
	w.Header().Set("Content-Type", "image/png")
	w.Header().Set("Content-Length", strconv.Itoa(out.Len()))
	w.Write(out.Bytes())
}
