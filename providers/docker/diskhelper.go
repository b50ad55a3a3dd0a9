package docker

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/volume"
	"github.com/moby/moby/client"
)

// The disk quota's privileged steps (quota.go) run in a standing helper:
// a container of the computer's image, started at the first step and kept
// while the provider is open, which runs each step it is sent on its
// standard input and answers on its output. A step then costs the engine
// nothing but the script's own processes; a helper container of its own
// costs a create, a start and a removal, and an exec a runtime process,
// which were most of what the quota added to a computer's create and
// destroy (docs/performance.md).
//
// The standing helper has the one-shot helper's limits: root with only
// CAP_SYS_ADMIN, CAP_CHOWN and CAP_DAC_OVERRIDE, of the host's devices only
// the loop devices, no network, a read-only root filesystem, no new
// privileges, and the same fixed scripts, given only a disk's file (in a
// volume named after a computer id the provider checked), a size and a
// user. In place of one disk volume it sees the engine's volume folder,
// where the local driver keeps a volume's files in <folder>/<name>/_data,
// without the filesystems the engine mounts there (computers' homes): it
// reaches any disk volume's file, and no computer's home.
//
// The protocol, one line each way (the provider checks every field):
//
//	provider: ID OP FILE [SIZE USER]    OP is make or release
//	helper:   ID CODE OUTPUT            OUTPUT: the last KiB, in hex
//
// Each step runs in the background, so steps of concurrent creates run side
// by side, and an answer is one write shorter than a pipe's atomic size, so
// answers never interleave. The helper's standard input is the provider's
// attach connection, once: when the provider closes it, or dies, the helper
// finishes its steps and ends, and the engine removes its container. Close
// removes it at once. A helper that is gone (removed by hand, the engine
// restarted) fails the steps it was running and is replaced; a step that
// never reached it is sent to the new one.
//
// A disk volume whose mount point does not have the local driver's shape
// gets a helper container of its own (runHelper).

// stepTimeout bounds one step.
const stepTimeout = 2 * time.Minute

// A standing helper is replaced after standingUse (the one replaced ends
// when its steps are done), well before its LabelExpires falls
// (standingLabelLife), which is a backstop: a helper ends with its
// provider's connection.
const (
	standingUse       = 12 * time.Hour
	standingLabelLife = 24 * time.Hour
)

// Limits of a standing helper, which runs the steps of concurrent creates
// and destroys side by side.
var (
	standingMemory int64 = 512 << 20
	standingPids   int64 = 1024
)

// volumesTarget is where a standing helper sees the engine's volume folder.
const volumesTarget = "/volumes"

// Bounds of what is read from a helper: a step's output (the script's last
// KiB, hex encoded, and the fields before it), and one frame of the
// engine's stream.
const (
	maxStepOutput = 1 << 10
	maxAnswerLine = 2*maxStepOutput + 64
	maxFrame      = 64 << 10
	readyLine     = "berth-disk-ready"
)

// standingScript is a standing helper's process: it stops the mounts the
// engine makes in its volume folder from showing in the helper, removes any
// that showed before, and says it is ready. Then a loop runs each step it
// reads ($1 is makeScript, $2 releaseScript) in the background until the
// input ends. The loop is a job of its own, so that this shell, process 1,
// waits all along and so reaps every step's processes, which the ( ... & )
// form hands to it.
var standingScript = `set -eu
mount --make-rprivate ` + volumesTarget + `
for p in $(cut -d' ' -f5 /proc/self/mountinfo | grep '^` + volumesTarget + `/' || :); do
	umount -l "$p" 2>/dev/null || :
done
echo ` + readyLine + `
exec 3<&0
while read -r id op f a b; do
	case $op in
	make) s=$1 ;;
	release) s=$2 ;;
	*) echo "$id 2 $(echo "no step $op" | od -An -tx1 | tr -d ' \n')"; continue ;;
	esac
	( (
		o=/m/out.$id
		c=0
		sh -c "$s" berth-disk "$f" $a $b >"$o" 2>&1 || c=$?
		echo "$id $c $(tail -c ` + strconv.Itoa(maxStepOutput) + ` "$o" | od -An -tx1 | tr -d ' \n')"
		rm -f "$o"
	) & )
done <&3 &
wait
`

// stepArg is what a step's argument may hold: no space, no line break.
var stepArg = regexp.MustCompile(`^[A-Za-z0-9_./:-]+$`)

// errHelperGone marks a step whose standing helper went away.
var errHelperGone = errors.New("the standing disk helper is gone")

