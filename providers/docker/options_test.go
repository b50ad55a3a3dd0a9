package docker

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/berthdev/berth/providers"
)

func env(m map[string]string) providers.Config {
	return providers.Config{Getenv: func(k string) string { return m[k] }}
}

func TestOptionsDefaults(t *testing.T) {
	o, err := OptionsFromConfig(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := Options{
		Host:          "unix:///var/run/docker.sock",
		HeadlessImage: "berth/headless:latest",
		DesktopImage:  "berth/desktop:latest",
		MemoryMB:      2048,
		CPUs:          1,
		Pids:          512,
		TmpMB:         1024,
		ShmMB:         512,
	}
	o.Logger = nil
	if o.Host != want.Host || o.HeadlessImage != want.HeadlessImage || o.DesktopImage != want.DesktopImage ||
		o.MemoryMB != want.MemoryMB || o.CPUs != want.CPUs || o.Pids != want.Pids || o.TmpMB != want.TmpMB ||
		o.ShmMB != want.ShmMB || o.Runtime != "" || len(o.JoinContainers) != 0 {
		t.Errorf("defaults = %+v, want %+v", o, want)
	}

	// Zero Options set in Go take the same defaults.
	g, err := (Options{}).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if g.Host != want.Host || g.MemoryMB != want.MemoryMB || g.CPUs != want.CPUs || g.Pids != want.Pids ||
		g.TmpMB != want.TmpMB || g.ShmMB != want.ShmMB || g.HeadlessImage != want.HeadlessImage || g.Logger == nil {
		t.Errorf("zero Options = %+v, want the defaults", g)
	}
}

func TestOptionsFromSettings(t *testing.T) {
	o, err := OptionsFromConfig(env(map[string]string{
		SettingSocket:         "/run/user/1000/docker.sock",
		SettingHeadlessImage:  "example/headless:1",
		SettingDesktopImage:   "example/desktop:1",
		SettingMemoryMB:       "4096",
		SettingCPUs:           "1.5",
		SettingRuntime:        "runsc",
		SettingPids:           "1024",
		SettingTmpMB:          "256",
		SettingShmMB:          "64",
		SettingJoinContainers: " berth-supervisor , berth-egress,",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if o.Host != "unix:///run/user/1000/docker.sock" {
		t.Errorf("Host = %q, want the plain path as a unix URL", o.Host)
	}
	if o.HeadlessImage != "example/headless:1" || o.DesktopImage != "example/desktop:1" || o.MemoryMB != 4096 ||
		o.CPUs != 1.5 || o.Runtime != "runsc" || o.Pids != 1024 || o.TmpMB != 256 || o.ShmMB != 64 {
		t.Errorf("Options = %+v", o)
	}
	if !slices.Equal(o.JoinContainers, []string{"berth-supervisor", "berth-egress"}) {
		t.Errorf("JoinContainers = %q", o.JoinContainers)
	}
	if o, err := OptionsFromConfig(env(map[string]string{SettingSocket: "tcp://10.0.0.5:2375"})); err != nil || o.Host != "tcp://10.0.0.5:2375" {
		t.Errorf("tcp socket: %+v, %v", o.Host, err)
	}
}

func TestOptionsRejectBadValues(t *testing.T) {
	for _, tc := range []struct {
		setting, value string
		want           []string // in the error
	}{
		{SettingMemoryMB, "10", []string{SettingMemoryMB, "64 to 1048576"}},
		{SettingMemoryMB, "2g", []string{SettingMemoryMB, "not a whole number", "64 to 1048576"}},
		{SettingMemoryMB, "-1", []string{SettingMemoryMB, "64 to 1048576"}},
		{SettingCPUs, "0", []string{SettingCPUs, "0.01 to 1024"}},
		{SettingCPUs, "two", []string{SettingCPUs, "not a number"}},
		{SettingCPUs, "NaN", []string{SettingCPUs, "not a number"}},
		{SettingCPUs, "5000", []string{SettingCPUs, "0.01 to 1024"}},
		{SettingPids, "8", []string{SettingPids, "32 to 4194304"}},
		{SettingTmpMB, "0", []string{SettingTmpMB, "1 to 1048576"}},
		{SettingShmMB, "99999999", []string{SettingShmMB, "1 to 1048576"}},
		{SettingRuntime, "run sc", []string{SettingRuntime, "runsc"}},
		{SettingSocket, "docker.sock", []string{SettingSocket, "unix:///"}},
		{SettingSocket, "ssh://host", []string{SettingSocket, "tcp://host:port"}},
		{SettingSocket, "unix://relative.sock", []string{SettingSocket}},
		{SettingHeadlessImage, "berth/headless latest", []string{SettingHeadlessImage}},
		{SettingDiskMB, "8", []string{SettingDiskMB, "0 (no limit", "16 to 16777216"}},
		{SettingDiskMB, "-1", []string{SettingDiskMB, "0 to 16777216"}},
		{SettingDiskMB, "10g", []string{SettingDiskMB, "not a whole number"}},
		{SettingDiskMB, "99999999", []string{SettingDiskMB, "0 to 16777216"}},
	} {
		_, err := OptionsFromConfig(env(map[string]string{tc.setting: tc.value}))
		if err == nil {
			t.Errorf("%s=%q accepted", tc.setting, tc.value)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s=%q: error %q lacks %q", tc.setting, tc.value, err, w)
			}
		}
	}

	// The same checks apply to Options set in Go.
	for _, o := range []Options{{MemoryMB: 10}, {CPUs: -1}, {Pids: -5}, {TmpMB: -1}, {ShmMB: 1 << 30}, {Host: "nope"}, {JoinContainers: []string{""}}, {DiskMB: 8}, {DiskMB: -2}} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
}

func TestDiskSetting(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  int64
	}{{"", DefaultDiskMB}, {"0", NoDiskLimit}, {"16", 16}, {" 2048 ", 2048}} {
		o, err := OptionsFromConfig(env(map[string]string{SettingDiskMB: tc.value}))
		if err != nil {
			t.Errorf("%s=%q: %v", SettingDiskMB, tc.value, err)
			continue
		}
		if o.DiskMB != tc.want {
			t.Errorf("%s=%q: DiskMB = %d, want %d", SettingDiskMB, tc.value, o.DiskMB, tc.want)
		}
	}
	if o, err := New(Options{}); err != nil || o.opts.DiskMB != DefaultDiskMB {
		t.Errorf("zero Options: DiskMB %d, %v; want %d", o.opts.DiskMB, err, DefaultDiskMB)
	}
	if o, err := New(Options{DiskMB: NoDiskLimit}); err != nil || o.opts.DiskMB != NoDiskLimit {
		t.Errorf("NoDiskLimit: DiskMB %d, %v", o.opts.DiskMB, err)
	}
}

func TestRegistered(t *testing.T) {
	p, err := providers.New(ID, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	d, ok := p.(*Docker)
	if !ok {
		t.Fatalf("provider is %T, want *Docker", p)
	}
	d.Close()
	_, err = providers.New(ID, env(map[string]string{SettingCPUs: "0"}))
	if err == nil || !strings.Contains(err.Error(), SettingCPUs) {
		t.Errorf("bad setting: %v, want an error naming %s", err, SettingCPUs)
	}
}

func TestCheckSpec(t *testing.T) {
	good := testSpec(t)
	if err := checkSpec(good); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*providers.Spec){
		"empty id":     func(s *providers.Spec) { s.ComputerID = "" },
		"slash in id":  func(s *providers.Spec) { s.ComputerID = "a/b" },
		"leading dash": func(s *providers.Spec) { s.ComputerID = "-a" },
		"no token":     func(s *providers.Spec) { s.TokenHash = "" },
		"upper token":  func(s *providers.Spec) { s.TokenHash = strings.ToUpper(good.TokenHash) },
		"env name":     func(s *providers.Spec) { s.Env = map[string]string{"A=B": "c"} },
	} {
		s := good
		mutate(&s)
		if err := checkSpec(s); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestImageKinds(t *testing.T) {
	d, err := New(Options{HeadlessImage: "h:1", DesktopImage: "d:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for kind, want := range map[string]string{"": "h:1", providers.ImageHeadless: "h:1", providers.ImageDesktop: "d:1"} {
		if got, err := d.image(kind); err != nil || got != want {
			t.Errorf("image(%q) = %q, %v; want %q", kind, got, err, want)
		}
	}
	if _, err := d.image("gpu"); !errors.Is(err, providers.ErrBadImage) {
		t.Errorf("unknown kind: %v, want ErrBadImage", err)
	}
}

func TestEnvironment(t *testing.T) {
	s := testSpec(t)
	s.Env["BERTH_TOKEN_SHA256"] = "spoofed"
	got := environment(s)
	if !slices.IsSorted(got) {
		t.Errorf("environment not sorted: %q", got)
	}
	if !slices.Contains(got, "BERTH_TOKEN_SHA256="+s.TokenHash) || slices.Contains(got, "BERTH_TOKEN_SHA256=spoofed") {
		t.Errorf("environment %q: the token hash must come from the spec", got)
	}
	for _, kv := range got {
		for _, c := range s.Credentials {
			if strings.Contains(kv, c) {
				t.Errorf("credential in environment: %s", kv)
			}
		}
	}
}

// TestEgressAddr: the egress proxy's address is the subnet's last host
// address, whatever address of the subnet is given; subnets without room
// and IPv6 have none.
func TestEgressAddr(t *testing.T) {
	for in, want := range map[string]string{
		"10.213.0.16/28":  "10.213.0.30",
		"10.213.0.17/28":  "10.213.0.30",
		"172.18.0.0/16":   "172.18.255.254",
		"192.168.65.0/24": "192.168.65.254",
		"10.0.0.0/29":     "10.0.0.6",
		"10.0.0.0/30":     "",
		"fd00::/64":       "",
	} {
		got := EgressAddr(netip.MustParsePrefix(in))
		if (want == "" && got.IsValid()) || (want != "" && got.String() != want) {
			t.Errorf("EgressAddr(%s) = %v, want %q", in, got, want)
		}
	}
	if _, err := (Options{EgressContainer: "berth-egress-x", HeadlessImage: "a", DesktopImage: "b"}).withDefaults(); err != nil {
		t.Errorf("an egress container with networks made at start: %v", err)
	}
	if _, err := (Options{EgressContainer: "berth-egress-x", NetworkPool: 2, HeadlessImage: "a", DesktopImage: "b"}).withDefaults(); err == nil || !strings.Contains(err.Error(), SettingNetworkPool) {
		t.Errorf("an egress container with a network pool: %v", err)
	}
}
