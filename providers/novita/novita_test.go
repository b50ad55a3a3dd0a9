package novita_test

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/berthdev/berth/conformance/hostedtest"
	"github.com/berthdev/berth/conformance/providertest"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/e2b"
	"github.com/berthdev/berth/providers/e2b/e2bfake"
	"github.com/berthdev/berth/providers/novita"
)

func TestMain(m *testing.M) {
	testkit.VerifyTestMain(m)
}

// TestConformance runs the suite against the novita provider as it is
// registered, its settings pointed at a fake of the E2B-compatible API.
func TestConformance(t *testing.T) {
	providertest.Run(t, providertest.Harness{
		ID: novita.ID,
		New: func(t providertest.T, log *slog.Logger) providertest.Target {
			key := fmt.Sprintf("sk_novita_%d", time.Now().UnixNano())
			f := e2bfake.New(t, key, "tpl-headless", "tpl-desktop")
			env := map[string]string{
				"NOVITA_API_URL": f.URL, "NOVITA_DOMAIN": e2bfake.Domain,
				"NOVITA_TEMPLATE_HEADLESS": "tpl-headless", "NOVITA_TEMPLATE_DESKTOP": "tpl-desktop",
			}
			o := e2b.OptionsFromConfig(novita.ID, novita.Settings, providers.Config{Getenv: func(k string) string { return env[k] }, Logger: log})
			o.Transport, o.Scheme = providertest.IdleClosed(t, f.Transport()), "http"
			p, err := e2b.New(o)
			if err != nil {
				t.Fatalf("provider: %v", err)
			}
			return providertest.Target{
				Provider:    p,
				Credentials: map[string]string{e2b.CredAPIKey: key},
				Faults:      f.Server,
				Exists:      providertest.ExistsFunc(f.Exists),
			}
		},
	})
}

func TestRegistered(t *testing.T) {
	if _, err := providers.New(novita.ID, providers.Config{}); err != nil {
		t.Fatal(err)
	}
	d, ok := providers.DescriptionOf(novita.ID)
	if !ok || d.Settings[0].Name != "NOVITA_API_URL" || d.Settings[0].Default != "https://api.sandbox.novita.ai" {
		t.Errorf("description %+v", d)
	}
	hostedtest.RequireDescribed(t, novita.ID, e2b.CredAPIKey, true)
}
