package browsersession

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/providers"
)

// TestTransport answers health from the provider's status and refuses
// everything else with CodeNotAvailable, never echoing the machine's
// headers (the CDP URL's signing key).
func TestTransport(t *testing.T) {
	m := providers.Machine{ID: "s1", Endpoint: "https://api.example/v1/sessions/s1", Header: Header("wss://connect.example?signingKey=sk_secret", "https://live.example/s1")}
	if cdp, live := URLs(m); cdp != "wss://connect.example?signingKey=sk_secret" || live != "https://live.example/s1" {
		t.Fatalf("URLs = %q, %q", cdp, live)
	}
	var down error
	rt := Transport("testprov", func(context.Context) error { return down })
	do := func(method, path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), method, m.Endpoint+path, strings.NewReader(`{"command":"true"}`))
		for k, v := range m.Header {
			req.Header[k] = v
		}
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if strings.Contains(string(raw), "sk_secret") || resp.Header.Get(HeaderCDPURL) != "" {
			t.Errorf("%s %s: the answer carries the CDP URL: %s", method, path, raw)
		}
		return resp.StatusCode, string(raw)
	}
	if code, raw := do("GET", "/healthz"); code != 200 {
		t.Errorf("health: %d %s", code, raw)
	} else {
		var h computerd.Health
		if json.Unmarshal([]byte(raw), &h); h.Status != "ok" || h.Version != "testprov" {
			t.Errorf("health: %s", raw)
		}
	}
	down = errors.New("session is COMPLETED")
	if code, raw := do("GET", "/healthz"); code != 503 || !strings.Contains(raw, "session is COMPLETED") {
		t.Errorf("health of an ended session: %d %s, want 503 with the status", code, raw)
	}
	for _, path := range []string{"/v1/exec", "/v1/files/read", "/v1/screenshot"} {
		if code, raw := do("POST", path); code != 422 || !strings.Contains(raw, CodeNotAvailable) || !strings.Contains(raw, "not available on a browser session") {
			t.Errorf("%s: %d %s, want 422 %s", path, code, raw, CodeNotAvailable)
		}
	}
}

// TestCallRefused checks that a 400 or 422, and an answer Refused picks,
// are refusals carrying the provider's message, while another 403 stays a
// refused key.
func TestCallRefused(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status, _ := strconv.Atoi(r.URL.Query().Get("status"))
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"msg": %q}`, r.URL.Query().Get("msg"))
	}))
	defer srv.Close()
	api, err := NewAPI(APIOptions{Provider: "testprov", Setting: "TEST_API_URL", URL: srv.URL, DefaultURL: "https://api.example",
		KeyName: "apiKey", KeyHeader: "X-Key",
		Message: func(raw []byte) string {
			var e struct{ Msg string }
			json.Unmarshal(raw, &e)
			return e.Msg
		},
		Refused: func(status int, raw []byte) bool { return status == 403 && strings.Contains(string(raw), "limit") },
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		status, msg string
		refused     bool
	}{{"400", "timeout too long", true}, {"422", "unknown field", true}, {"403", "over the limit", true}, {"403", "bad key", false}} {
		err := api.Call(t.Context(), "key-0123456789", "POST", "/things?status="+c.status+"&msg="+url.QueryEscape(c.msg), map[string]any{}, nil)
		var re *providers.RefusedError
		if got := errors.As(err, &re); got != c.refused || (got && (re.Status != 422 || !strings.Contains(re.Message, c.msg))) {
			t.Errorf("%s %q: %v, want refused=%v with the message", c.status, c.msg, err, c.refused)
		}
		if !c.refused && !errors.Is(err, providers.ErrBadCredentials) {
			t.Errorf("%s %q: %v, want a refused key", c.status, c.msg, err)
		}
	}
}
