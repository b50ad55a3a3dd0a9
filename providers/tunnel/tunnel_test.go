package tunnel

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/httpjson"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers"
)

func TestMain(m *testing.M) {
	testkit.VerifyTestMain(m)
}

func TestRegistered(t *testing.T) {
	p, err := providers.New(ID, providers.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.(interface{ CheckCredentials(map[string]string) error }); !ok {
		t.Error("tunnel provider does not check credentials")
	}
}

func TestCheckCredentials(t *testing.T) {
	p := New(Options{})
	for _, c := range []struct {
		creds map[string]string
		want  string // in the error; empty: valid
	}{
		{map[string]string{"url": "https://x.trycloudflare.com", "apiKey": "k"}, ""},
		{map[string]string{"url": "http://127.0.0.1:8080/", "apiKey": "k"}, ""},
		{map[string]string{"apiKey": "k"}, "url is missing"},
		{map[string]string{"url": "ftp://x", "apiKey": "k"}, "url"},
		{map[string]string{"url": "x.trycloudflare.com", "apiKey": "k"}, "url"},
		{map[string]string{"url": "https://x"}, "apiKey is missing"},
		{map[string]string{"url": "https://x", "apiKey": "  "}, "apiKey is missing"},
		{map[string]string{"url": "https://x", "apiKey": "k", "token": "t"}, `"token"`},
	} {
		err := p.CheckCredentials(c.creds)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v, want valid", c.creds, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: %v, want an error about %s", c.creds, err, c.want)
		}
	}
}

// fakeRunner answers /healthz to anyone and the rest only to key: the
// runner API with one computer at a time, and computerd's processes. It
// records the Authorization headers computerd got.
type fakeRunner struct {
	mu      sync.Mutex
	auths   []string
	machine int               // the current computer's number
	claim   map[string]string // nil when free
	env     map[string]string
}

func newFakeRunner(t *testing.T, key string) (*httptest.Server, *fakeRunner) {
	f := &fakeRunner{machine: 1}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			w.Write([]byte(`{"ok":true}`))
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if !strings.HasPrefix(r.URL.Path, RunnerPath) {
			f.auths = append(f.auths, r.Header.Get("Authorization"))
		}
		if r.Header.Get("Authorization") != "Bearer "+key {
			httpjson.WriteError(w, http.StatusUnauthorized, "unauthorized", "bad token")
			return
		}
		name := fmt.Sprintf("m%d", f.machine)
		switch r.URL.Path {
		case RunnerPath:
			httpjson.Write(w, http.StatusOK, RunnerState{Machine: name, Claimed: f.claim != nil, Labels: f.claim})
		case ClaimPath:
			var in ClaimRequest
			if err := httpjson.Decode(w, r, MaxRunnerBytes, &in); err != nil {
				httpjson.WriteError(w, http.StatusBadRequest, "bad_request", err.Error())
				return
			}
			if f.claim != nil && f.claim[providers.LabelAttempt] != in.Labels[providers.LabelAttempt] {
				httpjson.WriteError(w, http.StatusConflict, CodeInUse, "in use")
				return
			}
			f.claim, f.env = in.Labels, in.Env
			httpjson.Write(w, http.StatusOK, ClaimResult{Machine: name})
		case ResetPath:
			var in ResetRequest
			if err := httpjson.Decode(w, r, MaxRunnerBytes, &in); err != nil {
				httpjson.WriteError(w, http.StatusBadRequest, "bad_request", err.Error())
				return
			}
			if in.Machine != name {
				httpjson.Write(w, http.StatusOK, ResetResult{Gone: true})
				return
			}
			f.machine++
			f.claim = nil
			httpjson.Write(w, http.StatusOK, ResetResult{})
		default:
			httpjson.Write(w, http.StatusOK, []any{})
		}
	}))
	t.Cleanup(srv.Close)
	return srv, f
}

