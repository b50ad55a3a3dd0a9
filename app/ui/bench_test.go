package ui

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/test"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/agent/ledger"
	"github.com/berthdev/berth/agent/lender"
	"github.com/berthdev/berth/providers/docker"
)

// BenchmarkRefresh measures one refresh of the window (what the app does
// once a second: status, sessions, approvals, usage, cleanups, then the
// widgets) against a real agent's control socket, and a bare status call
// over the same socket as the baseline.
func BenchmarkRefresh(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := b.TempDir()
	led, err := ledger.OpenFile(ctx, filepath.Join(dir, ledger.FileName))
	if err != nil {
		b.Fatal(err)
	}
	defer led.Close()
	eng, err := lender.NewDockerEngine(docker.DefaultSocket)
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close()
	l, err := lender.New(lender.Config{
		LenderID: "cp_bench", DataDir: dir, Ledger: led, Engine: eng, Version: "bench",
		Pairing: control.Pairing{Paired: true, URL: "http://supervisor.test", LenderID: "cp_bench"},
		Docker:  func(float64, int64) (lender.Docker, error) { return docker.New(docker.Options{}) },
	})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	sock := filepath.Join(dir, control.SocketName)
	ln, err := control.Listen(sock)
	if err != nil {
		b.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- control.Serve(sctx, ln, l, slog.New(slog.DiscardHandler)) }()
	defer func() {
		stop()
		<-done
	}()
	c := control.NewClient(sock)
	defer c.Close()

	test.NewTempApp(b)
	w := test.NewWindow(nil)
	defer w.Close()
	u := New(fyne.CurrentApp(), w, c, Options{Logger: slog.New(slog.DiscardHandler)})
	w.Resize(fyne.NewSize(800, 900))
	u.Refresh(ctx)

	var refresh, status time.Duration
	for b.Loop() {
		t0 := time.Now()
		u.Refresh(ctx)
		t1 := time.Now()
		if _, err := c.Status(ctx); err != nil {
			b.Fatal(err)
		}
		refresh += t1.Sub(t0)
		status += time.Since(t1)
	}
	n := float64(b.N)
	b.ReportMetric(float64(refresh.Microseconds())/1000/n, "refresh-ms")
	b.ReportMetric(float64(status.Microseconds())/1000/n, "base-status-ms")
	b.ReportMetric(float64(refresh)/float64(status), "ratio")
	b.ReportMetric(0, "ns/op")
}
