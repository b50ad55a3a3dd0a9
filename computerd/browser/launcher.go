package browser

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// EnvChromiumFlags is the variable the images set with the flags their
// Chromium runs with (no sandbox inside a container, no first-run pages).
const EnvChromiumFlags = "BERTH_CHROMIUM_FLAGS"

// DefaultStartTimeout bounds a Chromium's start, until DevTools listens.
const DefaultStartTimeout = 30 * time.Second

// LauncherConfig configures a Launcher.
type LauncherConfig struct {
	// Binary is the browser to run (default "chromium" from PATH).
	Binary string
	// Flags are added to the command line (default: the fields of
	// BERTH_CHROMIUM_FLAGS in Env).
	Flags []string
	// Env returns the environment the browser runs with, as commands get
	// theirs; its proxy variables become the browser's proxy (default:
	// computerd's own environment).
	Env func() []string
	// ProfileRoot is where each browser's profile folder is made (default
	// /tmp: a tmpfs in a computer, never archived with the home).
	ProfileRoot string
	// Start starts the browser's command (default cmd.Start). computerd
	// passes one that registers the process, so that its reaper leaves
	// it to the launcher; Exited is then called with its pid once the
	// launcher has waited for it.
	Start  func(cmd *exec.Cmd) error
	Exited func(pid int)
	// StartTimeout bounds a start (default DefaultStartTimeout).
	StartTimeout time.Duration
	Logger       *slog.Logger
}

// Launcher runs one Chromium on demand and serves the browser tools on
// it: the first call starts it, later calls reuse it, and a call after it
// exited or crashed starts a new one. It implements Tools.
type Launcher struct {
	cfg LauncherConfig
	log *slog.Logger

	mu     sync.Mutex // held while starting
	cur    *instance
	closed bool
}

// instance is one running Chromium and the driver attached to it.
type instance struct {
	cmd    *exec.Cmd
	dir    string
	d      *Driver
	exited chan struct{} // closed once the process has been waited for
	stderr *os.File      // the read end of its stderr
	drain  chan struct{} // closed once its stderr is read to the end
}

// NewLauncher returns a Launcher; it starts nothing until the first call.
func NewLauncher(cfg LauncherConfig) *Launcher {
	if cfg.Binary == "" {
		cfg.Binary = "chromium"
	}
	if cfg.Env == nil {
		cfg.Env = os.Environ
	}
	if cfg.ProfileRoot == "" {
		cfg.ProfileRoot = "/tmp"
	}
	if cfg.Start == nil {
		cfg.Start = (*exec.Cmd).Start
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Launcher{cfg: cfg, log: cfg.Logger.With("component", "browser")}
}

func (in *instance) dead() bool {
	select {
	case <-in.exited:
		return true
	case <-in.d.Lost():
		return true
	default:
		return false
	}
}

// stop closes the driver and kills the browser (kill).
func (in *instance) stop() {
	in.d.Close()
	in.kill()
}

// drainWait bounds how long a stopped browser's stderr is read after its
// process ended: a helper that left its group may still hold it open.
const drainWait = time.Second

// kill kills the browser's process group, waits for it and its stderr,
// and removes its profile; the driver, if any, is the caller's.
func (in *instance) kill() {
	signalGroup(in.cmd, syscall.SIGKILL)
	<-in.exited
	select {
	case <-in.drain:
	case <-time.After(drainWait):
	}
	in.stderr.Close() // ends a read still waiting
	<-in.drain
	// Helpers of the browser that left its group may still write there
	// for a moment.
	for range 20 {
		if os.RemoveAll(in.dir) == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// instance returns the running browser, starting one if there is none or
// the last one is gone.
func (l *Launcher) instance(ctx context.Context) (*instance, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, browserFailed("the browser tools are shut down")
	}
	if l.cur != nil {
		if !l.cur.dead() {
			return l.cur, nil
		}
		l.log.Warn("browser exited; starting a new one", "pid", l.cur.cmd.Process.Pid)
		l.cur.stop()
		l.cur = nil
	}
	in, err := l.start(ctx)
	if err != nil {
		return nil, err
	}
	l.cur = in
	return in, nil
}

// The browser's window size; a headless browser's viewport is held to it.
const windowWidth, windowHeight = 1280, 720

// headless reports whether the browser runs without a screen: with no
// DISPLAY in its environment.
func (l *Launcher) headless(env []string) bool {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "DISPLAY="); ok && v != "" {
			return false
		}
	}
	return true
}

