package server

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/token"
)

// reaperChildEnv makes the test binary run reaperChild instead of tests.
const reaperChildEnv = "COMPUTERD_TEST_REAPER_CHILD"

// TestReapOrphans runs in a process of its own, because it makes that
// process a child subreaper, as a container's PID 1 is.
func TestReapOrphans(t *testing.T) {
	ctx := testContext(t)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), reaperChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("reaper check: %v\n%s", err, out)
	}
}

// reaperChild becomes a child subreaper and runs commands that leave
// short-lived orphans behind. It checks that every command's exit status
// still reaches its own waiter, and that the orphans are reaped.
func reaperChild() int {
	const prSetChildSubreaper = 36
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); e != 0 {
		fmt.Println("prctl(PR_SET_CHILD_SUBREAPER):", e)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := New(Config{TokenHash: token.Hash("t"), Home: os.TempDir(), OutputGrace: 200 * time.Millisecond})
	go srv.ReapOrphans(ctx)
	ts := httptest.NewServer(srv)
	defer ts.Close()
	c := computerd.NewClient(ts.URL, "t", computerd.WithHTTPClient(ts.Client()))

	var wg sync.WaitGroup
	failed := make(chan string, 40)
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := i%5 + 1
			res, err := c.Exec(ctx, computerd.ExecRequest{
				Command:   fmt.Sprintf("(sleep 0.0%d >/dev/null 2>&1 &); exit %d", i%10, want),
				TimeoutMs: 10000,
			})
			if err != nil || res.ExitCode != want {
				failed <- fmt.Sprintf("command %d: exit %d, err %v; want exit %d", i, res.ExitCode, err, want)
			}
		}()
	}
	wg.Wait()
	close(failed)
	bad := 0
	for f := range failed {
		fmt.Println(f)
		bad++
	}

	self := os.Getpid()
	for {
		procs, err := listProcs()
		if err != nil {
			fmt.Println(err)
			return 1
		}
		left := 0
		for _, p := range procs {
			if p.ppid == self {
				left++
			}
		}
		if left == 0 {
			break
		}
		select {
		case <-ctx.Done():
			fmt.Printf("%d orphans not reaped\n", left)
			return 1
		case <-time.After(20 * time.Millisecond):
		}
	}
	if bad > 0 {
		return 1
	}
	return 0
}
