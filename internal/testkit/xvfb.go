package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"time"
)

// StartXvfb starts a virtual X screen of w x h on a display number it
// picks itself (-displayfd), waits until it answers, and returns the
// display (":N"). The server is killed when the test ends. The caller
// checks first that Xvfb and xdpyinfo are installed (RequireTools).
func StartXvfb(t TB, w, h int) string {
	t.Helper()
	r, wr, err := os.Pipe()
	if err != nil {
		t.Fatalf("Xvfb: %v", err)
	}
	defer r.Close()
	cmd := exec.Command("Xvfb", "-displayfd", "3", "-screen", "0", fmt.Sprintf("%dx%dx24", w, h), "-nolisten", "tcp", "-noreset")
	cmd.ExtraFiles = []*os.File{wr}
	if err := cmd.Start(); err != nil {
		wr.Close()
		t.Fatalf("Xvfb: %v", err)
	}
	wr.Close()
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	r.SetReadDeadline(time.Now().Add(10 * time.Second))
	var n int
	if _, err := fmt.Fscan(r, &n); err != nil {
		t.Fatalf("Xvfb did not start: %v", err)
	}
	disp := fmt.Sprintf(":%d", n)
	Eventually(t, 10*time.Second, "Xvfb "+disp+" to answer", func() bool {
		return exec.Command("xdpyinfo", "-display", disp).Run() == nil
	})
	return disp
}
