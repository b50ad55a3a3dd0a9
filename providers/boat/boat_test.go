package boat

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/conformance/providertest"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers"
)

func TestMain(m *testing.M) {
	testkit.VerifyTestMain(m)
}

func newTest(t testing.TB, f *fakeBoat, log *slog.Logger, image string) *Boat {
	b, err := New(Options{APIURL: f.srv.URL + "/api/v1", HeadlessImage: image, PollInterval: 2 * time.Millisecond, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func spec(key string) providers.Spec {
	return providers.Spec{ComputerID: "c1", SessionID: "s_c1", AttemptID: "a_1", AgentID: "ag", Deployment: "d_1",
		TokenHash: strings.Repeat("cd", 32), Env: map[string]string{"TURN_PUBLIC_HOST": "turn.example"}, Lease: 5 * time.Minute,
		Credentials: map[string]string{CredAPIKey: key}}
}

// TestCreateRequest checks the VM is made with no environment, snapshots
// and monitoring off, auto-stop at the lease and Berth's labels.
func TestCreateRequest(t *testing.T) {
	f := newFakeBoat(t)
	b := newTest(t, f, nil, "")
	m, err := b.Create(t.Context(), spec(f.Key))
	if err != nil {
		t.Fatal(err)
	}
	body := f.lastCreate
	if env, ok := body["env"].(map[string]any); !ok || len(env) != 0 {
		t.Errorf("env %v, want an empty object", body["env"])
	}
	for _, k := range []string{"snapshots", "monitoring"} {
		if v, _ := body[k].(map[string]any); v["enabled"] != false {
			t.Errorf("%s %v, want enabled false", k, body[k])
		}
	}
	if body["autoStopSeconds"] != float64(300) || body["type"] != "small" {
		t.Errorf("autoStopSeconds %v type %v", body["autoStopSeconds"], body["type"])
	}
	if meta, _ := body["metadata"].(map[string]any); meta[providers.LabelAttempt] != "a_1" || meta[providers.LabelManaged] != "true" {
		t.Errorf("metadata %v", body["metadata"])
	}
	if !strings.HasPrefix(m.ID, "bx_") || m.Endpoint == "" {
		t.Errorf("machine %+v", m)
	}
	ctx := providers.WithCredentials(t.Context(), spec(f.Key).Credentials)
	if ms, err := b.List(ctx); err != nil || len(ms) != 1 || ms[0].Endpoint != m.Endpoint {
		t.Errorf("List = %+v, %v", ms, err)
	}
	if err := b.Destroy(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	if err := b.Destroy(ctx, m.ID); err != nil {
		t.Errorf("second destroy: %v", err)
	}
	cmd := DockerRun(spec("k"), "img:1")
	for _, want := range []string{"'--read-only'", "'--cap-drop' 'ALL'", "'--user' '1000:1000'", "'no-new-privileges'", "'BERTH_TOKEN_SHA256=" + strings.Repeat("cd", 32) + "'"} {
		if !strings.Contains(cmd, want) {
			t.Errorf("docker run lacks %s: %s", want, cmd)
		}
	}
	if strings.Contains(cmd, "k'") && strings.Contains(cmd, "apiKey") {
		t.Errorf("the key reached the VM: %s", cmd)
	}
	ps := spec("k")
	ps.Env = map[string]string{"HTTPS_PROXY": "http://c1:secret@172.17.0.1:3128", "http_proxy": "http://c1:secret@172.17.0.1:3128", "TURN_PORT": "3478"}
	if cmd := DockerRun(ps, "img:1"); strings.Contains(cmd, "PROXY") || strings.Contains(cmd, "proxy") || !strings.Contains(cmd, "'TURN_PORT=3478'") {
		t.Errorf("a hosted computer must not get the supervisor's egress proxy, and keeps the rest: %s", cmd)
	}
}

// TestErrors maps Boat's answers.
func TestErrors(t *testing.T) {
	f := newFakeBoat(t)
	b := newTest(t, f, nil, "")
	if _, err := b.Create(t.Context(), spec("wrong-key")); !errors.Is(err, providers.ErrBadCredentials) || strings.Contains(err.Error(), "wrong-key") {
		t.Errorf("bad key: %v", err)
	}
	f.Mu.Lock()
	f.RateLimit = 1
	f.Mu.Unlock()
	if _, err := b.Create(t.Context(), spec(f.Key)); !errors.Is(err, providers.ErrCapacity) {
		t.Errorf("429: %v", err)
	}
	// A request Boat refuses (a sandbox type it does not have) is a
	// definite 422 with Boat's message, not an outage to retry.
	huge, err := New(Options{APIURL: f.srv.URL + "/api/v1", SandboxType: "huge", PollInterval: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, err = huge.Create(t.Context(), spec(f.Key))
	var re *providers.RefusedError
	if !errors.As(err, &re) || re.Status != 422 || !strings.Contains(re.Message, "unknown sandbox type huge") || strings.Contains(re.Message, f.Key) {
		t.Errorf("unknown type: %v, want a 422 refusal with Boat's message", err)
	}
	bad := newTest(t, f, nil, "missing/image:1")
	s := spec(f.Key)
	s.AttemptID = "a_2"
	if _, err := bad.Create(t.Context(), s); !errors.Is(err, providers.ErrBadImage) {
		t.Errorf("missing image: %v", err)
	}
	// A definite failure leaves nothing behind: the supervisor relies on it.
	if ok, _ := f.exists(t.Context(), providers.LabelAttempt, "a_2"); ok {
		t.Errorf("the VM of a create that failed on its image is still there")
	}
	if err := b.CheckCredentials(map[string]string{"token": "x"}); err == nil {
		t.Errorf("CheckCredentials took a foreign key")
	}
	if _, err := New(Options{APIURL: "ftp://x"}); err == nil || !strings.Contains(err.Error(), SettingAPIURL) {
		t.Errorf("bad URL: %v", err)
	}
}

// TestConformance runs the providers' conformance suite against the fake.
func TestConformance(t *testing.T) {
	providertest.Run(t, providertest.Harness{
		ID: ID,
		New: func(pt providertest.T, log *slog.Logger) providertest.Target {
			f := newFakeBoat(pt.(*testing.T))
			return providertest.Target{Provider: newTest(pt.(*testing.T), f, log, ""),
				Credentials: map[string]string{CredAPIKey: f.Key}, Faults: f, Exists: f.exists}
		},
	})
}
