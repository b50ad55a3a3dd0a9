package docker

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/providers"
)

func TestParseMemInfo(t *testing.T) {
	avail, total, err := parseMemInfo([]byte("MemTotal:       24576000 kB\nMemFree:         1000 kB\nMemAvailable:    2457600 kB\nBuffers: x kB\n"))
	if err != nil || avail != 2457600<<10 || total != 24576000<<10 {
		t.Fatalf("parse: %d %d %v", avail, total, err)
	}
	if _, _, err := parseMemInfo([]byte("MemTotal: 10 kB\n")); err == nil {
		t.Error("meminfo without MemAvailable: no error")
	}
	if a, tot, err := hostMemInfo(); err != nil || tot == 0 || a > tot {
		t.Errorf("this host's memory: %d of %d, %v", a, tot, err)
	}
}

func TestWarmPoolSetting(t *testing.T) {
	o, err := OptionsFromConfig(env(nil))
	if err != nil || o.WarmPool != 0 || o.MemInfo == nil {
		t.Fatalf("default: %d %v", o.WarmPool, err)
	}
	if o, err := OptionsFromConfig(env(map[string]string{SettingWarmPool: "1000"})); err != nil || o.WarmPool != 1000 {
		t.Fatalf("1000: %d %v", o.WarmPool, err)
	}
	for _, v := range []string{"1001", "-1", "three"} {
		_, err := OptionsFromConfig(env(map[string]string{SettingWarmPool: v}))
		if err == nil || !strings.Contains(err.Error(), SettingWarmPool) || !strings.Contains(err.Error(), "0 to 1000") {
			t.Errorf("%s=%s: %v, want an error naming the setting and its range", SettingWarmPool, v, err)
		}
	}
	if _, err := (Options{WarmPool: 5000}).withDefaults(); err == nil || !strings.Contains(err.Error(), SettingWarmPool) {
		t.Errorf("Options.WarmPool 5000: %v", err)
	}
	if _, err := (Options{WarmPool: 5, WarmPoolMax: 3}).withDefaults(); err == nil || !strings.Contains(err.Error(), SettingWarmPoolMax) {
		t.Errorf("Options.WarmPoolMax under WarmPool: %v", err)
	}

	// The range the pool follows demand within.
	for _, c := range []struct {
		set    map[string]string
		lo, hi int
		err    string // in the error; empty: none
	}{
		{set: map[string]string{SettingWarmPool: "3"}, lo: 3, hi: 3},
		{set: map[string]string{SettingWarmPoolMin: "2", SettingWarmPoolMax: "40"}, lo: 2, hi: 40},
		{set: map[string]string{SettingWarmPool: "2", SettingWarmPoolMin: "2", SettingWarmPoolMax: "40"}, lo: 2, hi: 40},
		{set: map[string]string{SettingWarmPoolMax: "10"}, lo: 0, hi: 10},
		{set: map[string]string{SettingWarmPool: "2", SettingWarmPoolMin: "4"}, err: "disagree"},
		{set: map[string]string{SettingWarmPool: "5", SettingWarmPoolMax: "4"}, err: SettingWarmPoolMax + "=4 is out of range: want 5 to 1000"},
		{set: map[string]string{SettingWarmPoolMax: "1001"}, err: SettingWarmPoolMax + "=1001 is out of range"},
		{set: map[string]string{SettingWarmPoolMin: "x"}, err: SettingWarmPoolMin + `="x" is not a whole number`},
		{set: map[string]string{SettingWarmPoolDesk: "1001"}, err: SettingWarmPoolDesk + "=1001 is out of range: want 0 to 1000"},
	} {
		o, err := OptionsFromConfig(env(c.set))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: %v, want an error with %q", c.set, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v: %v", c.set, err)
			continue
		}
		d := &Docker{opts: o}
		if lo, hi := d.PoolRange(providers.ImageHeadless); lo != c.lo || hi != c.hi {
			t.Errorf("%v: pool range %d..%d, want %d..%d", c.set, lo, hi, c.lo, c.hi)
		}
		if lo, hi := d.PoolRange(providers.ImageDesktop); lo != 0 || hi != 0 {
			t.Errorf("%v: desktop pool range %d..%d, want none", c.set, lo, hi)
		}
	}
	o, err = OptionsFromConfig(env(map[string]string{SettingWarmPoolDesk: "2"}))
	if err != nil {
		t.Fatal(err)
	}
	if lo, hi := (&Docker{opts: o}).PoolRange(providers.ImageDesktop); lo != 2 || hi != 2 {
		t.Errorf("%s=2: desktop pool range %d..%d", SettingWarmPoolDesk, lo, hi)
	}
}

