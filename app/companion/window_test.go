package companion

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"log/slog"
	"math"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/agent/ledger"
	"github.com/berthdev/berth/agent/lender"
	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/syncbuf"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/lending"
	"github.com/berthdev/berth/providers/docker"
)

func TestMain(m *testing.M) {
	// The fyne driver starts its event queue when the package loads.
	testkit.VerifyTestMain(m)
}

const (
	testImage    = "berth/test:latest"
	desktopImage = "berth/desktop:latest"
)

// need fails (under BERTH_REQUIRE_DOCKER=1, as in CI) or skips when the
// real window cannot be had here, saying what to install.
func need(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	testkit.Missing(t, testkit.DockerEnv, fmt.Sprintf("%s: %v", what, err), "apt-get install -y xvfb dbus imagemagick; start the Docker engine; make images")
}

// buildApp builds the companion binary (cgo), once per test run.
var buildApp = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "berth-companion-test-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "berth-companion")
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/berthdev/berth/cmd/berth-companion")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// agentWithComputer runs a real lender on the real Docker engine with one
// running computer (headless from berth/test, or desktop), and its control
// API on a unix socket.
func agentWithComputer(t *testing.T, ctx context.Context, desktop bool) (*lender.Lender, string) {
	t.Helper()
	image, kind := testImage, "headless"
	if desktop {
		image, kind = desktopImage, "desktop"
	}
	need(t, "Docker image "+image, exec.Command("docker", "image", "inspect", image).Run())
	dir := t.TempDir()
	led, err := ledger.OpenFile(ctx, filepath.Join(dir, ledger.FileName))
	if err != nil {
		t.Fatal(err)
	}
	eng, err := lender.NewDockerEngine(docker.DefaultSocket)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	l, err := lender.New(lender.Config{
		LenderID: "cp_window", DataDir: dir, Ledger: led, Engine: eng, Logger: log, Version: "test",
		Pairing: control.Pairing{Paired: true, URL: "http://supervisor.test", LenderID: "cp_window"},
		Docker: func(cpus float64, memoryMB int64) (lender.Docker, error) {
			return docker.New(docker.Options{HeadlessImage: testImage, DesktopImage: desktopImage, CPUs: cpus, MemoryMB: memoryMB, Logger: log})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "run", control.SocketName)
	ln, err := control.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- control.Serve(sctx, ln, l, log) }()

	id := "win" + strconv.FormatInt(time.Now().UnixNano()%1e12, 36)
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		defer ccancel()
		if err := l.Destroy(cctx, id); err != nil {
			t.Errorf("destroy %s: %v", id, err)
		}
		stop()
		if err := <-done; err != nil {
			t.Errorf("control API: %v", err)
		}
		l.Close()
		eng.Close()
		led.Close()
	})
	tok := "token-" + id
	_, err = l.Create(ctx, lending.CreateRequest{
		ComputerID: id, SessionID: "s_" + id, AttemptID: "a_" + id, Deployment: "window-test",
		Agent: "researcher", Workspace: "lab", Image: kind, TokenHash: token.Hash(tok), LeaseSeconds: 600,
	})
	if err != nil {
		t.Fatalf("start a computer: %v", err)
	}
	if desktop {
		// The agent takes screenshots with the token it saw pass on the
		// supervisor's first call: make one, as the supervisor would.
		srv := httptest.NewServer(l.Handler())
		t.Cleanup(srv.Close)
		cd := computerd.NewClient(srv.URL+lending.EndpointPath(id), tok)
		testkit.EventuallyContext(t, ctx, "computerd of "+id+" to answer", func() bool { _, err := cd.Processes(ctx); return err == nil })
	}
	return l, sock
}

// xvfb starts a virtual X server on a free display and returns it (":N").
func xvfb(t *testing.T) string {
	t.Helper()
	_, err := exec.LookPath("Xvfb")
	need(t, "Xvfb", err)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("Xvfb", "-displayfd", "3", "-screen", "0", "1024x768x24", "-nolisten", "tcp")
	cmd.ExtraFiles = []*os.File{w}
	// Ends with the test binary even when it dies before its cleanups.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	line, err := bufio.NewReader(r).ReadString('\n')
	r.Close()
	if err != nil {
		t.Fatalf("Xvfb gave no display: %v", err)
	}
	return ":" + strings.TrimSpace(line)
}

