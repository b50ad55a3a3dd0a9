package server

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/berthdev/berth/computerd"
)

// openPTY opens a new pseudo-terminal pair.
func openPTY() (master, slave *os.File, err error) {
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	master = os.NewFile(uintptr(fd), "/dev/ptmx")
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("unlock pty: %w", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("pty number: %w", err)
	}
	name := "/dev/pts/" + strconv.Itoa(n)
	sfd, err := unix.Open(name, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("open %s: %w", name, err)
	}
	return master, os.NewFile(uintptr(sfd), name), nil
}

// setSize sets a terminal's size; zero values take 80x24.
func setSize(f *os.File, cols, rows uint16) error {
	if cols == 0 {
		cols = 80
	}
	if rows == 0 {
		rows = 24
	}
	return unix.IoctlSetWinsize(int(f.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Col: cols, Row: rows})
}

// startPTY runs a command on a new pseudo-terminal, in its own session
// (whose id is also its process group's, so killTree reaches it). Its
// output, stderr included, is read from the master side.
func (s *Server) startPTY(sp startSpec, dir string, env []string) (*child, error) {
	master, slave, err := openPTY()
	if err != nil {
		return nil, errorf(http.StatusServiceUnavailable, computerd.CodeInternal, "no terminal: %v", err)
	}
	files := []*os.File{master, slave}
	fail := func(err error) (*child, error) {
		closeAll(files)
		return nil, err
	}
	if err := setSize(master, sp.cols, sp.rows); err != nil {
		return fail(fmt.Errorf("terminal size: %w", err))
	}
	// stderr is part of the terminal's output: its reader is an empty pipe.
	errR, errW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	errW.Close()
	files = append(files, errR)
	in, err := unix.Dup(int(master.Fd()))
	if err != nil {
		return fail(err)
	}
	stdin := os.NewFile(uintptr(in), "pty-input")
	files = append(files, stdin)
	if !hasEnv(env, "TERM") {
		env = append(env, "TERM=xterm-256color")
	}

	cmd := exec.Command("/bin/sh", "-c", sp.command)
	cmd.Dir, cmd.Env = dir, env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}

	c := &child{stdout: master, stderr: errR, stdin: stdin, pty: master, done: make(chan struct{})}
	if err := s.launch(cmd, c); err != nil {
		return fail(err)
	}
	slave.Close() // the command holds it now; the master reads EIO once all are gone
	s.reapChild(c, cmd)
	return c, nil
}

func hasEnv(env []string, name string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, name+"=") {
			return true
		}
	}
	return false
}
