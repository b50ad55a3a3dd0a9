package httpapi

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

const key = "sk_live_0123456789abcdef"

// newClient is a Client of a loopback API that answers the status named
// by the path's last element, echoing the key it was sent in its message.
func newClient(t *testing.T) *Client {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Key") != key {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		code, _ := strconv.Atoi(r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:])
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		if code < 300 {
			w.Write([]byte(`{"id":"m1"}`))
			return
		}
		w.Write([]byte(`{"message":"no such thing for key ` + key + `"}`))
	}))
	t.Cleanup(srv.Close)
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	return &Client{BaseURL: srv.URL, HTTP: hc, Timeout: 5 * time.Second, KeyName: "apiKey",
		Auth: func(h http.Header, k string) { h.Set("X-Key", k) },
		Failure: func(status int, body []byte) (string, error) {
			switch status {
			case http.StatusConflict:
				return string(body), providers.ErrCapacity
			case http.StatusGone:
				return string(body), ErrPlain
			}
			return string(body), nil
		}}
}

// TestStatuses maps each kind of answer to its providers error, with the
// key never in the message.
func TestStatuses(t *testing.T) {
	cl := newClient(t)
	for _, c := range []struct {
		status int
		want   error
	}{
		{401, providers.ErrBadCredentials}, {403, providers.ErrBadCredentials},
		{404, providers.ErrNotFound},
		{402, providers.ErrCapacity}, {429, providers.ErrCapacity},
		{400, providers.ErrRefused}, {422, providers.ErrRefused},
		{409, providers.ErrCapacity}, // by Failure
		{500, providers.ErrUnavailable}, {502, providers.ErrUnavailable}, {503, providers.ErrUnavailable},
	} {
		got, err := cl.Do(t.Context(), key, Call{Method: "GET", Path: "/m/" + strconv.Itoa(c.status) + "?q=1"}, nil)
		if got != c.status || !errors.Is(err, c.want) {
			t.Errorf("%d: %d, %v; want %v", c.status, got, err, c.want)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, key) || !strings.Contains(msg, "GET /m/"+strconv.Itoa(c.status)+":") || strings.Contains(msg, "q=1") {
			t.Errorf("%d: message %q: want the call without its query and without the key", c.status, msg)
		}
	}
	_, err := cl.Do(t.Context(), key, Call{Method: "GET", Path: "/m/410"}, nil)
	for _, kind := range []error{providers.ErrNotFound, providers.ErrUnavailable, providers.ErrRefused, ErrPlain} {
		if errors.Is(err, kind) {
			t.Errorf("410 read as ErrPlain: %v is %v, want no kind", err, kind)
		}
	}
	if err == nil || !strings.Contains(err.Error(), "GET /m/410: 410") || !strings.Contains(err.Error(), "no such thing") || strings.Contains(err.Error(), key) {
		t.Errorf("410 read as ErrPlain: %v, want the call and the provider's message without the key", err)
	}
	_, err = cl.Do(t.Context(), key, Call{Method: "POST", Path: "/m/422", Body: map[string]int{"timeout": 1}}, nil)
	var re *providers.RefusedError
	if !errors.As(err, &re) || re.Status != http.StatusUnprocessableEntity || re.Code != CodeRefused || !strings.Contains(re.Message, "no such thing") {
		t.Errorf("422: %#v, want a RefusedError with 422 and the provider's message", err)
	}
}

// TestAnswer decodes a 2xx answer and refuses a call without a key.
func TestAnswer(t *testing.T) {
	cl := newClient(t)
	var out struct{ ID string }
	if code, err := cl.Do(t.Context(), key, Call{Method: "POST", Path: "/m/201", Body: map[string]any{"a": 1}}, &out); code != 201 || err != nil || out.ID != "m1" {
		t.Errorf("201: %d %v %+v", code, err, out)
	}
	if _, err := cl.Do(t.Context(), "", Call{Method: "GET", Path: "/m/200"}, nil); !errors.Is(err, providers.ErrBadCredentials) || !strings.Contains(err.Error(), "apiKey") {
		t.Errorf("no key: %v, want a refused key naming apiKey", err)
	}
	if _, err := cl.Do(t.Context(), "wrong", Call{Method: "GET", Path: "/m/200"}, nil); !errors.Is(err, providers.ErrBadCredentials) {
		t.Errorf("wrong key: %v", err)
	}
}

// TestUnreachable is an outage whose message names the call but not the
// URL, whose query may carry a secret.
func TestUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	base := srv.URL
	srv.Close()
	cl := &Client{BaseURL: base, HTTP: &http.Client{}, KeyName: "apiKey", Auth: func(http.Header, string) {}}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	code, err := cl.Do(ctx, key, Call{Method: "GET", Path: "/s?signingKey=" + key}, nil)
	if code != 0 || !errors.Is(err, providers.ErrUnavailable) || strings.Contains(err.Error(), key) || strings.Contains(err.Error(), base) {
		t.Errorf("closed server: %d %v; want an outage naming neither the URL nor its query", code, err)
	}
}

// TestSettingsAndKeys refuses an API URL and credentials by name.
func TestSettingsAndKeys(t *testing.T) {
	for raw, ok := range map[string]bool{"https://api.example/v1/": true, "http://127.0.0.1:8080": true,
		"ftp://api.example": false, "https://": false, "https://user:pw@api.example": false, "::": false} {
		got, err := BaseURL("X_API_URL", raw, "https://api.example")
		if ok && (err != nil || strings.HasSuffix(got, "/")) {
			t.Errorf("BaseURL(%q) = %q, %v", raw, got, err)
		}
		if !ok && (err == nil || !strings.Contains(err.Error(), "X_API_URL") || strings.Contains(err.Error(), ":pw@")) {
			t.Errorf("BaseURL(%q) = %q, %v; want an error naming the setting, without the password", raw, got, err)
		}
	}
	for _, c := range []struct {
		creds map[string]string
		want  string // in the error; "" for none
	}{
		{map[string]string{"apiKey": "k1"}, ""},
		{map[string]string{"apiKey": "k1", "projectId": "p"}, ""},
		{map[string]string{}, "apiKey is missing"},
		{map[string]string{"apiKey": "k 1"}, "white space"},
		{map[string]string{"apiKey": "k1", "token": "x"}, `"token" is not a prov credential`},
	} {
		err := CheckKey("prov", c.creds, "apiKey", "a key", "projectId")
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("CheckKey(%v) = %v, want %q", c.creds, err, c.want)
		}
	}
}
