package browseruse

// fakeBrowserUse is a local Browser Use cloud API for the provider's
// tests, following Browser Use's API reference
// (https://docs.browser-use.com/cloud/browser/quickstart and the v3
// browsers endpoints, https://docs.browser-use.com/cloud/api-v3/browsers/update-browser-session):
// POST /browsers {timeout (minutes), proxyCountryCode, profileId} answers
// {id, status: active, cdpUrl, liveUrl, timeoutAt}; cdpUrl is an HTTP
// DevTools discovery endpoint (its /json/version names the WebSocket);
// GET /browsers/{id}; PATCH /browsers/{id} {action: stop}. The key goes in
// X-Browser-Use-API-Key; errors are {"detail": ...}.
//
// Each browser is a real headless Chromium (/usr/bin/chromium, an empty
// profile, DevTools on a loopback port of its own) behind its cdpUrl; it
// is killed with its process group when stopped or when the test ends.
// Bad days: 401 while keys are refused, 429 on the next create, a create
// whose reply is lost after the browser started, stops that fail with 500.

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/conformance/browsertest"
)

type fakeBrowserUse struct {
	t   testing.TB
	srv *httptest.Server
	Key string

	browsertest.Faults
	browsers   map[string]*fakeBrowser
	lastCreate map[string]any
}

type fakeBrowser struct {
	ID        string    `json:"id"`
	Status    string    `json:"status"`
	CDPURL    string    `json:"cdpUrl"`
	LiveURL   string    `json:"liveUrl"`
	TimeoutAt time.Time `json:"timeoutAt"`
	chrome    *browsertest.Chromium
}

func newFakeBrowserUse(t testing.TB) *fakeBrowserUse {
	browsertest.RequireChromium(t)
	f := &fakeBrowserUse{t: t, Key: "bu_" + strings.ToLower(rand.Text()), browsers: map[string]*fakeBrowser{}}
	f.srv = httptest.NewServer(f)
	t.Cleanup(func() {
		f.srv.Close()
		f.Mu.Lock()
		defer f.Mu.Unlock()
		for _, b := range f.browsers {
			if b.chrome != nil {
				b.chrome.Stop()
			}
		}
	})
	return f
}

func (f *fakeBrowserUse) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if f.Refuse || r.Header.Get("X-Browser-Use-API-Key") != f.Key {
		browsertest.WriteJSON(w, 401, map[string]any{"detail": "Invalid API key"})
		return
	}
	path := strings.TrimPrefix(r.URL.Path, "/api/v3")
	switch {
	case path == "/browsers" && r.Method == "POST":
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		f.lastCreate = body
		if browsertest.Take(&f.RateLimit) {
			browsertest.WriteJSON(w, 429, map[string]any{"detail": "Too many concurrent browser sessions"})
			return
		}
		minutes, _ := body["timeout"].(float64)
		if minutes < 1 || minutes > 240 {
			browsertest.WriteJSON(w, 422, map[string]any{"detail": "timeout must be 1..240 minutes"})
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
		defer cancel()
		c, err := browsertest.StartChromium(ctx)
		if err != nil {
			browsertest.WriteJSON(w, 500, map[string]any{"detail": err.Error()})
			return
		}
		id := strings.ToLower(rand.Text())
		b := &fakeBrowser{ID: id, Status: "active", CDPURL: c.HTTP, LiveURL: f.srv.URL + "/live/" + id,
			TimeoutAt: time.Now().Add(time.Duration(minutes) * time.Minute).UTC(), chrome: c}
		f.browsers[id] = b
		if browsertest.Take(&f.LoseReplies) {
			browsertest.HangUp(w)
			return
		}
		browsertest.WriteJSON(w, 201, b)
	case strings.HasPrefix(path, "/browsers/"):
		b := f.browsers[strings.TrimPrefix(path, "/browsers/")]
		if b == nil {
			browsertest.WriteJSON(w, 404, map[string]any{"detail": "Browser session not found"})
			return
		}
		switch r.Method {
		case "GET":
			browsertest.WriteJSON(w, 200, b)
		case "PATCH":
			var body struct {
				Action string `json:"action"`
			}
			json.NewDecoder(r.Body).Decode(&body)
			if body.Action != "stop" {
				browsertest.WriteJSON(w, 422, map[string]any{"detail": "action must be stop"})
				return
			}
			if browsertest.Take(&f.FailDeletes) {
				browsertest.WriteJSON(w, 500, map[string]any{"detail": "Internal Server Error"})
				return
			}
			if b.chrome != nil {
				b.chrome.Stop()
				b.chrome = nil
			}
			b.Status = "stopped"
			browsertest.WriteJSON(w, 200, b)
		default:
			browsertest.WriteJSON(w, 405, map[string]any{"detail": "Method Not Allowed"})
		}
	default:
		browsertest.WriteJSON(w, 404, map[string]any{"detail": "Not Found"})
	}
}

// active counts the browsers still running.
func (f *fakeBrowserUse) active() int {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	n := 0
	for _, b := range f.browsers {
		if b.Status == "active" {
			n++
		}
	}
	return n
}

// count returns how many browsers were made.
func (f *fakeBrowserUse) count() int {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	return len(f.browsers)
}

// exists reports whether a browser is still active. Browser Use keeps no
// labels, so any active browser counts: each test's fake serves one agent.
func (f *fakeBrowserUse) exists(ctx context.Context, label, value string) (bool, error) {
	return f.active() > 0, nil
}