// diskHelpers are a provider's standing helpers, one per image.
type diskHelpers struct {
	d *Docker

	mu       sync.Mutex
	byImage  map[string]*standing
	starts   int  // helpers started
	off      bool // every step gets a helper container of its own (tests)
	retiring sync.WaitGroup
}

// diskStep runs a disk step (opMake, opRelease) for the disk volume v with
// a helper of image: in the standing helper, or in a helper container of
// its own when v is not a local driver's volume. args follow the disk's
// file. An error that wraps errNotStarted means the step never ran.
func (d *Docker) diskStep(ctx context.Context, image string, v volume.Volume, op string, args ...string) (string, error) {
	folder, ok := volumeFolder(v)
	if !ok || d.helpers.isOff() {
		return d.runHelper(ctx, image, v.Name, stepScripts[op], append([]string{diskFile}, args...)...)
	}
	file := path.Join(volumesTarget, v.Name, "_data", path.Base(diskFile))
	return d.helpers.run(ctx, image, folder, op, append([]string{file}, args...))
}

// The steps, and their scripts (quota.go).
const (
	opMake    = "make"
	opRelease = "release"
)

var stepScripts = map[string]string{opMake: makeScript, opRelease: releaseScript}

// volumeFolder returns the folder a local driver's volume v lives in, from
// its mount point <folder>/<name>/_data.
func volumeFolder(v volume.Volume) (string, bool) {
	if v.Driver != "" && v.Driver != "local" {
		return "", false
	}
	folder, ok := strings.CutSuffix(v.Mountpoint, "/"+v.Name+"/_data")
	if !ok || !path.IsAbs(folder) || path.Clean(folder) != folder || folder == "/" {
		return "", false
	}
	return folder, true
}

func (h *diskHelpers) isOff() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.off
}

// run runs a step in the standing helper of image, started if needed.
func (h *diskHelpers) run(ctx context.Context, image, folder, op string, args []string) (string, error) {
	if _, ok := stepScripts[op]; !ok {
		return "", fmt.Errorf("no disk step %q", op)
	}
	for _, a := range args {
		if !stepArg.MatchString(a) {
			return "", fmt.Errorf("disk step %s: argument %q has other characters than letters, digits and _./:-", op, a)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		s, err := h.get(ctx, image, folder)
		if err != nil {
			return "", err
		}
		out, err := s.call(ctx, op, args)
		if errors.Is(err, errHelperGone) {
			h.drop(image, s)
			if errors.Is(err, errNotStarted) && attempt == 0 {
				continue
			}
		}
		return out, err
	}
}

// get returns the standing helper of image, starting one when there is
// none, or the one there was is gone or has served standingUse.
func (h *diskHelpers) get(ctx context.Context, image, folder string) (*standing, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.d.opts.Clock.Now()
	s, ok := h.byImage[image]
	if ok && s.folder == folder && s.alive() && now.Sub(s.started) < standingUse {
		return s, nil
	}
	if ok {
		h.retire(image, s)
	}
	s, err := h.d.startHelper(ctx, image, folder)
	if err != nil {
		return nil, err
	}
	s.started = now
	if h.byImage == nil {
		h.byImage = make(map[string]*standing)
	}
	h.byImage[image] = s
	h.starts++
	return s, nil
}

// drop forgets a helper found gone and removes what is left of it.
func (h *diskHelpers) drop(image string, s *standing) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.byImage[image] == s {
		h.retire(image, s)
	}
}

// retire forgets the helper of image, and ends it in the background once
// its steps are done (or have had their time). Hold h.mu.
func (h *diskHelpers) retire(image string, s *standing) {
	delete(h.byImage, image)
	h.retiring.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		limit := time.NewTimer(stepTimeout)
		defer limit.Stop()
	wait:
		for s.busy() {
			select {
			case <-s.done:
				break wait
			case <-limit.C:
				break wait
			case <-t.C:
			}
		}
		h.d.endHelper(s)
	})
}

// close removes the standing helpers, and waits for the retired ones.
func (h *diskHelpers) close() {
	h.mu.Lock()
	for image, s := range h.byImage {
		h.d.endHelper(s)
		delete(h.byImage, image)
	}
	h.mu.Unlock()
	h.retiring.Wait()
}

// standing is one standing helper and the provider's connection to it.
type standing struct {
	id      string
	folder  string    // the engine's volume folder, bound at volumesTarget
	started time.Time // by the provider's clock
	conn    client.HijackedResponse
	ready   chan struct{} // closed when the helper said it is ready
	done    chan struct{} // closed when the answers have ended

	wmu sync.Mutex // writes of requests

	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan answer
	gone    error  // why the helper is gone, once it is
	stderr  []byte // the last of what the helper's shell said on stderr
}

