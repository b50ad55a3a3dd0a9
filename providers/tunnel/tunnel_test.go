package tunnel

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/berthdev/berth/computerd"
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

// fakeComputerd answers /healthz to anyone and the rest only to key, and
// records the Authorization headers it got.
func fakeComputerd(t *testing.T, key string) (*httptest.Server, *[]string) {
	var auths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			w.Write([]byte(`{"ok":true}`))
			return
		}
		auths = append(auths, r.Header.Get("Authorization"))
		if r.Header.Get("Authorization") != "Bearer "+key {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error":{"code":"unauthorized","message":"bad token"}}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`[]`))
	}))
	t.Cleanup(srv.Close)
	return srv, &auths
}

func TestCreate(t *testing.T) {
	srv, auths := fakeComputerd(t, "right")
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	p := New(Options{Transport: tr})
	spec := providers.Spec{ComputerID: "c1", TokenHash: "ignored", Env: map[string]string{"A": "ignored"},
		Credentials: map[string]string{"url": srv.URL + "/", "apiKey": "right"}}
	m, err := p.Create(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if m.Endpoint != srv.URL || m.ID != MachineID(srv.URL) || !strings.HasPrefix(m.ID, "tunnel-") {
		t.Errorf("machine = %+v", m)
	}
	if len(m.Header) != 0 {
		t.Errorf("machine header %v: the apiKey must not be kept with the machine", m.Header)
	}
	creds := spec.Credentials

	// The supervisor's client presents its own token; the transport
	// replaces it with the apiKey.
	*auths = nil
	c := computerd.NewClient(m.Endpoint, "derived", computerd.WithTransport(p.Transport(m, creds)))
	if _, err := c.Processes(t.Context()); err != nil {
		t.Fatalf("through Transport: %v", err)
	}
	if len(*auths) != 1 || (*auths)[0] != "Bearer right" {
		t.Errorf("Authorization sent = %q, want the apiKey only", *auths)
	}
	if err := p.Destroy(t.Context(), m.ID); err != nil {
		t.Errorf("Destroy = %v, want nil", err)
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

func TestCreateUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	u := srv.URL
	srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	_, err := New(Options{Transport: tr}).Create(t.Context(), providers.Spec{ComputerID: "c1",
		Credentials: map[string]string{"url": u, "apiKey": "k"}})
	if !errors.Is(err, providers.ErrUnavailable) {
		t.Errorf("unreachable runner: %v, want ErrUnavailable", err)
	}
}