// TestCreatePooled: a pool computer is hardened like any other, labelled as
// waiting in the pool with no session or agent, holds the bind hash and no
// token hash or environment, and Destroy removes all of it.
func TestCreatePooled(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	d := newTestDocker(t, ctx, Options{})
	hash := token.Hash("bind-secret")
	if _, err := d.CreatePooled(ctx, providers.Spec{ComputerID: "p-x"}, "nothex"); err == nil {
		t.Error("bad bind hash: no error")
	}
	if _, err := d.CreatePooled(ctx, providers.Spec{ComputerID: "p-x", Image: "gpu"}, hash); !errors.Is(err, providers.ErrBadImage) {
		t.Errorf("pool computer of an unknown image: %v, want ErrBadImage", err)
	}
	id := "pool-" + randomID(t)
	spec := providers.Spec{ComputerID: id, Deployment: "d-test", SessionID: "ignored", TokenHash: token.Hash("ignored"),
		Env: map[string]string{"HTTP_PROXY": "http://ignored"}}
	m, err := d.CreatePooled(ctx, spec, hash)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := cleanupContext()
		defer cancel()
		d.Destroy(cctx, m.ID)
	})
	if m.ID != ContainerPrefix+id || !strings.HasPrefix(m.Endpoint, "http://") {
		t.Fatalf("machine %+v", m)
	}
	ins, err := d.cli.ContainerInspect(ctx, m.ID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := ins.Container
	l := c.Config.Labels
	if l[providers.LabelPool] != "true" || l[providers.LabelManaged] != "true" || l[providers.LabelComputer] != id ||
		l[providers.LabelSession] != "" || l[providers.LabelAgent] != "" || l[providers.LabelDeployment] != "d-test" {
		t.Errorf("labels %v", l)
	}
	wantEnv := []string{computerd.EnvBindHash + "=" + hash, computerd.EnvComputerID + "=" + id}
	for _, kv := range c.Config.Env {
		if strings.HasPrefix(kv, computerd.EnvTokenHash+"=") || strings.Contains(kv, "ignored") {
			t.Errorf("pool computer environment holds %q", kv)
		}
	}
	for _, kv := range wantEnv {
		if !slices.Contains(c.Config.Env, kv) {
			t.Errorf("environment %v lacks %s", c.Config.Env, kv)
		}
	}
	hc := c.HostConfig
	if !hc.ReadonlyRootfs || !slices.Contains(hc.CapDrop, "ALL") || !slices.Contains(hc.SecurityOpt, "no-new-privileges") ||
		c.Config.User != User || hc.Memory != d.opts.MemoryMB<<20 || hc.PidsLimit == nil || *hc.PidsLimit != d.opts.Pids {
		t.Errorf("pool computer not hardened: user %s, host config %+v", c.Config.User, hc)
	}
	if ms, err := d.List(ctx); err != nil || !slices.ContainsFunc(ms, func(x providers.Machine) bool {
		return x.ID == m.ID && x.Labels[providers.LabelPool] == "true"
	}) {
		t.Errorf("List does not show the pool computer: %v", err)
	}
	if err := d.Destroy(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	requireGone(t, ctx, d, id)
}
