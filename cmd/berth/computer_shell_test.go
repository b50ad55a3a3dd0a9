package main

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/supervisor/supervisortest"
)

// shellSupervisor serves a real supervisor over the fake provider (whose
// computers are real computerd servers), with agent a1's computer running
// and berth pointed at it.
func shellSupervisor(t *testing.T) {
	t.Helper()
	s := supervisortest.Start(t, supervisortest.Options{Token: testToken, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	s.Agent(t, "a1", "lab", nil)
	t.Setenv("BERTH_URL", s.URL)
	t.Setenv("SUPERVISOR_TOKEN", testToken)
	t.Setenv("BERTH_AGENT", "a1")
	for _, args := range [][]string{{"computer", "connect"}, {"computer", "start"}} {
		if r := run(t, "", args...); r.code != 0 {
			t.Fatalf("berth %s: %+v", strings.Join(args, " "), r)
		}
	}
}

// openPTY opens a pseudo-terminal pair of cols x rows.
func openPTY(t *testing.T, cols, rows uint16) (master, slave *os.File) {
	t.Helper()
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	master = os.NewFile(uintptr(fd), "/dev/ptmx")
	t.Cleanup(func() { master.Close() })
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	sfd, err := unix.Open("/dev/pts/"+strconv.Itoa(n), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	slave = os.NewFile(uintptr(sfd), "pts")
	t.Cleanup(func() { slave.Close() })
	setWinsize(t, master, cols, rows)
	return master, slave
}

func setWinsize(t *testing.T, f *os.File, cols, rows uint16) {
	t.Helper()
	if err := unix.IoctlSetWinsize(int(f.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Col: cols, Row: rows}); err != nil {
		t.Fatal(err)
	}
}

// lockedBuffer is what the pseudo-terminal showed.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestShellUnderTerminal runs berth computer shell as its own process on
// a pseudo-terminal, as a person at a terminal would: a typed command's
// output shows, the remote terminal follows a resize of the local one,
// the command's exit code is berth's, and the local terminal is restored.
func TestShellUnderTerminal(t *testing.T) {
	shellSupervisor(t)
	master, slave := openPTY(t, 100, 30)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "computer", "shell", "--agent", "a1")
	cmd.Env = append(os.Environ(), envRunMain+"=1", "TERM=xterm")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			cmd.Process.Kill()
			<-exited
		}
	})
	var screen lockedBuffer
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			screen.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	await := func(what string, from int, retype string) int {
		t.Helper()
		var at int
		ok := testkit.Poll(20*time.Second, func() bool {
			if i := strings.Index(screen.String()[from:], what); i >= 0 {
				at = from + i + len(what)
				return true
			}
			if retype != "" {
				master.Write([]byte(retype))
				time.Sleep(200 * time.Millisecond)
			}
			return false
		})
		if !ok {
			t.Fatalf("the terminal never showed %q; it showed:\n%q", what, screen.String())
		}
		return at
	}

	// Raw mode: Enter is a carriage return, which the remote terminal
	// turns into a new line.
	master.Write([]byte("echo hi-$((1+2))\r"))
	at := await("hi-3", 0, "")
	master.Write([]byte("stty size\r"))
	at = await("30 100", at, "")
	// In raw mode nothing is echoed here: the typed line shows once, as
	// the computer's terminal echoes it.
	if n := strings.Count(screen.String(), "stty size"); n != 1 {
		t.Errorf("the typed line shows %d times, want once (raw mode): %q", n, screen.String())
	}

	setWinsize(t, master, 132, 50)
	await("50 132", at, "stty size\r")

	master.Write([]byte("exit 7\r"))
	select {
	case <-exited:
		var ee *exec.ExitError
		if !errors.As(waitErr, &ee) || ee.ExitCode() != 7 {
			t.Fatalf("berth exited with %v, want exit status 7; the terminal showed:\n%q", waitErr, screen.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("berth did not exit; the terminal showed:\n%q", screen.String())
	}
	tio, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if tio.Lflag&unix.ICANON == 0 || tio.Lflag&unix.ECHO == 0 {
		t.Errorf("the terminal was left in raw mode (lflag %#x)", tio.Lflag)
	}
}

// TestShellWithoutTerminal feeds the shell from a pipe: the input is
// typed, its end is ^D, and the exit code comes through.
func TestShellWithoutTerminal(t *testing.T) {
	shellSupervisor(t)
	r := run(t, "echo hi-$((1+2))\nexit 4\n", "computer", "shell")
	if r.code != 4 || !strings.Contains(r.stdout, "hi-3") {
		t.Fatalf("shell: %+v, want exit 4 and hi-3", r)
	}
	// A command of its own, and end of input ending it.
	r = run(t, "some input\n", "computer", "shell", "--", "cat")
	if r.code != 0 || strings.Count(r.stdout, "some input") != 2 {
		t.Fatalf("shell -- cat: %+v, want exit 0 and the line echoed and printed", r)
	}
	// A link to the terminal page.
	r = run(t, "", "computer", "shell", "--link")
	if r.code != 0 || !strings.HasPrefix(r.stdout, os.Getenv("BERTH_URL")+"/terminal/s/") || !strings.Contains(r.stderr, "works once") {
		t.Fatalf("shell --link: %+v", r)
	}
	r = run(t, "", "computer", "shell", "--agent", "nobody")
	if r.code != exitFailure || !strings.Contains(r.stderr, "not_found") {
		t.Fatalf("unknown agent: %+v", r)
	}
	if r := run(t, "", "computer", "stop"); r.code != 0 {
		t.Fatalf("stop: %+v", r)
	}
	r = run(t, "", "computer", "shell")
	if r.code != exitFailure || !strings.Contains(r.stderr, "no_session") {
		t.Fatalf("no computer: %+v", r)
	}
}
