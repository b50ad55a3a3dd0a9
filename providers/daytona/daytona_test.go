package daytona_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/conformance/hostedtest"
	"github.com/berthdev/berth/conformance/providertest"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/daytona"
	"github.com/berthdev/berth/providers/daytona/daytonafake"
)

func TestMain(m *testing.M) {
	testkit.VerifyTestMain(m)
}

const (
	headless = "berth-headless:1"
	desktop  = "berth-desktop:1"
	org      = "org-berth"
)

func newFake(t providertest.T, log *slog.Logger) (*daytonafake.Fake, *daytona.Daytona, map[string]string) {
	key := fmt.Sprintf("dtn_%d_secret", time.Now().UnixNano())
	f := daytonafake.New(t, key,
		daytonafake.Snapshot{Name: headless, Entrypoint: imageEntrypoint(t, "headless")},
		daytonafake.Snapshot{Name: desktop, Entrypoint: imageEntrypoint(t, "desktop")})
	f.Organization = org
	tr := providertest.IdleClosed(t, f.Transport())
	p, err := daytona.New(daytona.Options{
		APIURL: f.URL, HeadlessSnapshot: headless, DesktopSnapshot: desktop,
		Transport: tr, PollInterval: time.Millisecond, Logger: log,
	})
	if err != nil {
		t.Fatalf("daytona.New: %v", err)
	}
	return f, p, map[string]string{daytona.CredAPIKey: key, daytona.CredOrganization: org}
}

// imageEntrypoint reads the ENTRYPOINT (exec form) of one of Berth's image
// Dockerfiles: what a Daytona snapshot made from that image runs.
func imageEntrypoint(t providertest.T, image string) []string {
	b, err := os.ReadFile(filepath.Join("..", "..", "images", image, "Dockerfile"))
	if err != nil {
		t.Fatalf("read the %s image's Dockerfile: %v", image, err)
	}
	var ep []string
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "ENTRYPOINT "); ok {
			ep = nil
			if err := json.Unmarshal([]byte(rest), &ep); err != nil {
				t.Fatalf("the %s image's ENTRYPOINT %s is not in exec form: %v", image, rest, err)
			}
		}
	}
	return ep
}

// TestConformance runs the provider suite against the fake Daytona API.
func TestConformance(t *testing.T) { providertest.Run(t, harness) }

// harness builds the provider on a fresh fake Daytona API for each scenario of the
// conformance suite and for the cycle benchmark.
var harness = providertest.Harness{
	ID: daytona.ID,
	New: func(t providertest.T, log *slog.Logger) providertest.Target {
		f, p, creds := newFake(t, log)
		return providertest.Target{
			Provider: p, Credentials: creds, Faults: f.Server,
			Secrets: []string{creds[daytona.CredAPIKey]},
			Exists:  providertest.ExistsFunc(f.Exists),
		}
	},
}

func spec(creds map[string]string) providers.Spec {
	s := providertest.HostedSpec(creds)
	s.Image, s.Lease = providers.ImageHeadless, 10*time.Minute
	s.Env = map[string]string{"A": "b", "HTTPS_PROXY": "http://c1:pw@172.17.0.1:3128"}
	return s
}

// TestCreateRequest checks the sandbox a create asks for and the preview
// path to computerd.
func TestCreateRequest(t *testing.T) {
	f, p, creds := newFake(t, nil)
	s := spec(creds)
	s.Image = providers.ImageDesktop
	m, sb := providertest.CreateOne(t, p, s, f.Sandboxes)
	if sb.Snapshot != desktop || sb.Public || sb.State != "started" {
		t.Errorf("sandbox %+v: want private, started, from %s", sb, desktop)
	}
	if sb.AutoStopInterval != 11 || sb.AutoDelete == nil || *sb.AutoDelete != 0 {
		t.Errorf("autoStopInterval %d autoDelete %v: want 11 minutes (lease plus grace) and delete on stop", sb.AutoStopInterval, sb.AutoDelete)
	}
	providertest.CheckCreated(t, s, sb.Labels, sb.Env)
	if m.ID != sb.ID || m.Header.Get(daytona.PreviewTokenHeader) != sb.Token || !strings.HasPrefix(m.Endpoint, "http://7070-"+sb.ID) {
		t.Errorf("machine %+v", m)
	}
	c := computerd.NewClient(m.Endpoint, "tok", computerd.WithTransport(f.Transport()), computerd.WithHeader(m.Header))
	if _, err := c.Processes(t.Context()); err != nil {
		t.Errorf("computerd through the preview URL: %v", err)
	}
	for _, r := range f.Requests() {
		if r.Header.Get("Authorization") != "Bearer "+creds[daytona.CredAPIKey] || r.Header.Get(daytona.OrganizationHeader) != org {
			t.Errorf("%s %s without the key or the organization header", r.Method, r.Path)
		}
	}
	providertest.DestroyTwice(t, p, creds, m.ID)
	if len(f.Sandboxes()) != 0 {
		t.Error("sandbox left after Destroy")
	}
}