func TestCreate(t *testing.T) {
	srv, f := newFakeRunner(t, "right")
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	p := New(Options{Transport: tr})
	spec := providers.Spec{ComputerID: "c1", AttemptID: "a1", SessionID: "s1", TokenHash: "ignored", Env: map[string]string{"A": "1"},
		Credentials: map[string]string{"url": srv.URL + "/", "apiKey": "right"}}
	m, err := p.Create(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if m.Endpoint != srv.URL || m.ID != "m1" {
		t.Errorf("machine = %+v, want the runner's m1 at %s", m, srv.URL)
	}
	if len(m.Header) != 0 {
		t.Errorf("machine header %v: the apiKey must not be kept with the machine", m.Header)
	}
	if f.claim[providers.LabelAttempt] != "a1" || f.env["A"] != "1" {
		t.Errorf("claim labels %v env %v, want the session's", f.claim, f.env)
	}
	// The same attempt again is the same claim; another is refused.
	if m2, err := p.Create(t.Context(), spec); err != nil || m2.ID != m.ID {
		t.Errorf("the same claim again: %+v %v", m2, err)
	}
	other := spec
	other.AttemptID = "a2"
	var re *providers.RefusedError
	if _, err := p.Create(t.Context(), other); !errors.As(err, &re) || re.Code != CodeInUse || re.Status != http.StatusConflict {
		t.Errorf("a second session's claim: %v, want a refusal %s", err, CodeInUse)
	}
	creds := spec.Credentials
	cctx := providers.WithCredentials(t.Context(), creds)
	if ms, err := p.List(cctx); err != nil || len(ms) != 1 || ms[0].ID != "m1" || ms[0].Labels[providers.LabelAttempt] != "a1" {
		t.Errorf("List = %+v %v, want m1 with the claim's labels", ms, err)
	}

	// The supervisor's client presents its own token; the transport
	// replaces it with the apiKey.
	f.auths = nil
	c := computerd.NewClient(m.Endpoint, "derived", computerd.WithTransport(p.Transport(m, creds)))
	if _, err := c.Processes(t.Context()); err != nil {
		t.Fatalf("through Transport: %v", err)
	}
	if len(f.auths) != 1 || f.auths[0] != "Bearer right" {
		t.Errorf("Authorization sent = %q, want the apiKey only", f.auths)
	}

	if err := p.Destroy(t.Context(), m.ID); err == nil {
		t.Error("Destroy without the connection's credentials succeeded")
	}
	if err := p.Destroy(cctx, m.ID); err != nil {
		t.Errorf("Destroy = %v", err)
	}
	if f.machine != 2 || f.claim != nil {
		t.Errorf("after Destroy: machine %d claim %v, want a fresh unclaimed m2", f.machine, f.claim)
	}
	if err := p.Destroy(cctx, m.ID); err != nil {
		t.Errorf("Destroy of a machine already gone = %v, want nil", err)
	}
	if ms, err := p.List(cctx); err != nil || len(ms) != 0 {
		t.Errorf("List after Destroy = %+v %v, want nothing", ms, err)
	}
	if _, err := p.Create(t.Context(), other); err != nil {
		t.Errorf("claim after the reset: %v", err)
	}

	bad := providers.WithCredentials(t.Context(), map[string]string{"url": srv.URL, "apiKey": "wrong"})
	if err := p.Destroy(bad, "m2"); !errors.Is(err, providers.ErrBadCredentials) {
		t.Errorf("Destroy with a wrong apiKey: %v, want ErrBadCredentials", err)
	}
	spec.Credentials = map[string]string{"url": srv.URL, "apiKey": "wrong"}
	if _, err := p.Create(t.Context(), spec); !errors.Is(err, providers.ErrBadCredentials) {
		t.Errorf("wrong apiKey: %v, want ErrBadCredentials", err)
	}
	spec.Credentials = map[string]string{"url": srv.URL}
	if _, err := p.Create(t.Context(), spec); !errors.Is(err, providers.ErrBadCredentials) {
		t.Errorf("missing apiKey: %v, want ErrBadCredentials", err)
	}
}

// TestOversizeAnswer: a runner's answer is read through a limit.
func TestOversizeAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			w.Write([]byte(`{"ok":true}`))
			return
		}
		if r.URL.Path == RunnerPath {
			w.Write([]byte(`{"claimed":false}`))
			return
		}
		w.Write([]byte(`{"machine":"` + strings.Repeat("x", 2*MaxRunnerBytes) + `"}`))
	}))
	defer srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	_, err := New(Options{Transport: tr}).Create(t.Context(), providers.Spec{ComputerID: "c1", AttemptID: "a1",
		Credentials: map[string]string{"url": srv.URL, "apiKey": "k"}})
	if !errors.Is(err, providers.ErrUnavailable) {
		t.Errorf("oversize claim answer: %v, want ErrUnavailable", err)
	}
}

// TestOldRunner: a runner without the runner API (its computerd answers
// 404) is refused before any claim, with a message that says to upgrade
// it.
func TestOldRunner(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			w.Write([]byte(`{"ok":true}`))
			return
		}
		httpjson.WriteError(w, http.StatusNotFound, "not_found", "no route")
	}))
	defer srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	_, err := New(Options{Transport: tr}).Create(t.Context(), providers.Spec{ComputerID: "c1", AttemptID: "a1",
		Credentials: map[string]string{"url": srv.URL, "apiKey": "k"}})
	if !errors.Is(err, providers.ErrRefused) || !strings.Contains(err.Error(), "newer") {
		t.Errorf("old runner: %v, want a refusal asking for a newer runner", err)
	}
}

func TestCreateUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	u := srv.URL
	srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	_, err := New(Options{Transport: tr}).Create(t.Context(), providers.Spec{ComputerID: "c1",
		Credentials: map[string]string{"url": u, "apiKey": "k"}})
	var re *providers.RefusedError
	if !errors.As(err, &re) || re.Status != http.StatusServiceUnavailable {
		t.Errorf("unreachable runner: %v, want a definite 503 refusal (nothing was claimed)", err)
	}
}
