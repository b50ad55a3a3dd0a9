package tunnel

import (
	"strings"
	"testing"

	"github.com/berthdev/berth/conformance/hostedtest"
)

// TestDescribed checks what `berth providers` shows for tunnel: no
// settings, and exactly the credentials CheckCredentials requires, the
// token secret.
func TestDescribed(t *testing.T) {
	d := hostedtest.Described(t, ID)
	if len(d.Settings) != 0 {
		t.Errorf("settings %+v: the tunnel provider reads none", d.Settings)
	}
	full := map[string]string{CredURL: "https://runner.example", CredAPIKey: "tok"}
	if err := New(Options{}).CheckCredentials(full); err != nil {
		t.Fatalf("CheckCredentials(%v): %v", full, err)
	}
	if len(d.Credentials) != len(full) {
		t.Errorf("credentials %+v, want %d", d.Credentials, len(full))
	}
	for _, s := range d.Credentials {
		if _, known := full[s.Name]; !known || !s.Required || s.Help == "" {
			t.Errorf("%s: %+v, want a required credential with help", s.Name, s)
		}
		if s.Secret != (s.Name == CredAPIKey) {
			t.Errorf("%s: secret %v, want only the token secret", s.Name, s.Secret)
		}
		without := map[string]string{}
		for k, v := range full {
			if k != s.Name {
				without[k] = v
			}
		}
		if err := New(Options{}).CheckCredentials(without); err == nil || !strings.Contains(err.Error(), s.Name) {
			t.Errorf("without %s: %v, want it named as missing", s.Name, err)
		}
	}
}
