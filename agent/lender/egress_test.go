package lender

import (
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/egress"
	"github.com/berthdev/berth/internal/token"
)

// TestComputerEnvAndEgressAuth: a computer's proxy variables are always the
// agent's own, with its own credentials, whatever the supervisor sent; with
// egress off they are gone, and the proxy lets only running computers with
// their own password through while egress is on.
func TestComputerEnvAndEgressAuth(t *testing.T) {
	r := newRig(t, "cp_env", "", nil)
	tokens, err := token.NewDeriver([]byte("an egress secret of at least thirty-two bytes"))
	if err != nil {
		t.Fatal(err)
	}
	r.l.egress.e = &Egress{Addr: "10.213.0.1:3129", Tokens: tokens}
	in := map[string]string{"HTTP_PROXY": "http://c1:sup@10.0.0.9:3128", "no_proxy": "*", "ALL_PROXY": "socks5://x", "LANG": "C.UTF-8"}
	env := r.l.egress.env("c1", in, true)
	if in["HTTP_PROXY"] != "http://c1:sup@10.0.0.9:3128" {
		t.Fatal("the supervisor's map was changed")
	}
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
		u, err := url.Parse(env[k])
		pass, _ := u.User.Password()
		if err != nil || u.User.Username() != "c1" || pass != tokens.Derive(token.Egress, "c1") || u.Host != "10.213.0.1:3129" {
			t.Fatalf("%s=%q", k, env[k])
		}
	}
	if env["NO_PROXY"] != "" || env["no_proxy"] != "" || env["ALL_PROXY"] != "" || env["LANG"] != "C.UTF-8" {
		t.Fatalf("env: %v", env)
	}
	off := r.l.egress.env("c1", in, false)
	for _, k := range egress.ProxyVars {
		if _, ok := off[k]; ok {
			t.Fatalf("egress off, %s is set: %v", k, off)
		}
	}
	if off["LANG"] != "C.UTF-8" {
		t.Fatalf("egress off: %v", off)
	}

	pass := tokens.Derive(token.Egress, "c1")
	if _, ok := r.l.EgressAuth("c1", pass); ok {
		t.Fatal("a computer that does not run here passed")
	}
	r.l.mu.Lock()
	r.l.running["c1"] = &computer{stop: make(chan struct{})}
	r.l.running["c2"] = &computer{stop: make(chan struct{})}
	r.l.mu.Unlock()
	if id, ok := r.l.EgressAuth("c1", pass); !ok || id != "c1" {
		t.Fatal("a running computer with its own password was refused")
	}
	if _, ok := r.l.EgressAuth("c2", pass); ok {
		t.Fatal("another computer's password passed")
	}
	if _, ok := r.l.EgressAuth("", ""); ok {
		t.Fatal("no credentials passed")
	}
	if _, err := r.l.UpdateSettings(control.SettingsUpdate{Egress: ptr(false)}); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.l.EgressAuth("c1", pass); ok {
		t.Fatal("egress off, a computer passed")
	}
	r.l.mu.Lock()
	clear(r.l.running)
	r.l.mu.Unlock()
}

// TestEgressSettingDefaultsOn: a settings file from before the egress
// setting existed keeps egress on and no warm pool.
func TestEgressSettingDefaultsOn(t *testing.T) {
	dir := t.TempDir()
	old := `{"lending": true, "maxComputers": 2, "cpus": 1, "memoryMB": 2048, "dailySeconds": 3600, "desktop": true, "approvalTimeoutSeconds": 120}`
	if err := os.WriteFile(filepath.Join(dir, SettingsFile), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := loadSettings(dir)
	if err != nil || !s.Egress || s.WarmPoolSize != 0 || s.DailySeconds != 3600 {
		t.Fatalf("%+v %v", s, err)
	}
}
