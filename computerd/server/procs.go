package server

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/httpjson"
)

// maxCommandLine bounds the command line reported for one process.
const maxCommandLine = 4096

// procInfo is what /proc/<pid>/stat says about a process.
type procInfo struct {
	pid, ppid, pgid int
	state           string
	rssPages        int64
	comm            string
}

// readProc parses /proc/<pid>/stat.
func readProc(pid int) (procInfo, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procInfo{}, err
	}
	return parseStat(b)
}

// parseStat parses the contents of a /proc/<pid>/stat file. The command
// name sits in parentheses and may itself hold spaces and parentheses.
func parseStat(b []byte) (procInfo, error) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open || end+2 > len(b) {
		return procInfo{}, fmt.Errorf("malformed stat %q", b)
	}
	// After the command: state ppid pgrp session tty_nr tpgid flags minflt
	// cminflt majflt cmajflt utime stime cutime cstime priority nice
	// num_threads itrealvalue starttime vsize rss ...
	f := strings.Fields(string(b[end+2:]))
	if len(f) < 22 {
		return procInfo{}, fmt.Errorf("malformed stat %q", b)
	}
	p := procInfo{state: f[0], comm: string(b[open+1 : end])}
	var errs [4]error
	p.pid, errs[0] = strconv.Atoi(strings.TrimSpace(string(b[:open])))
	p.ppid, errs[1] = strconv.Atoi(f[1])
	p.pgid, errs[2] = strconv.Atoi(f[2])
	p.rssPages, errs[3] = strconv.ParseInt(f[21], 10, 64)
	if err := errors.Join(errs[:]...); err != nil {
		return procInfo{}, fmt.Errorf("malformed stat %q: %w", b, err)
	}
	return p, nil
}

// listProcs returns every process visible in /proc. Processes that exit
// while it reads are left out.
func listProcs() ([]procInfo, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var out []procInfo
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		if p, err := readProc(pid); err == nil {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b procInfo) int { return a.pid - b.pid })
	return out, nil
}

// descendants returns the processes below pid in the process tree.
func descendants(procs []procInfo, pid int) []procInfo {
	kids := make(map[int][]procInfo)
	for _, p := range procs {
		kids[p.ppid] = append(kids[p.ppid], p)
	}
	var out []procInfo
	queue := []int{pid}
	for len(queue) > 0 {
		next := queue[0]
		queue = queue[1:]
		for _, k := range kids[next] {
			out = append(out, k)
			queue = append(queue, k.pid)
		}
	}
	return out
}

// killTree kills the process group led by pid, and every process below
// pid that moved to another group or session. The tree is read before the
// first kill: once the leader dies, its children are re-parented and can
// no longer be told apart.
func killTree(pid int) {
	procs, _ := listProcs()
	below := descendants(procs, pid)
	syscall.Kill(-pid, syscall.SIGKILL)
	for _, p := range below {
		if p.pgid == p.pid && p.pgid != pid {
			syscall.Kill(-p.pid, syscall.SIGKILL)
		}
		syscall.Kill(p.pid, syscall.SIGKILL)
	}
}

// commandLine returns the command line of pid, or its name in brackets
// (as ps does) when it has none, as kernel threads and zombies do.
func commandLine(p procInfo) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/cmdline")
	b = bytes.TrimRight(b, "\x00")
	if err != nil || len(b) == 0 {
		return "[" + p.comm + "]"
	}
	if len(b) > maxCommandLine {
		b = trimPartialEnd(b[:maxCommandLine])
	}
	return toValidUTF8(bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
}

func (s *Server) handleProcesses(w http.ResponseWriter, r *http.Request) error {
	procs, err := listProcs()
	if err != nil {
		return err
	}
	page := int64(os.Getpagesize()) / 1024
	out := make([]computerd.Process, 0, len(procs))
	for _, p := range procs {
		out = append(out, computerd.Process{
			PID: p.pid, PPID: p.ppid, PGID: p.pgid, State: p.state,
			RSSKiB: p.rssPages * page, Command: commandLine(p),
		})
	}
	httpjson.Write(w, http.StatusOK, out)
	return nil
}

func (s *Server) handleKill(w http.ResponseWriter, r *http.Request) error {
	var req computerd.KillRequest
	if err := decodeJSON(w, r, 4<<10, &req); err != nil {
		return err
	}
	if req.PID <= 0 {
		return badRequest("pid: %d is not a process id", req.PID)
	}
	sig, ok := parseSignal(req.Signal)
	if !ok {
		return badRequest("signal: unknown signal %q", req.Signal)
	}
	if req.PID == os.Getpid() || (req.Group && req.PID == syscall.Getpgrp()) {
		return badRequest("pid: %d is computerd itself", req.PID)
	}
	target, what := req.PID, "process"
	if req.Group {
		target, what = -req.PID, "process group"
	}
	switch err := syscall.Kill(target, sig); {
	case err == nil:
		s.log.Info("signalled", "pid", req.PID, "group", req.Group, "signal", sig.String())
		w.WriteHeader(http.StatusNoContent)
		return nil
	case errors.Is(err, syscall.ESRCH):
		return errorf(http.StatusNotFound, computerd.CodeNotFound, "no %s %d", what, req.PID)
	case errors.Is(err, syscall.EPERM):
		return errorf(http.StatusForbidden, computerd.CodePermission, "%s %d: not permitted", what, req.PID)
	default:
		return fmt.Errorf("kill %s %d: %w", what, req.PID, err)
	}
}
