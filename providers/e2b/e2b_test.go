package e2b_test

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/conformance/hostedtest"
	"github.com/berthdev/berth/conformance/providertest"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/e2b"
	"github.com/berthdev/berth/providers/e2b/e2bfake"
)

func TestMain(m *testing.M) {
	testkit.VerifyTestMain(m)
}

const (
	headless = "berth-headless"
	desktop  = "berth-desktop"
)

// newFake starts a fake E2B and a provider that talks to it.
func newFake(t providertest.T, log *slog.Logger) (*e2bfake.Fake, *e2b.Provider, string) {
	key := fmt.Sprintf("e2b_%d_secret", time.Now().UnixNano())
	f := e2bfake.New(t, key, headless, desktop)
	tr := providertest.IdleClosed(t, f.Transport())
	p, err := e2b.New(e2b.Options{
		APIURL: f.URL, Domain: e2bfake.Domain, Scheme: "http",
		HeadlessTemplate: headless, DesktopTemplate: desktop,
		Transport: tr, Logger: log,
	})
	if err != nil {
		t.Fatalf("e2b.New: %v", err)
	}
	return f, p, key
}

// TestConformance runs the provider suite against the fake E2B API.
func TestConformance(t *testing.T) { providertest.Run(t, harness) }

// harness builds the provider on a fresh fake E2B API for each scenario of the
// conformance suite and for the cycle benchmark.
var harness = providertest.Harness{
	ID: e2b.ID,
	New: func(t providertest.T, log *slog.Logger) providertest.Target {
		f, p, key := newFake(t, log)
		return providertest.Target{
			Provider:    p,
			Credentials: map[string]string{e2b.CredAPIKey: key},
			Faults:      f.Server,
			Exists:      providertest.ExistsFunc(f.Exists),
		}
	},
}

func testSpec(key string) providers.Spec {
	s := providertest.HostedSpec(map[string]string{e2b.CredAPIKey: key})
	s.Image, s.Lease = providers.ImageHeadless, 5*time.Minute
	s.Env = map[string]string{"TURN_PUBLIC_HOST": "turn.example", "HTTP_PROXY": "http://c1:pw@172.17.0.1:3128", "https_proxy": "http://c1:pw@172.17.0.1:3128"}
	return s
}

// TestCreateRequest checks what a create sends: the template, the lease
// plus grace as E2B's timeout, Berth's labels as metadata, the computer's
// variables (and never the key), closed port URLs, and secure and
// allow_internet_access, as E2B's SDKs send them.
func TestCreateRequest(t *testing.T) {
	f, p, key := newFake(t, nil)
	spec := testSpec(key)
	spec.Image = providers.ImageDesktop
	m, s := providertest.CreateOne(t, p, spec, f.Sandboxes)
	if s.TemplateID != desktop {
		t.Errorf("template %q, want %q", s.TemplateID, desktop)
	}
	if want := int((5*time.Minute + e2b.Grace) / time.Second); s.Timeout != want {
		t.Errorf("timeout %d, want the lease plus grace, %d", s.Timeout, want)
	}
	providertest.CheckCreated(t, spec, s.Metadata, s.EnvVars)
	if s.Public {
		t.Error("port URLs are public: want allowPublicTraffic false")
	}
	if s.Secure == nil || !*s.Secure || s.AllowInternetAccess == nil || !*s.AllowInternetAccess {
		t.Errorf("secure %v, allow_internet_access %v: want both sent true", s.Secure, s.AllowInternetAccess)
	}
	if m.ID != s.ID || m.Endpoint != "http://7070-"+s.ID+"."+e2bfake.Domain || m.Header.Get(e2b.TrafficTokenHeader) != s.Token {
		t.Errorf("machine %+v", m)
	}
	for _, r := range f.Requests() {
		if r.Header.Get("X-API-Key") != key {
			t.Errorf("%s %s without the X-API-Key header", r.Method, r.Path)
		}
	}

	// computerd answers through the port URL with the token only.
	c := computerd.NewClient(m.Endpoint, "tok", computerd.WithTransport(p.Transport(providers.Machine{ID: m.ID}, spec.Credentials)))
	if _, err := c.Processes(t.Context()); err != nil {
		t.Errorf("computerd through the port URL, token fetched by connect: %v", err)
	}
	bare := computerd.NewClient(m.Endpoint, "tok", computerd.WithTransport(f.Transport()))
	if _, err := bare.Processes(t.Context()); err == nil {
		t.Error("the port URL answered without the traffic token")
	}
	providertest.DestroyTwice(t, p, spec.Credentials, m.ID)
}

// TestErrors checks the mapping of the API's bad days.
func TestErrors(t *testing.T) {
	f, p, key := newFake(t, nil)
	f.EchoHeaders(true) // the key must stay out of errors even so
	spec := testSpec(key)
	providertest.CheckStatuses(t, f, func() error { _, err := p.Create(t.Context(), spec); return err }, key)
	f.RefuseCredentials(true)
	_, err := p.Create(t.Context(), spec)
	if !errors.Is(err, providers.ErrBadCredentials) || strings.Contains(err.Error(), key) {
		t.Errorf("refused key: %v, want ErrBadCredentials without the key", err)
	}
	f.RefuseCredentials(false)
	spec.Credentials = map[string]string{e2b.CredAPIKey: "wrong"}
	if _, err := p.Create(t.Context(), spec); !errors.Is(err, providers.ErrBadCredentials) {
		t.Errorf("wrong key: %v", err)
	}
	spec.Credentials = map[string]string{e2b.CredAPIKey: key}
	if err := p.Destroy(t.Context(), "x"); !errors.Is(err, providers.ErrBadCredentials) {
		t.Errorf("destroy without credentials in the context: %v", err)
	}
	f.Close()
	if _, err := p.Create(t.Context(), spec); !errors.Is(err, providers.ErrUnavailable) {
		t.Errorf("API down: %v, want ErrUnavailable", err)
	}
}

