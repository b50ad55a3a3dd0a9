package docker

import (
	"reflect"
	"testing"

	"github.com/berthdev/berth/conformance/hostedtest"
	"github.com/berthdev/berth/providers"
)

// TestDescribed checks what `berth providers` shows for docker: every
// setting OptionsFromConfig reads and no other, no credentials, and
// defaults that configure the provider exactly as leaving them unset does.
func TestDescribed(t *testing.T) {
	d := hostedtest.Described(t, ID)
	if len(d.Credentials) != 0 {
		t.Errorf("credentials %+v: the docker provider takes none", d.Credentials)
	}
	var read []string
	unset, err := OptionsFromConfig(providers.Config{Getenv: func(k string) string {
		read = append(read, k)
		return ""
	}})
	if err != nil {
		t.Fatal(err)
	}
	defaults := map[string]string{}
	for _, s := range d.Settings {
		if s.Help == "" || s.Required || s.Secret {
			t.Errorf("%s: %+v, want optional, not secret, with help", s.Name, s)
		}
		defaults[s.Name] = s.Default
	}
	hostedtest.RequireSettingsRead(t, d, read)
	byDefaults, err := OptionsFromConfig(providers.Config{Getenv: func(k string) string { return defaults[k] }})
	if err != nil {
		t.Fatalf("the described defaults do not configure the provider: %v", err)
	}
	for _, o := range []*Options{&byDefaults, &unset} {
		o.Logger, o.MemInfo, o.Routes = nil, nil, nil // made afresh by each call
	}
	if !reflect.DeepEqual(byDefaults, unset) {
		t.Errorf("options from the described defaults %+v, want those of unset settings %+v", byDefaults, unset)
	}
}
