package modal_test

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/conformance/hostedtest"
	"github.com/berthdev/berth/conformance/providertest"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/modal"
	"github.com/berthdev/berth/providers/modal/modalfake"
)

func TestMain(m *testing.M) {
	testkit.VerifyTestMain(m)
}

const (
	headless = "im-headless0001"
	desktop  = "im-desktop0001"
)

func newFake(t providertest.T, log *slog.Logger) (*modalfake.Fake, *modal.Modal, map[string]string) {
	n := time.Now().UnixNano()
	creds := map[string]string{modal.CredTokenID: fmt.Sprintf("ak-%d", n), modal.CredTokenSecret: fmt.Sprintf("as-%d-secret", n)}
	f := modalfake.New(t, creds[modal.CredTokenID], creds[modal.CredTokenSecret], headless, desktop)
	tr := providertest.IdleClosed(t, f.Transport())
	p, err := modal.New(modal.Options{ServerURL: f.URL, HeadlessImage: headless, DesktopImage: desktop, Scheme: "http", Transport: tr, Logger: log})
	if err != nil {
		t.Fatalf("modal.New: %v", err)
	}
	t.Cleanup(p.Close)
	return f, p, creds
}

// TestConformance runs the provider suite against the fake Modal API.
func TestConformance(t *testing.T) { providertest.Run(t, harness) }

// harness builds the provider on a fresh fake Modal API for each scenario of the
// conformance suite and for the cycle benchmark.
var harness = providertest.Harness{
	ID: modal.ID,
	New: func(t providertest.T, log *slog.Logger) providertest.Target {
		f, p, creds := newFake(t, log)
		return providertest.Target{
			Provider: p, Credentials: creds, Faults: f,
			Exists: providertest.ExistsFunc(f.Exists),
		}
	},
}

func spec(creds map[string]string) providers.Spec {
	s := providertest.HostedSpec(creds)
	s.Image, s.Lease = providers.ImageDesktop, 2*time.Minute
	s.Env = map[string]string{"A": "b", "NO_PROXY": "", "HTTP_PROXY": "http://c1:pw@172.17.0.1:3128"}
	return s
}

func TestCreateRequest(t *testing.T) {
	f, p, creds := newFake(t, nil)
	s := spec(creds)
	m, sb := providertest.CreateOne(t, p, s, f.Sandboxes)
	if sb.ImageID != desktop || sb.TimeoutSecs != 180 || len(sb.Ports) != 1 || sb.Ports[0] != computerd.Port {
		t.Errorf("sandbox %+v: want image %s, timeout 180 s (lease plus grace), port 7070 open", sb, desktop)
	}
	// A sandbox runs the command it is given, not the image's CMD: the
	// desktop image's is its start script, which starts computerd.
	if !slices.Equal(sb.EntrypointArgs, []string{"desktop-start"}) || !sb.Serving {
		t.Errorf("entrypoint args %q: want the desktop image's CMD, desktop-start", sb.EntrypointArgs)
	}
	providertest.CheckCreated(t, s, sb.Tags, sb.Env)
	c := computerd.NewClient(m.Endpoint, "tok", computerd.WithTransport(p.Transport(m, creds)))
	if _, err := c.Processes(t.Context()); err != nil {
		t.Errorf("computerd through the tunnel: %v", err)
	}
	// Every call went through gRPC, with the SDK's headers and, but for
	// AuthTokenGet, the auth token.
	methods := map[string]bool{}
	for _, c := range f.Calls() {
		methods[strings.TrimPrefix(c.Method, "/"+modal.Service+"/")] = true
		if ct := c.Metadata.Get("content-type"); len(ct) != 1 || !strings.HasPrefix(ct[0], "application/grpc") {
			t.Errorf("%s: content type %q, want application/grpc", c.Method, ct)
		}
		if len(c.Metadata.Get("x-modal-client-type")) == 0 || len(c.Metadata.Get("x-modal-client-version")) == 0 {
			t.Errorf("%s: without the client type and version headers", c.Method)
		}
		if !strings.HasSuffix(c.Method, "/AuthTokenGet") && len(c.Metadata.Get("x-modal-auth-token")) == 0 {
			t.Errorf("%s: without the auth token", c.Method)
		}
	}
	for _, want := range []string{"AuthTokenGet", "AppGetOrCreate", "ImageFromId", "SecretGetOrCreate", "SandboxCreate", "SandboxGetTaskId", "SandboxGetTunnels"} {
		if !methods[want] {
			t.Errorf("no %s call (calls: %v)", want, methods)
		}
	}
	providertest.DestroyTwice(t, p, creds, m.ID)
}

