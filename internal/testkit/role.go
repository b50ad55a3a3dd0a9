package testkit

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// StartRole starts this test binary again, running no tests, with env
// added to its environment: a TestMain that finds its role there runs that
// instead of the tests. It returns the first line the process prints (an
// address, say), which must come within 30 seconds, and the process. When
// tb ends, the process's standard input is closed, which a role takes as
// the sign to end; one still running 10 seconds later is killed.
func StartRole(tb testing.TB, env ...string) (string, *os.Process) {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	type result struct {
		line string
		err  error
	}
	first := make(chan result, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		first <- result{strings.TrimSpace(line), err}
	}()
	select {
	case r := <-first:
		if r.err != nil {
			tb.Fatalf("role %v: no first line: %v", env, r.err)
		}
		return r.line, cmd.Process
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		tb.Fatalf("role %v: no first line in 30s", env)
		return "", nil
	}
}
