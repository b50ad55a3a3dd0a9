package local

import (
	"strings"
	"testing"

	"github.com/berthdev/berth/conformance/hostedtest"
	"github.com/berthdev/berth/providers"
)

// TestDescribed checks what `berth providers` shows for local: every
// setting the registered factory reads and no other, the relay's marked
// required (the factory refuses to build without them) and its token
// secret, and the optional lender credential.
func TestDescribed(t *testing.T) {
	d := hostedtest.Described(t, ID)
	env := map[string]string{SettingRelayURL: "http://127.0.0.1:1", SettingRelayToken: "relay-token-0123456789"}
	var read []string
	if _, err := providers.New(ID, providers.Config{Getenv: func(k string) string {
		read = append(read, k)
		return env[k]
	}}); err != nil {
		t.Fatal(err)
	}
	for _, s := range d.Settings {
		if s.Help == "" {
			t.Errorf("%s has no help", s.Name)
		}
		if want := s.Name == SettingRelayURL || s.Name == SettingRelayToken; s.Required != want {
			t.Errorf("%s: required %v, want %v", s.Name, s.Required, want)
		}
		if s.Secret != (s.Name == SettingRelayToken) {
			t.Errorf("%s: secret %v, want only the relay token secret", s.Name, s.Secret)
		}
	}
	hostedtest.RequireSettingsRead(t, d, read)
	for _, name := range d.Missing(func(string) string { return "" }) {
		if _, err := providers.New(ID, providers.Config{Getenv: func(k string) string {
			if k == name {
				return ""
			}
			return env[k]
		}}); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("without %s: %v, want an error naming it", name, err)
		}
	}
	if len(d.Credentials) != 1 || d.Credentials[0].Name != CredLender || d.Credentials[0].Required || d.Credentials[0].Secret {
		t.Errorf("credentials %+v, want the optional lender only", d.Credentials)
	}
	var l *Local
	if err := l.CheckCredentials(map[string]string{CredLender: "cp_0123456789abcdef"}); err != nil {
		t.Errorf("CheckCredentials of a lender id: %v", err)
	}
}