// answer is the helper's answer to one step.
type answer struct {
	code int
	out  string
	err  error // the helper went away first
}

// startHelper starts a standing helper of image that sees the engine's
// volume folder, and waits until it is ready.
func (d *Docker) startHelper(ctx context.Context, image, folder string) (*standing, error) {
	cfg := helperConfig(image, d.expiresLabel(standingLabelLife),
		[]string{"/bin/sh", "-c", standingScript, "berth-disk", makeScript, releaseScript}, nil)
	cfg.Tty = false // the engine's stream tells output from errors
	cfg.OpenStdin, cfg.StdinOnce = true, true
	cfg.AttachStdin, cfg.AttachStdout, cfg.AttachStderr = true, true, true
	hc := helperHostConfig(mount.Mount{
		Type: mount.TypeBind, Source: folder, Target: volumesTarget,
		// The engine makes a bind from its own folder a slave of the
		// host's mounts; standingScript cuts that.
		BindOptions: &mount.BindOptions{NonRecursive: true, Propagation: mount.PropagationRSlave},
	}, standingMemory, &standingPids, true)
	hc.Tmpfs["/m"] = "size=4m,mode=0700"
	res, err := d.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: cfg, HostConfig: hc})
	if err != nil {
		return nil, fmt.Errorf("create disk helper container from %s: %w (%w)", image, d.engineErr(err), errNotStarted)
	}
	s := &standing{id: res.ID, folder: folder, ready: make(chan struct{}), done: make(chan struct{}), pending: map[uint64]chan answer{}}
	fail := func(err error) (*standing, error) {
		if s.conn.Conn != nil {
			d.endHelper(s)
		} else {
			d.removeHelper(ctx, s.id)
		}
		return nil, fmt.Errorf("start disk helper container from %s: %w (%w)", image, err, errNotStarted)
	}
	att, err := d.cli.ContainerAttach(ctx, s.id, client.ContainerAttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		return fail(d.engineErr(err))
	}
	s.conn = att.HijackedResponse
	go s.read()
	if _, err := d.cli.ContainerStart(ctx, s.id, client.ContainerStartOptions{}); err != nil {
		return fail(d.engineErr(err))
	}
	select {
	case <-s.ready:
		return s, nil
	case <-s.done:
		return fail(s.goneErr())
	case <-ctx.Done():
		return fail(fmt.Errorf("not ready: %w", ctx.Err()))
	}
}

// endHelper closes the connection to a standing helper, which ends it, and
// removes its container.
func (d *Docker) endHelper(s *standing) {
	s.conn.Close()
	<-s.done
	d.removeHelper(context.Background(), s.id)
}

// removeHelper force-removes a helper container, within cleanupTimeout
// even when ctx is done.
func (d *Docker) removeHelper(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_, err := d.cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true})
	if err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) { // Conflict: its removal is under way
		d.log.Warn("remove disk helper", "container", id, "err", err)
	}
}

func (s *standing) alive() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gone == nil
}

// busy reports whether steps wait for their answers.
func (s *standing) busy() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending) > 0
}

func (s *standing) goneErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gone
}

// call sends a step and waits for its answer: its output, or an error with
// the output when its code is not 0.
func (s *standing) call(ctx context.Context, op string, args []string) (string, error) {
	ch := make(chan answer, 1)
	s.mu.Lock()
	if s.gone != nil {
		err := s.gone
		s.mu.Unlock()
		return "", fmt.Errorf("%w (%w)", err, errNotStarted)
	}
	s.next++
	id := s.next
	s.pending[id] = ch
	s.mu.Unlock()
	forget := func() {
		s.mu.Lock()
		delete(s.pending, id)
		s.mu.Unlock()
	}

	line := strconv.FormatUint(id, 10) + " " + op + " " + strings.Join(args, " ") + "\n"
	s.wmu.Lock()
	deadline, _ := ctx.Deadline()
	s.conn.Conn.SetWriteDeadline(deadline)
	_, err := io.WriteString(s.conn.Conn, line)
	s.wmu.Unlock()
	if err != nil {
		// A line cut short is never run: the helper's input ends with
		// the connection, and read ends the loop without it.
		forget()
		s.conn.Close()
		return "", fmt.Errorf("send a step to disk helper %s: %w (%w, %w)", s.id, err, errHelperGone, errNotStarted)
	}
	select {
	case a := <-ch:
		if a.err != nil {
			return "", a.err
		}
		if a.code != 0 {
			return "", fmt.Errorf("disk helper step exited with %d: %s", a.code, strings.TrimSpace(a.out))
		}
		return a.out, nil
	case <-ctx.Done():
		forget()
		return "", fmt.Errorf("disk helper step %s: %w", op, ctx.Err())
	}
}