func TestErrors(t *testing.T) {
	f, p, creds := newFake(t, nil)
	f.EchoHeaders(true) // the key must stay out of errors even so
	s := spec(creds)
	if _, err := p.Create(t.Context(), s); err != nil { // caches the app
		t.Fatal(err)
	}
	providertest.CheckStatuses(t, f, func() error { _, err := p.Create(t.Context(), s); return err }, creds[modal.CredTokenSecret])
	bad, _ := modal.New(modal.Options{ServerURL: f.URL, HeadlessImage: "im-missing", Transport: f.Transport()})
	t.Cleanup(bad.Close)
	s.Image = providers.ImageHeadless
	if _, err := bad.Create(t.Context(), s); !errors.Is(err, providers.ErrBadImage) || !strings.Contains(err.Error(), "im-missing") {
		t.Errorf("unknown image: %v", err)
	}
}

// TestBeforeTheSandbox: a failure before SandboxCreate made nothing, so
// it is definite and no session waits for a person; an app removed on
// Modal is made again by the next start.
func TestBeforeTheSandbox(t *testing.T) {
	f, p, creds := newFake(t, nil)
	s := spec(creds)
	f.FailNext(http.StatusServiceUnavailable) // the first call, AuthTokenGet, and its retries
	_, err := p.Create(t.Context(), s)
	if !errors.Is(err, providers.ErrUnavailable) || !errors.Is(err, providers.ErrRefused) {
		t.Errorf("app lookup answered 503: %v, want an outage that is definite", err)
	}
	if _, err := p.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	f.DeleteApp(modal.DefaultApp)
	s.AttemptID = "a_2"
	if _, err := p.Create(t.Context(), s); !errors.Is(err, providers.ErrRefused) {
		t.Errorf("secret of an app that is gone: %v, want a definite failure", err)
	}
	s.AttemptID = "a_3"
	if _, err := p.Create(t.Context(), s); err != nil {
		t.Errorf("start after the app was removed: %v, want the app made again", err)
	}
	if n := len(f.Sandboxes()); n != 2 {
		t.Errorf("%d sandboxes, want 2", n)
	}
}

func TestRegistered(t *testing.T) {
	if _, err := providers.New(modal.ID, providers.Config{}); err == nil || !strings.Contains(err.Error(), modal.SettingHeadlessImage) {
		t.Errorf("without an image: %v, want an error naming %s", err, modal.SettingHeadlessImage)
	}
	p, err := providers.New(modal.ID, providers.Config{Getenv: func(k string) string {
		if k == modal.SettingHeadlessImage {
			return "im-x"
		}
		return ""
	}})
	if err != nil {
		t.Fatal(err)
	}
	cc := p.(providers.CredentialChecker)
	if err := cc.CheckCredentials(map[string]string{"tokenId": "ak"}); err == nil || !strings.Contains(err.Error(), "tokenSecret") {
		t.Errorf("missing secret: %v", err)
	}
	if err := cc.CheckCredentials(map[string]string{"tokenId": "ak", "tokenSecret": "as"}); err != nil {
		t.Error(err)
	}
	d, ok := providers.DescriptionOf(modal.ID)
	if !ok || len(d.Missing(func(string) string { return "" })) != 1 {
		t.Errorf("description %+v: want one required setting", d)
	}
	hostedtest.RequireDescribed(t, modal.ID, modal.SettingHeadlessImage, false)
	hostedtest.RequireDescribed(t, modal.ID, modal.CredTokenSecret, true)
}

// TestListPages: SandboxList answers in batches; List reads them all, as
// Modal's client does, asking for those created before the last one.
func TestListPages(t *testing.T) {
	f, p, creds := newFake(t, nil)
	f.PageSize = 2
	s := spec(creds)
	s.Image = providers.ImageHeadless
	made := map[string]bool{}
	for i := range 7 {
		s.ComputerID, s.AttemptID = fmt.Sprintf("c%d", i), fmt.Sprintf("a_%d", i)
		m, err := p.Create(t.Context(), s)
		if err != nil {
			t.Fatal(err)
		}
		made[m.ID] = true
	}
	ms, err := p.List(providers.WithCredentials(t.Context(), creds))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, m := range ms {
		got[m.ID] = true
	}
	if len(ms) != 7 || len(got) != 7 || !maps.Equal(got, made) {
		t.Errorf("listed %d sandboxes (%d distinct), want the 7 made: %v", len(ms), len(got), ms)
	}
	lists := 0
	for _, c := range f.Calls() {
		if strings.HasSuffix(c.Method, "/SandboxList") {
			lists++
		}
	}
	if lists != 5 { // batches of 2, 2, 2, 1, then an empty one
		t.Errorf("%d SandboxList calls, want 5", lists)
	}
}

// TestPersistence runs the persistent computer scenario on the fake:
// the home archived at stop and restored at start through the provider's
// way to computerd.
func TestPersistence(t *testing.T) { providertest.Persistence(t, harness) }