func TestErrors(t *testing.T) {
	f, p, creds := newFake(t, nil)
	f.EchoHeaders(true) // the key must stay out of errors even so
	s := spec(creds)
	providertest.CheckStatuses(t, f, func() error { _, err := p.Create(t.Context(), s); return err }, creds[daytona.CredAPIKey])
	s.Credentials = map[string]string{daytona.CredAPIKey: creds[daytona.CredAPIKey], daytona.CredOrganization: "other"}
	if _, err := p.Create(t.Context(), s); !errors.Is(err, providers.ErrBadCredentials) {
		t.Errorf("wrong organization: %v", err)
	}
	bad, _ := daytona.New(daytona.Options{APIURL: f.URL, HeadlessSnapshot: "nope", DesktopSnapshot: "nope", Transport: f.Transport()})
	s.Credentials = creds
	if _, err := bad.Create(t.Context(), s); !errors.Is(err, providers.ErrBadImage) || !strings.Contains(err.Error(), "nope") {
		t.Errorf("unknown snapshot: %v", err)
	}
	// A 400 that does not say a snapshot is missing is the provider
	// refusing the request, with its message.
	f.FailNext(400)
	if _, err := p.Create(t.Context(), s); !errors.Is(err, providers.ErrRefused) || errors.Is(err, providers.ErrBadImage) || !strings.Contains(err.Error(), "Bad Request") {
		t.Errorf("a 400 on create: %v, want a refusal with Daytona's message", err)
	}
	f.FailNextDeletes(1)
	m, err := p.Create(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	ctx := providers.WithCredentials(t.Context(), creds)
	if err := p.Destroy(ctx, m.ID); !errors.Is(err, providers.ErrUnavailable) {
		t.Errorf("failing delete: %v", err)
	}
	if err := p.Destroy(ctx, m.ID); err != nil {
		t.Errorf("second delete: %v", err)
	}
}

// TestLeftoverOfTheSameComputer starts a computer while the sandbox of
// its earlier session is still there: the new sandbox has a name of its
// own, so Daytona does not refuse it as a duplicate.
func TestLeftoverOfTheSameComputer(t *testing.T) {
	f, p, creds := newFake(t, nil)
	first := spec(creds)
	if _, err := p.Create(t.Context(), first); err != nil {
		t.Fatal(err)
	}
	second := spec(creds)
	second.SessionID, second.AttemptID = "s_c1b", "a_2"
	if _, err := p.Create(t.Context(), second); err != nil {
		t.Fatalf("second session of the same computer, the first's sandbox still there: %v", err)
	}
	if sbs := f.Sandboxes(); len(sbs) != 2 || sbs[0].Name == sbs[1].Name {
		t.Errorf("sandboxes %+v: want two with names of their own", sbs)
	}
}

// TestStartFails: a sandbox that ends in "error" instead of starting is
// removed, and the failure is definite, with Daytona's reason.
func TestStartFails(t *testing.T) {
	f, p, creds := newFake(t, nil)
	f.FailNextStart("no runner could pull the snapshot")
	_, err := p.Create(t.Context(), spec(creds))
	if !errors.Is(err, providers.ErrRefused) || !errors.Is(err, providers.ErrUnavailable) || !strings.Contains(err.Error(), "no runner could pull") {
		t.Errorf("failed start: %v, want a definite outage with the reason", err)
	}
	if sbs := f.Sandboxes(); len(sbs) != 0 {
		t.Errorf("sandboxes left: %+v", sbs)
	}
}

// TestSnapshotWithoutEntrypoint: Daytona runs a snapshot's entrypoint or
// its image's ENTRYPOINT, never the image's CMD, so a snapshot of an image
// that starts computerd only through CMD makes a sandbox whose computerd
// never answers; Berth's images start it through ENTRYPOINT.
func TestSnapshotWithoutEntrypoint(t *testing.T) {
	for _, image := range []string{"headless", "desktop"} {
		if ep := imageEntrypoint(t, image); len(ep) == 0 {
			t.Errorf("the %s image has no ENTRYPOINT: a Daytona snapshot of it would not start computerd", image)
		}
	}
	key := "dtn_cmd_only_secret"
	f := daytonafake.New(t, key, daytonafake.Snapshot{Name: headless}) // an image with only a CMD
	tr := providertest.IdleClosed(t, f.Transport())
	p, err := daytona.New(daytona.Options{APIURL: f.URL, HeadlessSnapshot: headless, DesktopSnapshot: desktop, Transport: tr, PollInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s := spec(map[string]string{daytona.CredAPIKey: key})
	m, err := p.Create(t.Context(), s)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	c := computerd.NewClient(m.Endpoint, "tok", computerd.WithTransport(p.Transport(m, s.Credentials)))
	if _, err := c.Health(t.Context()); err == nil {
		t.Fatal("computerd answered in a sandbox whose snapshot has no entrypoint")
	}
}

func TestListPages(t *testing.T) {
	f, p, creds := newFake(t, nil)
	f.SetPageSize(2)
	for i := 0; i < 5; i++ {
		s := spec(creds)
		s.ComputerID, s.AttemptID = fmt.Sprintf("c%d", i), fmt.Sprintf("a%d", i)
		if _, err := p.Create(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
	ms, err := p.List(providers.WithCredentials(t.Context(), creds))
	if err != nil || len(ms) != 5 {
		t.Fatalf("list: %d machines, %v; want 5", len(ms), err)
	}
	for _, m := range ms {
		if m.Endpoint == "" || m.Header.Get(daytona.PreviewTokenHeader) == "" {
			t.Errorf("listed machine %s without its preview URL and token", m.ID)
		}
	}
}

func TestRegistered(t *testing.T) {
	p, err := providers.New(daytona.ID, providers.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cc := p.(providers.CredentialChecker)
	if err := cc.CheckCredentials(map[string]string{"organizationId": "o"}); err == nil || !strings.Contains(err.Error(), "apiKey") {
		t.Errorf("missing apiKey: %v", err)
	}
	if err := cc.CheckCredentials(map[string]string{"apiKey": "k", "org": "o"}); err == nil || !strings.Contains(err.Error(), `"org"`) {
		t.Errorf("unknown credential: %v", err)
	}
	hostedtest.RequireDescribed(t, daytona.ID, daytona.CredAPIKey, true)
}

// TestPersistence runs the persistent computer scenario on the fake:
// the home archived at stop and restored at start through the provider's
// way to computerd.
func TestPersistence(t *testing.T) { providertest.Persistence(t, harness) }