// args is the browser's command line.
func (l *Launcher) args(env []string, dir string) []string {
	get := func(names ...string) string {
		for _, n := range names {
			for _, kv := range env {
				if k, v, ok := strings.Cut(kv, "="); ok && k == n && v != "" {
					return v
				}
			}
		}
		return ""
	}
	flags := l.cfg.Flags
	if flags == nil {
		flags = strings.Fields(get(EnvChromiumFlags))
	}
	args := append([]string{}, flags...)
	if os.Geteuid() == 0 && !containsFlag(args, "--no-sandbox") {
		// Chromium refuses to run as root with its sandbox; the
		// computer is the sandbox.
		args = append(args, "--no-sandbox")
	}
	if l.headless(env) {
		args = append(args, "--headless=new")
	}
	args = append(args, "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
		"--user-data-dir="+dir, fmt.Sprintf("--window-size=%d,%d", windowWidth, windowHeight), "--no-first-run", "--no-default-browser-check")
	if p := get("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"); p != "" {
		args = append(args, "--proxy-server="+p)
		if np := get("NO_PROXY", "no_proxy"); np != "" {
			args = append(args, "--proxy-bypass-list="+strings.Join(strings.FieldsFunc(np, func(r rune) bool { return r == ',' || r == ' ' }), ";"))
		}
	}
	return append(args, "about:blank")
}

func containsFlag(args []string, flag string) bool {
	for _, a := range args {
		if a == flag || strings.HasPrefix(a, flag+"=") {
			return true
		}
	}
	return false
}

// start runs a Chromium and attaches a Driver to it.
func (l *Launcher) start(ctx context.Context) (*instance, error) {
	bin, err := exec.LookPath(l.cfg.Binary)
	if err != nil {
		return nil, browserFailed("start the browser: %s is not installed here (%v)", l.cfg.Binary, err)
	}
	dir, err := os.MkdirTemp(l.cfg.ProfileRoot, "berth-chromium-")
	if err != nil {
		return nil, browserFailed("start the browser: profile folder: %v", err)
	}
	env := l.cfg.Env()
	cmd := exec.Command(bin, l.args(env, dir)...)
	cmd.Env = env
	cmd.Dir = dir
	newProcessGroup(cmd)
	// A pipe of its own, not cmd.StderrPipe: Wait closes that one, and
	// what a browser wrote just before it exited would be lost with it.
	stderr, w, err := os.Pipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, browserFailed("start the browser: %v", err)
	}
	cmd.Stderr = w
	err = l.cfg.Start(cmd)
	w.Close()
	if err != nil {
		stderr.Close()
		os.RemoveAll(dir)
		return nil, browserFailed("start the browser: %v", err)
	}
	pid := cmd.Process.Pid
	in := &instance{cmd: cmd, dir: dir, exited: make(chan struct{}), stderr: stderr, drain: make(chan struct{})}
	found := make(chan string, 1)
	var said string // the browser's first lines besides DevTools', set before drain closes
	go func() {
		defer close(in.drain)
		// Lines are bounded; the rest of the output is read and dropped.
		br := bufio.NewReaderSize(stderr, 4096)
		var tail []string
		for {
			line, err := br.ReadSlice('\n')
			s := strings.TrimSpace(string(line))
			if ws, ok := strings.CutPrefix(s, "DevTools listening on "); ok {
				select {
				case found <- ws:
				default:
				}
			} else if s != "" && len(tail) < 5 {
				tail = append(tail, truncate(s, 200))
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				continue // the rest of a long line comes next
			}
			if err != nil {
				break
			}
		}
		said = strings.Join(tail, " | ")
		if said != "" {
			l.log.Debug("browser output", "pid", pid, "first lines", said)
		}
	}()
	go func() {
		err := cmd.Wait()
		l.log.Info("browser exited", "pid", pid, "err", err)
		if l.cfg.Exited != nil {
			l.cfg.Exited(pid)
		}
		close(in.exited)
	}()
	// killed kills the browser and tells what it wrote, if anything.
	killed := func() string {
		in.kill()
		if said == "" {
			return ""
		}
		return "; it wrote: " + said
	}
	fail := func(err error) (*instance, error) {
		in.kill()
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, l.cfg.StartTimeout)
	defer cancel()
	var ws string
	select {
	case ws = <-found:
	case <-in.exited:
		wrote := killed()
		return nil, browserFailed("start the browser: %s exited before DevTools listened (%v)%s", bin, cmd.ProcessState, wrote)
	case <-sctx.Done():
		return nil, timedOut("start the browser: DevTools did not listen within %s%s", l.cfg.StartTimeout, killed())
	}
	opts := DriverOptions{AllowFile: true, Logger: l.cfg.Logger}
	if l.headless(env) {
		opts.ViewportWidth, opts.ViewportHeight = windowWidth, windowHeight
	}
	d, err := Dial(sctx, ws, opts)
	if err != nil {
		return fail(err)
	}
	l.log.Info("browser started", "pid", pid, "profile", dir)
	in.d = d
	return in, nil
}