// app is one run of the companion binary.
type app struct {
	cmd    *exec.Cmd
	stderr *syncbuf.Buffer
	exited chan error
}

func startApp(t *testing.T, argv []string, env []string) *app {
	t.Helper()
	a := &app{cmd: exec.Command(argv[0], argv[1:]...), stderr: &syncbuf.Buffer{}, exited: make(chan error, 1)}
	a.cmd.Env = env
	// Its own process group, so that the cleanup ends the app and the bus
	// that dbus-run-session started for it, and only those.
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	a.cmd.WaitDelay = 5 * time.Second
	a.cmd.Stdout = a.stderr
	a.cmd.Stderr = a.stderr
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { a.exited <- a.cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-a.exited:
		default:
			syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
			<-a.exited
		}
		if t.Failed() {
			t.Logf("companion output:\n%s", a.stderr.String())
		}
	})
	return a
}

// waitExit waits for a clean exit: status 0, no panic.
func (a *app) waitExit(t *testing.T, within time.Duration) {
	t.Helper()
	select {
	case err := <-a.exited:
		a.exited <- err
		if err != nil {
			t.Fatalf("companion exited with %v", err)
		}
	case <-time.After(within):
		// Its goroutines, in the output the test prints, say where it hangs.
		a.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case err := <-a.exited:
			a.exited <- err
		case <-time.After(10 * time.Second):
		}
		t.Fatalf("companion still running %s after quit", within)
	}
	if out := a.stderr.String(); strings.Contains(out, "panic:") || !strings.Contains(out, "companion quit") {
		t.Fatalf("companion did not quit cleanly:\n%s", out)
	}
}

