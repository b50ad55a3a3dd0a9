package lender

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/agent/ledger"
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/lending"
	"github.com/berthdev/berth/providers/docker"
)

func TestMain(m *testing.M) {
	testkit.VerifyTestMain(m)
}

// testImage is the small image images/build.sh makes (busybox and computerd).
const testImage = "berth/test:latest"

// requireDocker skips without the engine or testImage, unless
// BERTH_REQUIRE_DOCKER=1.
func requireDocker(t testing.TB) {
	t.Helper()
	testkit.RequireDocker(t, testImage)
}

func testContext(t testing.TB, limit time.Duration) context.Context {
	return testkit.ContextTimeout(t, limit)
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), nil))
}

// rig is a lender with its data folder and ledger, on a fake clock.
type rig struct {
	t     testing.TB
	l     *Lender
	led   *ledger.Ledger
	clk   *clock.Fake
	dir   string
	agent string
	// memLow makes the host report memory pressure to the warm pool.
	memLow *atomic.Bool
}

// monday10 is Monday 2026-11-30 10:00 in Europe/Berlin.
var monday10 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

func newRig(t testing.TB, agent, dir string, clk *clock.Fake) *rig {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	if clk == nil {
		clk = clock.NewFake(monday10)
	}
	ctx := testContext(t, time.Minute)
	led, err := ledger.OpenFile(ctx, filepath.Join(dir, ledger.FileName))
	if err != nil {
		t.Fatal(err)
	}
	eng, err := NewDockerEngine(docker.DefaultSocket)
	if err != nil {
		t.Fatal(err)
	}
	log := testLogger(t)
	memLow := new(atomic.Bool)
	memInfo := func() (uint64, uint64, error) {
		if memLow.Load() {
			return 1 << 30, 24 << 30, nil // 4%
		}
		return 12 << 30, 24 << 30, nil
	}
	l, err := New(Config{
		LenderID: agent, DataDir: dir, Ledger: led, Engine: eng, Clock: clk, Logger: log, Version: "test",
		Docker: func(cpus float64, memoryMB int64) (Docker, error) {
			return docker.New(docker.Options{HeadlessImage: testImage, DesktopImage: testImage,
				CPUs: cpus, MemoryMB: memoryMB, Logger: log, MemInfo: memInfo})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, l: l, led: led, clk: clk, dir: dir, agent: agent, memLow: memLow}
	t.Cleanup(func() {
		l.Close()
		eng.Close()
		led.Close()
	})
	return r
}

// set replaces the settings; the rig starts from small computers.
func (r *rig) set(f func(*control.Settings)) {
	r.t.Helper()
	s := DefaultSettings()
	s.MemoryMB = 256
	s.TimeZone = "Europe/Berlin"
	if f != nil {
		f(&s)
	}
	if _, err := r.l.SetSettings(s); err != nil {
		r.t.Fatal(err)
	}
}

func newComputerID() string {
	var b [6]byte
	rand.Read(b[:])
	return "lt" + hex.EncodeToString(b[:])
}

// request is a create for a new computer with a fresh token.
func request(agent string) (lending.CreateRequest, string) {
	id := newComputerID()
	tok := "tok-" + id
	return lending.CreateRequest{
		ComputerID: id, SessionID: "s_" + id, AttemptID: "a_" + id, Deployment: "dep-test",
		Agent: agent, Workspace: "ws-test", Image: "headless", TokenHash: token.Hash(tok), LeaseSeconds: 900,
	}, tok
}

// destroyAll removes the computers the test made, whatever state they are in.
func destroyAll(t testing.TB, ids ...string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		d, err := docker.New(docker.Options{HeadlessImage: testImage})
		if err != nil {
			t.Error(err)
			return
		}
		defer d.Close()
		for _, id := range ids {
			if err := d.Destroy(ctx, docker.ContainerPrefix+id); err != nil {
				t.Errorf("cleanup %s: %v", id, err)
			}
		}
	})
}
