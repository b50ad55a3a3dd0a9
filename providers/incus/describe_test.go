package incus

import (
	"testing"

	"github.com/berthdev/berth/providers"
)

// TestDescribed checks what `berth providers` shows for the provider: a
// summary, and the setting or credential a connection cannot do without,
// marked required (and secret when it is a key).
func TestDescribed(t *testing.T) {
	d, ok := providers.DescriptionOf(ID)
	if !ok || d.Summary == "" {
		t.Fatalf("DescriptionOf(%q) = %+v, %v", ID, d, ok)
	}
	for _, s := range d.Settings {
		if s.Name == SettingRegistry {
			if !s.Required || s.Help == "" {
				t.Errorf("%s: %+v, want required with help", s.Name, s)
			}
			return
		}
	}
	t.Errorf("%s is not described: %+v", SettingRegistry, d)
}