// waitLog waits until the companion's log holds s.
func (a *app) waitLog(t *testing.T, ctx context.Context, s string) {
	t.Helper()
	for !strings.Contains(a.stderr.String(), s) {
		select {
		case err := <-a.exited:
			t.Fatalf("companion exited (%v) before logging %q", err, s)
		case <-ctx.Done():
			t.Fatalf("companion never logged %q", s)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func baseEnv(t *testing.T, display string) []string {
	home := t.TempDir()
	env := []string{"DISPLAY=" + display, "HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"XDG_RUNTIME_DIR=" + home, "PATH=" + os.Getenv("PATH"), "LANG=C.UTF-8"}
	return env
}

// screenshot saves the X screen under $BERTH_ARTIFACTS (or a temp dir)
// and checks that it shows a window: not one flat colour.
func screenshot(t *testing.T, display, name string) {
	t.Helper()
	_, err := exec.LookPath("import")
	need(t, "import (imagemagick)", err)
	dir := os.Getenv("BERTH_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	// The window may take a moment to paint; retry until it shows.
	var sd float64
	var out []byte
	if testkit.Poll(10*time.Second, func() bool {
		var err error
		out, err = exec.Command("import", "-display", display, "-window", "root", "png:-").Output()
		if err != nil {
			t.Fatalf("import: %v", err)
		}
		img, err := png.Decode(bytes.NewReader(out))
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		sd = spread(img)
		return sd > 10
	}) {
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot %s (luma spread %.1f)", path, sd)
		return
	}
	t.Fatalf("the screen stayed blank (luma spread %.1f)", sd)
}

// spread is the standard deviation of the image's luma.
func spread(img image.Image) float64 {
	b := img.Bounds()
	var n, sum, sq float64
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, _ := img.At(x, y).RGBA()
			l := (0.299*float64(r) + 0.587*float64(g) + 0.114*float64(bl)) / 257
			n++
			sum += l
			sq += l * l
		}
	}
	m := sum / n
	return math.Sqrt(sq/n - m*m)
}

// trayItem is one entry of the tray's dbusmenu.
type trayItem struct {
	id      int32
	label   string
	toggled bool
	enabled bool
}

// trayMenu reads the menu that the app's StatusNotifierItem exports.
func trayMenu(ctx context.Context, conn *dbus.Conn, name string) ([]trayItem, error) {
	var rev uint32
	var layout struct {
		ID       int32
		Props    map[string]dbus.Variant
		Children []dbus.Variant
	}
	call := conn.Object(name, "/StatusNotifierMenu").CallWithContext(ctx, "com.canonical.dbusmenu.GetLayout", 0, int32(0), int32(-1), []string{})
	if err := call.Store(&rev, &layout); err != nil {
		return nil, err
	}
	var items []trayItem
	for _, c := range layout.Children {
		f, ok := c.Value().([]any)
		if !ok || len(f) != 3 {
			return nil, fmt.Errorf("menu item %v: not (id, props, children)", c)
		}
		id, _ := f[0].(int32)
		props, _ := f[1].(map[string]dbus.Variant)
		it := trayItem{id: id, enabled: true}
		if v, ok := props["label"]; ok {
			it.label, _ = v.Value().(string)
		}
		if v, ok := props["toggle-state"]; ok {
			s, _ := v.Value().(int32)
			it.toggled = s == 1
		}
		if v, ok := props["enabled"]; ok {
			it.enabled, _ = v.Value().(bool)
		}
		if it.label != "" {
			items = append(items, it)
		}
	}
	return items, nil
}

// find returns the first item whose label starts with label.
func find(items []trayItem, label string) (trayItem, bool) {
	for _, it := range items {
		if strings.HasPrefix(it.label, label) {
			return it, true
		}
	}
	return trayItem{}, false
}

func click(ctx context.Context, conn *dbus.Conn, name string, id int32) error {
	return conn.Object(name, "/StatusNotifierMenu").CallWithContext(ctx, "com.canonical.dbusmenu.Event", 0,
		id, "clicked", dbus.MakeVariant(""), uint32(time.Now().Unix())).Err
}

// clickUntil clicks the tray item labelled label until done reports its
// effect, re-reading the menu before each try.
func clickUntil(t *testing.T, ctx context.Context, conn *dbus.Conn, name, label string, done func() bool) {
	t.Helper()
	for try := 0; try < 10 && ctx.Err() == nil; try++ {
		items, err := trayMenu(ctx, conn, name)
		if err != nil {
			if done() {
				return
			}
			t.Fatalf("read the tray menu: %v", err)
		}
		it, ok := find(items, label)
		if !ok {
			t.Fatalf("no %q in the tray menu: %+v", label, items)
		}
		t.Logf("click %q (id %d)", it.label, it.id)
		if err := click(ctx, conn, name, it.id); err != nil && !done() {
			t.Logf("click %q: %v", label, err)
		}
		if testkit.Poll(3*time.Second, done) {
			return
		}
	}
	t.Fatalf("clicking %q in the tray had no effect", label)
}

// TestRealWindowWithTray runs the app under Xvfb inside dbus-run-session
// against a real agent with a running Docker computer: the window shows,
// the tray menu lists the session, toggling lending from the tray pauses
// lending at the agent, and Quit from the tray ends the app cleanly.
func TestRealWindowWithTray(t *testing.T) {
	_, err := exec.LookPath("dbus-run-session")
	need(t, "dbus-run-session", err)
	bin, err := buildApp()
	need(t, "build the companion", err)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	l, sock := agentWithComputer(t, ctx, false)
	display := xvfb(t)

	addrFile := filepath.Join(t.TempDir(), "bus")
	a := startApp(t, []string{"dbus-run-session", "--", "sh", "-c",
		`printf %s "$DBUS_SESSION_BUS_ADDRESS" > "$0" && exec "$1" --socket "$2"`, addrFile, bin, sock},
		baseEnv(t, display))
	a.waitLog(t, ctx, "system tray set")

	addr, err := os.ReadFile(addrFile)
	if err != nil || len(addr) == 0 {
		t.Fatalf("bus address: %q %v", addr, err)
	}
	conn, err := dbus.Connect(string(addr))
	if err != nil {
		t.Fatalf("connect to the app's session bus: %v", err)
	}
	defer conn.Close()

	// The app's StatusNotifierItem, then its menu once it shows the
	// running session (so the app has read the agent) beside the items it
	// always has: a menu read while the app rebuilds it may hold only some.
	var name string
	var items []trayItem
	session := "researcher (headless): "
	whole := func(items []trayItem) bool {
		for _, want := range []string{session, "Lend this machine", "Open Berth", "Quit"} {
			if _, ok := find(items, want); !ok {
				return false
			}
		}
		return true
	}
	testkit.PollContext(ctx, time.Hour, func() bool {
		if name == "" {
			var names []string
			if err := conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.ListNames", 0).Store(&names); err != nil {
				t.Fatal(err)
			}
			for _, n := range names {
				if strings.HasPrefix(n, "org.kde.StatusNotifierItem-") {
					name = n
				}
			}
		}
		if name == "" {
			return false
		}
		items, err = trayMenu(ctx, conn, name)
		return err == nil && whole(items)
	})
	if ctx.Err() != nil {
		t.Fatalf("tray menu never listed the session with Lend this machine, Open Berth and Quit: %+v (%v)", items, err)
	}
	t.Logf("tray menu lists the session: %+v", items)
	lend, ok := find(items, "Lend this machine")
	if !ok || !lend.toggled {
		t.Fatalf("tray lending item %+v (found %v), want it checked", lend, ok)
	}
	screenshot(t, display, "companion-window-tray.png")

	// Toggling lending from the tray pauses lending at the agent. The
	// app rebuilds its menu when what it shows changes (new item ids), so
	// a click that raced a rebuild is tried again with the new id.
	paused := func() bool { return !l.Settings().Lending }
	clickUntil(t, ctx, conn, name, "Lend this machine", paused)
	// The menu follows: lending unchecked.
	testkit.PollContext(ctx, time.Hour, func() bool {
		items, err = trayMenu(ctx, conn, name)
		it, ok := find(items, "Lend this machine")
		return err == nil && ok && !it.toggled
	})
	if ctx.Err() != nil {
		t.Fatalf("tray never showed lending paused: %+v %v", items, err)
	}

	clickUntil(t, ctx, conn, name, "Quit", func() bool {
		select {
		case err := <-a.exited:
			a.exited <- err
			return true
		default:
			return false
		}
	})
	a.waitExit(t, time.Minute)
}

// TestRealWindowWithoutBus runs the app with no D-Bus session bus: no
// tray, the window shows, and it quits cleanly on SIGTERM.
func TestRealWindowWithoutBus(t *testing.T) {
	bin, err := buildApp()
	need(t, "build the companion", err)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	_, sock := agentWithComputer(t, ctx, false)
	display := xvfb(t)
	a := startApp(t, []string{bin, "--socket", sock}, baseEnv(t, display))
	a.waitLog(t, ctx, "companion running")
	if !strings.Contains(a.stderr.String(), "no system tray") {
		t.Errorf("the app set a tray with no bus:\n%s", a.stderr.String())
	}
	screenshot(t, display, "companion-window-nobus.png")
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	a.waitExit(t, time.Minute)
}

// TestRealWindowDesktopPreview runs a desktop computer and the app (no
// bus, so no tray): the app fetches the computer's real screen through the
// agent's socket about once a second and shows it as the session's
// preview.
func TestRealWindowDesktopPreview(t *testing.T) {
	bin, err := buildApp()
	need(t, "build the companion", err)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	_, sock := agentWithComputer(t, ctx, true)
	display := xvfb(t)
	a := startApp(t, []string{bin, "--socket", sock, "--debug"}, baseEnv(t, display))
	a.waitLog(t, ctx, "screen preview updated")
	screenshot(t, display, "companion-window-desktop.png")
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	a.waitExit(t, time.Minute)
}
