package hosted

import (
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/providers"
)

func TestAPIURL(t *testing.T) {
	if u, err := APIURL("X_API_URL", "https://api.example/v1/"); err != nil || u != "https://api.example/v1" {
		t.Errorf("https: %q %v", u, err)
	}
	for _, bad := range []string{"", "ftp://x", "api.example", "http://", "http://%zz"} {
		if _, err := APIURL("X_API_URL", bad); err == nil || !strings.Contains(err.Error(), "X_API_URL") {
			t.Errorf("%q: %v, want an error naming the setting", bad, err)
		}
	}
}

func TestEnvAndTimeout(t *testing.T) {
	spec := providers.Spec{ComputerID: "c1", TokenHash: "h", Credentials: map[string]string{"apiKey": "k"},
		Env: map[string]string{"A": "b", "HTTP_PROXY": "http://p", "no_proxy": "x"}}
	env := Env(spec)
	if env["A"] != "b" || env[computerd.EnvTokenHash] != "h" || env[computerd.EnvComputerID] != "c1" || len(env) != 3 {
		t.Errorf("env %v: want A, the token hash and the computer id only", env)
	}
	if spec.Env[computerd.EnvTokenHash] != "" {
		t.Error("Env changed the spec's map")
	}
	if got := Timeout(spec, time.Minute); got != DefaultLease+time.Minute {
		t.Errorf("timeout without a lease: %s", got)
	}
	spec.Lease = 5 * time.Minute
	if got := Timeout(spec, time.Minute); got != 6*time.Minute {
		t.Errorf("timeout: %s", got)
	}
}

func TestCredentials(t *testing.T) {
	cs := Credentials{Provider: "daytona", List: []Credential{
		{Name: "apiKey", Want: "a Daytona API key"}, {Name: "organizationId", Optional: true}}}
	if err := cs.Check(map[string]string{"apiKey": "k"}); err != nil {
		t.Error(err)
	}
	if err := cs.Check(map[string]string{"apiKey": "k", "organizationId": "o"}); err != nil {
		t.Error(err)
	}
	for _, c := range []struct {
		creds map[string]string
		want  []string
	}{
		{map[string]string{}, []string{"apiKey is missing", "a Daytona API key"}},
		{map[string]string{"apiKey": " "}, []string{"apiKey is missing"}},
		{map[string]string{"apiKey": "k", "org": "o"}, []string{`"org" is not a daytona credential`, `want "apiKey" and optionally "organizationId"`}},
	} {
		err := cs.Check(c.creds)
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%v: %v, want %q", c.creds, err, w)
			}
		}
	}
	two := Credentials{Provider: "modal", List: []Credential{{Name: "tokenId", Want: "a token id"}, {Name: "tokenSecret", Want: "its secret"}}}
	if err := two.Check(map[string]string{"x": "1"}); err == nil || !strings.Contains(err.Error(), `want "tokenId" and "tokenSecret"`) {
		t.Errorf("unknown: %v", err)
	}
	if err := two.Check(map[string]string{"tokenId": "ak"}); err == nil || !strings.Contains(err.Error(), "tokenSecret is missing: want its secret") {
		t.Errorf("missing secret: %v", err)
	}
}

func TestMessage(t *testing.T) {
	for raw, want := range map[string]string{
		`{"code":404,"message":"template 'x' not found"}`: "template 'x' not found",
		`{"code":"unavailable"}`:                          `{"code":"unavailable"}`,
		"  upstream connect error \n":                     "upstream connect error",
		strings.Repeat("x", 300):                          strings.Repeat("x", 200),
	} {
		if got := Message([]byte(raw)); got != want {
			t.Errorf("Message(%q) = %q, want %q", raw, got, want)
		}
	}
}
