package desktop

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"
)

// WarmScreen waits for an X server that is still starting, connects, and
// leaves the connection for the first screenshot; with no server it gives
// up after its wait, naming the display.
func TestWarmScreen(t *testing.T) {
	testkit.RequireTools(t, "apt-get install -y xvfb ffmpeg x11-utils", "Xvfb", "xdpyinfo")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	disp := freeDisplay(t)
	d := New(Config{Display: disp, Width: 320, Height: 240})
	defer d.Close()
	warmed := make(chan error, 1)
	go func() { warmed <- d.WarmScreen(ctx, 30*time.Second) }()
	// The server comes up after the warm-up has begun to wait for it.
	time.Sleep(200 * time.Millisecond)
	xvfb := exec.Command("Xvfb", disp, "-screen", "0", "320x240x24", "-nolisten", "tcp", "-noreset")
	if err := xvfb.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { xvfb.Process.Kill(); xvfb.Wait() })
	if err := <-warmed; err != nil {
		t.Fatalf("warm the screen of %s: %v", disp, err)
	}
	d.xmu.Lock()
	x := d.x
	d.xmu.Unlock()
	if x == nil {
		t.Fatal("no connection to the X server after the warm-up")
	}
	shot, err := d.Screenshot(ctx, ShotRequest{})
	if err != nil || shot.Width != 320 || !strings.HasPrefix(string(shot.Data), "\x89PNG") {
		t.Fatalf("the first screenshot: %v %dx%d", err, shot.Width, shot.Height)
	}
	d.xmu.Lock()
	same := d.x == x
	d.xmu.Unlock()
	if !same {
		t.Error("the first screenshot made a connection of its own")
	}

	none := New(Config{Display: freeDisplay(t)})
	defer none.Close()
	if err := none.WarmScreen(ctx, 300*time.Millisecond); err == nil || !strings.Contains(err.Error(), none.cfg.Display) {
		t.Fatalf("a display with no server: %v", err)
	}
}

// freeDisplay returns a display number no X server uses.
func freeDisplay(t *testing.T) string {
	t.Helper()
	for n := 100 + os.Getpid()%500; n < 1000; n++ {
		_, lock := os.Stat(fmt.Sprintf("/tmp/.X%d-lock", n))
		_, sock := os.Stat(fmt.Sprintf("/tmp/.X11-unix/X%d", n))
		if os.IsNotExist(lock) && os.IsNotExist(sock) {
			return fmt.Sprintf(":%d", n)
		}
	}
	t.Fatal("no free X display number")
	return ""
}