// TestCreateRefused maps what E2B answers to a create it refuses: a
// template it does not know (404 saying so) is a missing image naming it;
// a 400 is a definite refusal carrying the API's message, not a missing
// image; a 404 that is not about the template (an API URL that is not
// E2B's) is neither a missing image nor a machine gone.
func TestCreateRefused(t *testing.T) {
	f, _, key := newFake(t, nil)
	provider := func(apiURL, template string) *e2b.Provider {
		p, err := e2b.New(e2b.Options{APIURL: apiURL, HeadlessTemplate: template, DesktopTemplate: template, Transport: f.Transport()})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	spec := testSpec(key)

	for _, tpl := range []string{"missing", "berth-headless:v2"} {
		_, err := provider(f.URL, tpl).Create(t.Context(), spec)
		if !errors.Is(err, providers.ErrBadImage) || !strings.Contains(err.Error(), tpl) || errors.Is(err, providers.ErrRefused) {
			t.Errorf("template %q unknown: %v, want ErrBadImage naming it", tpl, err)
		}
	}

	long := spec
	long.Lease = 2 * time.Hour // above the base tier's hour
	_, err := provider(f.URL, headless).Create(t.Context(), long)
	var re *providers.RefusedError
	if !errors.As(err, &re) || errors.Is(err, providers.ErrBadImage) || !strings.Contains(re.Message, "1 hours") || strings.Contains(err.Error(), key) {
		t.Errorf("timeout above the tier: %v, want a refusal with the API's message", err)
	}
	_, err = provider(f.URL, "Not A Template!").Create(t.Context(), spec)
	if !errors.As(err, &re) || errors.Is(err, providers.ErrBadImage) || !strings.Contains(re.Message, "template reference") {
		t.Errorf("template reference not valid: %v, want a refusal with the API's message", err)
	}

	_, err = provider(f.URL+"/v1", headless).Create(t.Context(), spec)
	if err == nil || !strings.Contains(err.Error(), "404") || !strings.Contains(err.Error(), "no matching operation") {
		t.Fatalf("no such route: %v, want the 404 and the API's message", err)
	}
	for _, kind := range []error{providers.ErrBadImage, providers.ErrNotFound, providers.ErrRefused, providers.ErrBadCredentials} {
		if errors.Is(err, kind) {
			t.Errorf("no such route: %v is %v", err, kind)
		}
	}
	if n := len(f.Sandboxes()); n != 0 {
		t.Errorf("%d sandboxes made by refused creates", n)
	}
}

// TestListPages lists across pages and only Berth's sandboxes.
func TestListPages(t *testing.T) {
	f, p, key := newFake(t, nil)
	f.SetPageSize(2)
	for i := 0; i < 5; i++ {
		spec := testSpec(key)
		spec.ComputerID = fmt.Sprintf("c%d", i)
		spec.AttemptID = fmt.Sprintf("a_%d", i)
		if _, err := p.Create(t.Context(), spec); err != nil {
			t.Fatal(err)
		}
	}
	ms, err := p.List(providers.WithCredentials(t.Context(), map[string]string{e2b.CredAPIKey: key}))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, m := range ms {
		seen[m.Labels[providers.LabelAttempt]] = true
	}
	if len(ms) != 5 || len(seen) != 5 {
		t.Errorf("listed %d machines (%d attempts), want 5", len(ms), len(seen))
	}
	if ms, err := p.List(t.Context()); err != nil || len(ms) != 0 {
		t.Errorf("list without credentials: %v %v, want nothing", ms, err)
	}
}

func TestCheckCredentials(t *testing.T) {
	_, p, _ := newFake(t, nil)
	if err := p.CheckCredentials(map[string]string{"apiKey": "k"}); err != nil {
		t.Error(err)
	}
	if err := p.CheckCredentials(map[string]string{}); err == nil || !strings.Contains(err.Error(), "apiKey") {
		t.Errorf("missing key: %v", err)
	}
	if err := p.CheckCredentials(map[string]string{"apiKey": "k", "token": "t"}); err == nil || !strings.Contains(err.Error(), "token") {
		t.Errorf("unknown credential: %v", err)
	}
}

func TestRegistered(t *testing.T) {
	p, err := providers.New(e2b.ID, providers.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.(providers.CredentialChecker); !ok {
		t.Error("not a CredentialChecker")
	}
	hostedtest.RequireDescribed(t, e2b.ID, e2b.CredAPIKey, true)
	if _, err := providers.New(e2b.ID, providers.Config{Getenv: func(k string) string {
		if k == "E2B_API_URL" {
			return "ftp://x"
		}
		return ""
	}}); err == nil || !strings.Contains(err.Error(), "ftp://x") || !strings.Contains(err.Error(), "E2B_API_URL") {
		t.Errorf("bad API URL: %v", err)
	}
}

// TestPersistence runs the persistent computer scenario on the fake E2B:
// the home archived at stop and restored at start through E2B's way to
// computerd.
func TestPersistence(t *testing.T) { providertest.Persistence(t, harness) }