// PID is the running browser's process id, or 0.
func (l *Launcher) PID() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur == nil {
		return 0
	}
	return l.cur.cmd.Process.Pid
}

// Close stops the browser (its whole process group) and refuses later
// calls.
func (l *Launcher) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.cur != nil {
		l.cur.stop()
		l.cur = nil
	}
	return nil
}

// use runs f on the browser, starting it when needed. A failure because
// the browser died answers CodeBrowserFailed; the next call starts a new
// one.
func use[T any](l *Launcher, ctx context.Context, req any, f func(*Driver) (T, error)) (T, error) {
	var zero T
	if err := validate(req); err != nil {
		return zero, err
	}
	in, err := l.instance(ctx)
	if err != nil {
		return zero, err
	}
	v, err := f(in.d)
	if err != nil && in.dead() {
		return zero, browserFailed("the browser exited or crashed during the call; the next call starts a new one")
	}
	return v, err
}

// Navigate implements Tools.
func (l *Launcher) Navigate(ctx context.Context, req NavigateRequest) (Page, error) {
	return use(l, ctx, req, func(d *Driver) (Page, error) { return d.Navigate(ctx, req) })
}

// Snapshot implements Tools.
func (l *Launcher) Snapshot(ctx context.Context, req SnapshotRequest) (Snapshot, error) {
	return use(l, ctx, req, func(d *Driver) (Snapshot, error) { return d.Snapshot(ctx, req) })
}

// Click implements Tools.
func (l *Launcher) Click(ctx context.Context, req ClickRequest) (Page, error) {
	return use(l, ctx, req, func(d *Driver) (Page, error) { return d.Click(ctx, req) })
}

// Type implements Tools.
func (l *Launcher) Type(ctx context.Context, req TypeRequest) (Page, error) {
	return use(l, ctx, req, func(d *Driver) (Page, error) { return d.Type(ctx, req) })
}

// Press implements Tools.
func (l *Launcher) Press(ctx context.Context, req PressRequest) (Page, error) {
	return use(l, ctx, req, func(d *Driver) (Page, error) { return d.Press(ctx, req) })
}

// Scroll implements Tools.
func (l *Launcher) Scroll(ctx context.Context, req ScrollRequest) (Page, error) {
	return use(l, ctx, req, func(d *Driver) (Page, error) { return d.Scroll(ctx, req) })
}

// Screenshot implements Tools.
func (l *Launcher) Screenshot(ctx context.Context, req ScreenshotRequest) (Screenshot, error) {
	return use(l, ctx, req, func(d *Driver) (Screenshot, error) { return d.Screenshot(ctx, req) })
}

// Tabs implements Tools.
func (l *Launcher) Tabs(ctx context.Context, req TabsRequest) (Tabs, error) {
	return use(l, ctx, req, func(d *Driver) (Tabs, error) { return d.Tabs(ctx, req) })
}

// Wait implements Tools.
func (l *Launcher) Wait(ctx context.Context, req WaitRequest) (Page, error) {
	return use(l, ctx, req, func(d *Driver) (Page, error) { return d.Wait(ctx, req) })
}

// Evaluate implements Tools.
func (l *Launcher) Evaluate(ctx context.Context, req EvaluateRequest) (Evaluation, error) {
	return use(l, ctx, req, func(d *Driver) (Evaluation, error) { return d.Evaluate(ctx, req) })
}

var _ Tools = (*Launcher)(nil)
