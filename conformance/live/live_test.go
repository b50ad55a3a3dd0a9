// Package live_test checks each hosted provider against the real service,
// with the account whose credentials are in the environment: a short
// cycle through an in-process supervisor (start, exec, write, read, stop,
// and a second start that begins empty; for browser providers, a session
// driven over its CDP URL). `make test-live` runs it; a provider whose
// credentials are not set is skipped with a line naming them.
//
// Without BERTH_LIVE=1 (as in `make test`) nothing reaches a real
// service: only the table below is checked against the providers.
package live_test

import (
	"context"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/berthdev/berth/conformance/browsertest"
	"github.com/berthdev/berth/conformance/providertest"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/e2b"
	"github.com/berthdev/berth/providers/e2b/e2bfake"
	_ "github.com/berthdev/berth/providers/standard"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

// cred is one credential of a connection and the environment variable
// that holds it.
type cred struct {
	name, env string
	optional  bool
}

// account is how to reach one provider with a real account.
type account struct {
	id      string
	creds   []cred
	browser bool // a browser session: no shell, driven over CDP
}

// accounts are the providers `make test-live` checks. Their settings
// (templates, snapshots, API URLs) are read from the environment as the
// supervisor reads them; see docs/providers.md.
var accounts = []account{
	{id: "e2b", creds: []cred{{name: "apiKey", env: "E2B_API_KEY"}}},
	{id: "novita", creds: []cred{{name: "apiKey", env: "NOVITA_API_KEY"}}},
	{id: "daytona", creds: []cred{{name: "apiKey", env: "DAYTONA_API_KEY"}, {name: "organizationId", env: "DAYTONA_ORGANIZATION_ID", optional: true}}},
	{id: "modal", creds: []cred{{name: "tokenId", env: "MODAL_TOKEN_ID"}, {name: "tokenSecret", env: "MODAL_TOKEN_SECRET"}}},
	{id: "boat", creds: []cred{{name: "apiKey", env: "BOAT_API_KEY"}}},
	{id: "railway", creds: []cred{
		{name: "token", env: "RAILWAY_API_TOKEN"}, {name: "projectId", env: "RAILWAY_PROJECT_ID"},
		{name: "environmentId", env: "RAILWAY_ENVIRONMENT_ID"}, {name: "tokenKind", env: "RAILWAY_TOKEN_KIND", optional: true},
	}},
	{id: "cloud", creds: []cred{{name: "url", env: "BERTH_CLOUD_URL"}, {name: "apiKey", env: "BERTH_CLOUD_API_KEY"}, {name: "workspace", env: "BERTH_CLOUD_WORKSPACE", optional: true}}},
	{id: "browserbase", browser: true, creds: []cred{{name: "apiKey", env: "BROWSERBASE_API_KEY"}, {name: "projectId", env: "BROWSERBASE_PROJECT_ID", optional: true}}},
	{id: "browseruse", browser: true, creds: []cred{{name: "apiKey", env: "BROWSER_USE_API_KEY"}}},
}

// credentials returns the account's credentials from getenv, and the
// required variables that are not set.
func (a account) credentials(getenv func(string) string) (map[string]string, []string) {
	c := map[string]string{}
	var missing []string
	for _, cr := range a.creds {
		v := strings.TrimSpace(getenv(cr.env))
		switch {
		case v != "":
			c[cr.name] = v
		case !cr.optional:
			missing = append(missing, cr.env)
		}
	}
	return c, missing
}

// TestAccountsMatchProviders: every account names a registered provider
// and credentials that provider takes, so that a provider renaming its
// credentials fails here, not on a user's first live run.
func TestAccountsMatchProviders(t *testing.T) {
	for _, a := range accounts {
		p, err := providers.New(a.id, providers.Config{Getenv: settingsOnly(a.id), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Errorf("%s: %v", a.id, err)
			continue
		}
		checker, ok := p.(providers.CredentialChecker)
		if !ok {
			t.Errorf("%s checks no credentials: the live test cannot tell a wrong table", a.id)
			continue
		}
		all := map[string]string{}
		for _, cr := range a.creds {
			all[cr.name] = sample(cr.name)
		}
		if err := checker.CheckCredentials(all); err != nil {
			t.Errorf("%s refuses the credentials the live test would send: %v", a.id, err)
		}
		all["notACredential"] = "x"
		if checker.CheckCredentials(all) == nil {
			t.Errorf("%s takes an unknown credential: the table's names cannot be checked", a.id)
		}
	}
}

// settingsOnly is a getenv for building provider id in a test: the
// provider's required settings (as it describes them) get sample values,
// nothing else is set.
func settingsOnly(id string) func(string) string {
	d, _ := providers.DescriptionOf(id)
	return func(k string) string {
		for _, s := range d.Settings {
			if s.Name == k && s.Required {
				return "sample-" + strings.ToLower(k)
			}
		}
		return ""
	}
}

// sample is a well-formed value for a credential named name.
func sample(name string) string {
	switch name {
	case "url":
		return "https://berth.example"
	case "tokenKind":
		return "project"
	}
	return "sample-" + name + "-0123456789abcdef"
}

// TestLive runs the cycle on every provider whose credentials are set,
// under BERTH_LIVE=1.
func TestLive(t *testing.T) {
	if os.Getenv("BERTH_LIVE") != "1" {
		t.Skip("BERTH_LIVE is not 1: no real service is called (make test-live sets it)")
	}
	for _, a := range accounts {
		t.Run(a.id, func(t *testing.T) {
			creds, missing := a.credentials(os.Getenv)
			if len(missing) > 0 {
				t.Skipf("%s: set %s to check it against the real service", a.id, strings.Join(missing, ", "))
			}
			newProvider := func(log *slog.Logger) providers.Provider {
				p, err := providers.New(a.id, providers.Config{Getenv: os.Getenv, Logger: log})
				if err != nil {
					t.Fatalf("%s: %v", a.id, err)
				}
				return p
			}
			if a.browser {
				liveBrowser(t, a.id, creds, newProvider)
				return
			}
			liveComputer(t, a.id, creds, newProvider)
		})
	}
}

// TestLiveCyclesOnFakes runs the live cycles where CI can: the computer
// cycle on E2B's fake (held to E2B's contract), and the drive to a data:
// page on a local Chromium, so that `make test-live` fails for the
// service's reasons only.
func TestLiveCyclesOnFakes(t *testing.T) {
	t.Run("computer", func(t *testing.T) {
		const key = "e2b_live_cycle_secret_0123456789"
		f := e2bfake.New(t, key, "berth-headless", "berth-desktop")
		tr := f.Transport()
		t.Cleanup(tr.CloseIdleConnections)
		liveComputer(t, e2b.ID, map[string]string{"apiKey": key}, func(log *slog.Logger) providers.Provider {
			p, err := e2b.New(e2b.Options{
				APIURL: f.URL, Domain: e2bfake.Domain, Scheme: "http",
				HeadlessTemplate: "berth-headless", DesktopTemplate: "berth-desktop",
				Transport: tr, Logger: log,
			})
			if err != nil {
				t.Fatal(err)
			}
			return p
		})
	})
	t.Run("browser page", func(t *testing.T) {
		browsertest.RequireChromium(t)
		c, err := browsertest.StartChromium(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Stop)
		drivePage(t, c.WS)
	})
}

// drivePage drives the browser behind cdpURL to a page of the test's own
// (a data: URL, since a hosted browser cannot reach this machine).
func drivePage(t *testing.T, cdpURL string) {
	page := "data:text/html," + url.PathEscape(`<title>berth-live-page</title><p id="x">hello from berth</p>`)
	browsertest.DriveTo(t, cdpURL, page, "berth-live-page", "hello from berth")
}

// liveComputer runs the conformance suite's Tools scenario, the five
// tools on a started computer and an empty one after a restart, on the
// real service.
func liveComputer(t *testing.T, id string, creds map[string]string, newProvider func(*slog.Logger) providers.Provider) {
	h := providertest.Harness{ID: id, New: func(pt providertest.T, log *slog.Logger) providertest.Target {
		p := newProvider(log)
		return providertest.Target{Provider: p, Credentials: creds, Faults: providertest.NoFaults{}, Exists: func(ctx context.Context, label, value string) (bool, error) {
			l, ok := p.(providers.Lister)
			if !ok {
				return true, nil // the service cannot be asked; the stop's own check stands
			}
			ms, err := l.List(providers.WithCredentials(ctx, creds))
			for _, m := range ms {
				if m.Labels[label] == value {
					return true, nil
				}
			}
			return false, err
		}}
	}}
	for _, sc := range providertest.Scenarios() {
		if sc.Name == "Tools" {
			sc.Run(t, h)
			return
		}
	}
	t.Fatal("the conformance suite has no Tools scenario")
}

// liveBrowser starts a browser session, drives it over its CDP URL to a
// page of its own (a data: URL, since the service cannot reach this
// machine), checks that the shell tools are refused, and stops it.
func liveBrowser(t *testing.T, id string, creds map[string]string, newProvider func(*slog.Logger) providers.Provider) {
	s := browsertest.NewStack(t, id, newProvider)
	s.Connect("live", creds, 300)
	v := s.Start("live", "wss://")
	drivePage(t, v.Browser.CDPURL)
	s.RequireNoShell("live")
	if code, raw := s.Call("POST", "/v1/agents/live/computer/stop", nil); code != 200 {
		t.Fatalf("stop: %d %s", code, raw)
	}
	secrets := map[string]string{}
	for k, v := range creds {
		if len(v) >= 8 {
			secrets["credential "+k] = v
		}
	}
	s.RequireNotLogged(secrets)
}
