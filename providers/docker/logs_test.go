package docker

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// TestLogsCapped: a computer that prints forever keeps at most LogFiles
// files of LogFileSize in the engine's logs.
func TestLogsCapped(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	d := newTestDocker(t, ctx, Options{DiskMB: NoDiskLimit})
	m := create(t, ctx, d, testSpec(t))
	res, err := d.cli.ContainerInspect(ctx, m.ID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	logPath := res.Container.LogPath
	if _, err := os.Stat(logPath); logPath == "" || err != nil {
		t.Skipf("the computer's log %q is not on this host: %v", logPath, err)
	}
	// PID 1's stdout is the container's log.
	startDetached(t, ctx, d, m.ID, "/bin/sh", "-c",
		"yes 'the computer prints forever, and its log must not grow past the cap' > /proc/1/fd/1")

	const limit = 10<<20 + 64<<10 // 2 files of 5 MB, and a line over
	size := func() (total int64, files int) {
		ms, _ := filepath.Glob(logPath + "*")
		for _, f := range ms {
			if fi, err := os.Stat(f); err == nil {
				total += fi.Size()
				files++
			}
		}
		return total, files
	}
	rotated := 0
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) && rotated < 5 {
		total, files := size()
		if total > limit {
			t.Fatalf("the log holds %d bytes in %d files, want at most %d", total, files, limit)
		}
		if files > 1 {
			rotated++
		}
		time.Sleep(500 * time.Millisecond)
	}
	total, files := size()
	if rotated == 0 {
		t.Fatalf("the log never rotated (%d bytes in %d files): is the printer running?", total, files)
	}
	t.Logf("the log holds %d bytes in %d files", total, files)
	if _, err := d.cli.ContainerInspect(ctx, m.ID, client.ContainerInspectOptions{}); cerrdefs.IsNotFound(err) {
		t.Fatal("the computer is gone")
	}
}