// read reads the engine's stream from the helper (frames of an 8-byte
// header, the stream in its first byte and the length in the last four,
// then the bytes) until it ends, and hands each answer to its step.
func (s *standing) read() {
	var err error
	defer func() {
		s.mu.Lock()
		s.gone = fmt.Errorf("disk helper %s: %w (%v; it said %q)", s.id, errHelperGone, err, strings.TrimSpace(string(s.stderr)))
		for id, ch := range s.pending {
			ch <- answer{err: s.gone}
			delete(s.pending, id)
		}
		s.mu.Unlock()
		s.conn.Close()
		close(s.done)
	}()
	var (
		hdr  [8]byte
		buf  []byte
		line []byte
	)
	for {
		if _, err = io.ReadFull(s.conn.Reader, hdr[:]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(hdr[4:])
		if n > maxFrame {
			err = fmt.Errorf("a frame of %d bytes, more than %d", n, maxFrame)
			return
		}
		buf = slices.Grow(buf[:0], int(n))[:n]
		if _, err = io.ReadFull(s.conn.Reader, buf); err != nil {
			return
		}
		if hdr[0] == 2 { // stderr
			s.mu.Lock()
			s.stderr = append(s.stderr, buf...)
			s.stderr = s.stderr[max(0, len(s.stderr)-maxStepOutput):]
			s.mu.Unlock()
			continue
		}
		line = append(line, buf...)
		for {
			i := bytes.IndexByte(line, '\n')
			if i < 0 {
				break
			}
			if err = s.answer(string(line[:i])); err != nil {
				return
			}
			line = line[i+1:]
		}
		if len(line) > maxAnswerLine {
			err = fmt.Errorf("an answer longer than %d bytes", maxAnswerLine)
			return
		}
		line = slices.Clone(line)
	}
}

// answer hands one line of the helper's output to its step.
func (s *standing) answer(line string) error {
	if line == readyLine {
		select {
		case <-s.ready:
			return errors.New("said it was ready twice")
		default:
			close(s.ready)
			return nil
		}
	}
	f := strings.SplitN(line, " ", 3)
	if len(f) != 3 {
		return fmt.Errorf("answered %q", line)
	}
	id, err1 := strconv.ParseUint(f[0], 10, 64)
	code, err2 := strconv.Atoi(f[1])
	out, err3 := hex.DecodeString(f[2])
	if err := errors.Join(err1, err2, err3); err != nil {
		return fmt.Errorf("answered %q: %w", line, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch, ok := s.pending[id]; ok {
		ch <- answer{code: code, out: string(out)}
		delete(s.pending, id)
	}
	return nil
}

// helperConfig is the container config of a disk helper of image.
func helperConfig(image, expires string, entrypoint, cmd []string) *container.Config {
	return &container.Config{
		Image:           image,
		User:            "0:0",
		Entrypoint:      entrypoint,
		Cmd:             cmd,
		Env:             []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Tty:             true, // one plain output stream
		NetworkDisabled: true,
		Labels: map[string]string{
			labelDiskHelper: "true",
			LabelExpires:    expires,
		},
	}
}

// helperHostConfig is the host config of a disk helper that sees disks at
// the mount disks.
func helperHostConfig(disks mount.Mount, memory int64, pids *int64, autoRemove bool) *container.HostConfig {
	return &container.HostConfig{
		AutoRemove:     autoRemove,
		NetworkMode:    "none",
		ReadonlyRootfs: true,
		Tmpfs:          map[string]string{"/m": "size=1m,mode=0700"},
		CapDrop:        []string{"ALL"},
		CapAdd:         []string{"SYS_ADMIN", "CHOWN", "DAC_OVERRIDE"},
		SecurityOpt:    []string{"no-new-privileges"},
		LogConfig:      logConfig(),
		Mounts: []mount.Mount{
			disks,
			// The host's /dev, where the kernel adds loop devices as
			// they are made; the device rules let only loop devices
			// (block major 7) and /dev/loop-control be opened.
			{Type: mount.TypeBind, Source: "/dev", Target: "/dev"},
		},
		Resources: container.Resources{
			DeviceCgroupRules: []string{"b 7:* rwm", "c 10:237 rwm"},
			Memory:            memory,
			MemorySwap:        memory,
			PidsLimit:         pids,
		},
	}
}
