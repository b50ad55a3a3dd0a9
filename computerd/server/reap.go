package server

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// reapInterval is how often ReapOrphans looks for zombies when no
// SIGCHLD arrives.
const reapInterval = 30 * time.Second

// ReapOrphans reaps exited processes that were re-parented to computerd,
// until ctx is done. computerd needs it when it runs as a container's
// PID 1 (or as a child subreaper): every background process whose parent
// exits becomes its child, and without a wait each would stay a zombie,
// holding a slot of the computer's process limit.
//
// Commands that computerd started itself, and the browser it runs, are
// left to their own waiters.
func (s *Server) ReapOrphans(ctx context.Context) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGCHLD)
	defer signal.Stop(sigs)
	t := time.NewTicker(reapInterval)
	defer t.Stop()
	for {
		s.reap()
		select {
		case <-ctx.Done():
			return
		case <-sigs:
		case <-t.C:
		}
	}
}

// reap waits for every zombie child of computerd that is not one of its
// commands. s.mu is held so that no command starts (and could exit) between
// the look at the children and the waits.
func (s *Server) reap() {
	procs, err := listProcs()
	if err != nil {
		s.log.Warn("reap: list processes", "err", err)
		return
	}
	self := os.Getpid()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range procs {
		if p.ppid != self || p.state != "Z" {
			continue
		}
		if _, ours := s.children[p.pid]; ours || s.own[p.pid] {
			continue
		}
		var ws syscall.WaitStatus
		if pid, err := syscall.Wait4(p.pid, &ws, syscall.WNOHANG, nil); err == nil && pid > 0 {
			s.log.Debug("reaped orphan", "pid", pid, "comm", p.comm, "status", int(ws))
		}
	}
}
