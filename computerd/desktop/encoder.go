package desktop

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// encoder is one ffmpeg process capturing the screen in one codec, shared
// by every viewer of that codec. It keeps the frames since the last
// keyframe, so a viewer that joins is sent a decodable picture at once.
type encoder struct {
	codec   string
	cmd     *exec.Cmd
	started time.Time
	done    chan struct{} // closed when the process has exited
	err     error         // why it ended, set before done closes

	mu     sync.Mutex
	gop    []frame // the last keyframe and the frames after it
	sinks  map[*viewer]struct{}
	frames int64
	bytes  int64
}

// ffmpegArgs is the capture and encoder command line for codec.
func (d *Desktop) ffmpegArgs(codec string) []string {
	c := d.cfg
	args := []string{
		"-hide_banner", "-loglevel", "error", "-nostdin", "-nostats",
		"-fflags", "nobuffer", "-flags", "low_delay",
		"-f", "x11grab", "-draw_mouse", "1", "-framerate", strconv.Itoa(c.FPS),
		"-video_size", fmt.Sprintf("%dx%d", c.Width, c.Height), "-i", c.Display,
		"-an", "-pix_fmt", "yuv420p",
	}
	gop := strconv.Itoa(c.FPS) // a keyframe every second
	switch codec {
	case CodecVP8:
		args = append(args,
			"-c:v", "libvpx", "-deadline", "realtime", "-cpu-used", "8", "-lag-in-frames", "0",
			"-error-resilient", "1", "-auto-alt-ref", "0", "-threads", "1",
			"-g", gop, "-keyint_min", gop,
			"-b:v", strconv.Itoa(c.BitrateKbps)+"k", "-maxrate", strconv.Itoa(c.BitrateKbps)+"k",
			"-flush_packets", "1", "-f", "ivf", "pipe:1")
	default:
		args = append(args,
			"-c:v", "libx264", "-preset", "ultrafast", "-tune", "zerolatency", "-profile:v", "baseline",
			"-threads", "1", "-g", gop, "-keyint_min", gop, "-sc_threshold", "0", "-bf", "0",
			"-crf", "26", "-maxrate", strconv.Itoa(c.BitrateKbps)+"k", "-bufsize", strconv.Itoa(c.BitrateKbps)+"k",
			"-flush_packets", "1", "-flvflags", "no_duration_filesize", "-f", "flv", "pipe:1")
	}
	return args
}

// startEncoder starts ffmpeg for codec and the goroutine that reads it.
func (d *Desktop) startEncoder(codec string) (*encoder, error) {
	cmd := exec.Command(d.cfg.FFmpeg, d.ffmpegArgs(codec)...)
	cmd.Env = append(cmd.Environ(), "DISPLAY="+d.cfg.Display)
	newProcessGroup(cmd)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr := &tailBuffer{max: 4 << 10}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", d.cfg.FFmpeg, err)
	}
	e := &encoder{codec: codec, cmd: cmd, started: time.Now(), done: make(chan struct{}), sinks: map[*viewer]struct{}{}}
	var fr frameReader
	if codec == CodecVP8 {
		fr = newIVFReader(stdout)
	} else {
		fr = newFLVReader(stdout)
	}
	d.log.Info("encoder started", "codec", codec, "pid", cmd.Process.Pid, "size", fmt.Sprintf("%dx%d", d.cfg.Width, d.cfg.Height), "fps", d.cfg.FPS)
	go func() {
		rerr := e.run(fr) // never nil: io.EOF when ffmpeg's output ends
		werr := cmd.Wait()
		if !errors.Is(rerr, io.EOF) {
			e.err = rerr
		} else if werr != nil {
			e.err = fmt.Errorf("ffmpeg: %v: %s", werr, stderr.String())
		}
		close(e.done)
		d.encoderExited(e)
	}()
	return e, nil
}

// run hands every frame to the viewers until the stream ends.
func (e *encoder) run(fr frameReader) error {
	var last time.Duration
	for {
		f, err := fr.next()
		if err != nil {
			return err
		}
		dur := f.pts - last
		if last == 0 || dur <= 0 || dur > time.Second {
			dur = 66 * time.Millisecond
		}
		last = f.pts
		e.mu.Lock()
		if f.key {
			e.gop = e.gop[:0]
		}
		if f.key || len(e.gop) > 0 {
			e.gop = append(e.gop, f)
		}
		e.frames++
		e.bytes += int64(len(f.data))
		sinks := make([]*viewer, 0, len(e.sinks))
		for v := range e.sinks {
			sinks = append(sinks, v)
		}
		e.mu.Unlock()
		for _, v := range sinks {
			v.write(f.data, dur)
		}
	}
}

// join adds v and sends it the frames since the last keyframe, in order
// and before any newer frame.
func (e *encoder) join(v *viewer) {
	e.mu.Lock()
	e.sinks[v] = struct{}{}
	e.mu.Unlock()
	e.replay(v)
}

// replay sends v the frames since the last keyframe, so that it can
// decode at once: when it joins, and when it reports a lost picture (its
// first packets may have arrived before its path was ready).
func (e *encoder) replay(v *viewer) {
	e.mu.Lock()
	if _, ok := e.sinks[v]; !ok {
		e.mu.Unlock()
		return
	}
	gop := append([]frame(nil), e.gop...)
	v.writeMu.Lock()
	e.mu.Unlock()
	defer v.writeMu.Unlock()
	for i, f := range gop {
		// Catch up quickly: the frames are old, only the last one matters.
		d := time.Millisecond
		if i == len(gop)-1 {
			d = 66 * time.Millisecond
		}
		v.writeLocked(f.data, d)
	}
}

func (e *encoder) leave(v *viewer) {
	e.mu.Lock()
	delete(e.sinks, v)
	e.mu.Unlock()
}

func (e *encoder) status() EncoderStatus {
	e.mu.Lock()
	defer e.mu.Unlock()
	return EncoderStatus{Codec: e.codec, PID: e.cmd.Process.Pid, Viewers: len(e.sinks), Frames: e.frames, Bytes: e.bytes, StartedAt: e.started}
}

// stop ends ffmpeg (TERM, then KILL after a second) and waits for it.
func (e *encoder) stop(ctx context.Context) {
	signalGroup(e.cmd, syscall.SIGTERM)
	select {
	case <-e.done:
		return
	case <-time.After(time.Second):
	case <-ctx.Done():
	}
	signalGroup(e.cmd, syscall.SIGKILL)
	<-e.done
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
