package browserbase

// fakeBrowserbase is a local Browserbase API for the provider's tests,
// following Browserbase's API reference (https://docs.browserbase.com/reference/api):
// POST /v1/sessions ("Create a Session": projectId, keepAlive, timeout
// 60..21600, userMetadata; answers the session with id, status RUNNING,
// connectUrl, signingKey), GET /v1/sessions/{id}, POST /v1/sessions/{id}
// ("Update a Session": status REQUEST_RELEASE ends it), GET
// /v1/sessions/{id}/debug (debuggerUrl, debuggerFullscreenUrl, wsUrl,
// pages) and GET /v1/sessions?status=&q=user_metadata['key']:'value'
// ("List Sessions"). The key goes in X-BB-API-Key.
//
// Each session is a real headless Chromium (/usr/bin/chromium, an empty
// profile, DevTools on a loopback port of its own) whose DevTools
// WebSocket, with ?signingKey= as at Browserbase, is the session's
// connectUrl; it is killed with its process group when the session is
// released or the test ends. Bad days: 401 while keys are refused, 429 on
// the next create, a create whose reply is lost after the session
// started, releases that fail with 500, a debug (live view) call that
// fails with 500.

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/conformance/browsertest"
)

type fakeBrowserbase struct {
	t   testing.TB
	srv *httptest.Server
	Key string

	browsertest.Faults
	sessions   map[string]*fakeSession
	failDebug  int
	lastCreate map[string]any
}

type fakeSession struct {
	ID           string            `json:"id"`
	Status       string            `json:"status"`
	ProjectID    string            `json:"projectId"`
	KeepAlive    bool              `json:"keepAlive"`
	ConnectURL   string            `json:"connectUrl"`
	SigningKey   string            `json:"signingKey"`
	UserMetadata map[string]string `json:"userMetadata"`
	browser      *browsertest.Chromium
}

func newFakeBrowserbase(t testing.TB) *fakeBrowserbase {
	browsertest.RequireChromium(t)
	f := &fakeBrowserbase{t: t, Key: "bb_live_" + strings.ToLower(rand.Text()), sessions: map[string]*fakeSession{}}
	f.srv = httptest.NewServer(f)
	t.Cleanup(func() {
		f.srv.Close()
		f.Mu.Lock()
		defer f.Mu.Unlock()
		for _, s := range f.sessions {
			if s.browser != nil {
				s.browser.Stop()
			}
		}
	})
	return f
}

func (f *fakeBrowserbase) fail(w http.ResponseWriter, status int, msg string) {
	browsertest.WriteJSON(w, status, map[string]any{"statusCode": status, "error": http.StatusText(status), "message": msg})
}

var metaQuery = regexp.MustCompile(`^user_metadata\['([^']+)'\]:'([^']*)'$`)

func (f *fakeBrowserbase) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if f.Refuse || r.Header.Get("X-BB-API-Key") != f.Key {
		f.fail(w, 401, "Unauthorized")
		return
	}
	switch {
	case r.URL.Path == "/v1/sessions" && r.Method == "POST":
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		f.lastCreate = body
		if browsertest.Take(&f.RateLimit) {
			f.fail(w, 429, "concurrent session limit reached")
			return
		}
		if t, _ := body["timeout"].(float64); t < 60 || t > 21600 {
			f.fail(w, 400, "timeout must be within 60..21600")
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
		defer cancel()
		c, err := browsertest.StartChromium(ctx)
		if err != nil {
			f.fail(w, 500, err.Error())
			return
		}
		// As at Browserbase, the connect URL carries the session's
		// signing key; Chromium ignores the query.
		sk := rand.Text()
		s := &fakeSession{ID: strings.ToLower(rand.Text()), Status: "RUNNING", KeepAlive: body["keepAlive"] == true, browser: c,
			ConnectURL: c.WS + "?signingKey=" + sk, SigningKey: sk, UserMetadata: map[string]string{}}
		s.ProjectID, _ = body["projectId"].(string)
		if s.ProjectID == "" {
			s.ProjectID = "proj-of-key"
		}
		if m, ok := body["userMetadata"].(map[string]any); ok {
			for k, v := range m {
				s.UserMetadata[k], _ = v.(string)
			}
		}
		f.sessions[s.ID] = s
		if browsertest.Take(&f.LoseReplies) {
			browsertest.HangUp(w)
			return
		}
		browsertest.WriteJSON(w, 201, s)
	case r.URL.Path == "/v1/sessions" && r.Method == "GET":
		out := []*fakeSession{}
		m := metaQuery.FindStringSubmatch(r.URL.Query().Get("q"))
		for _, s := range f.sessions {
			if st := r.URL.Query().Get("status"); st != "" && s.Status != st {
				continue
			}
			if m != nil && s.UserMetadata[m[1]] != m[2] {
				continue
			}
			out = append(out, s)
		}
		browsertest.WriteJSON(w, 200, out)
	case strings.HasPrefix(r.URL.Path, "/v1/sessions/"):
		id, sub, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/v1/sessions/"), "/")
		s := f.sessions[id]
		if s == nil {
			f.fail(w, 404, "Session not found")
			return
		}
		switch {
		case sub == "" && r.Method == "GET":
			browsertest.WriteJSON(w, 200, s)
		case sub == "debug" && r.Method == "GET":
			if browsertest.Take(&f.failDebug) {
				f.fail(w, 500, "Internal Server Error")
				return
			}
			if s.Status != "RUNNING" {
				f.fail(w, 400, "session is not running")
				return
			}
			live := f.srv.URL + "/devtools-fullscreen/inspector.html?wss=" + strings.TrimPrefix(s.browser.WS, "ws://")
			browsertest.WriteJSON(w, 200, map[string]any{"debuggerUrl": live, "debuggerFullscreenUrl": live, "wsUrl": s.browser.WS, "pages": []any{}})
		case sub == "" && r.Method == "POST":
			var body struct {
				Status string `json:"status"`
			}
			json.NewDecoder(r.Body).Decode(&body)
			if body.Status != "REQUEST_RELEASE" {
				f.fail(w, 400, "status must be REQUEST_RELEASE")
				return
			}
			if browsertest.Take(&f.FailDeletes) {
				f.fail(w, 500, "Internal Server Error")
				return
			}
			if s.browser != nil {
				s.browser.Stop()
				s.browser = nil
			}
			s.Status = "COMPLETED"
			browsertest.WriteJSON(w, 200, s)
		default:
			f.fail(w, 404, "Not Found")
		}
	default:
		f.fail(w, 404, "Not Found")
	}
}

// signingKeys returns every session's signing key.
func (f *fakeBrowserbase) signingKeys() []string {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	var out []string
	for _, s := range f.sessions {
		out = append(out, s.SigningKey)
	}
	return out
}

// count returns how many sessions were made.
func (f *fakeBrowserbase) count() int {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	return len(f.sessions)
}

// exists reports whether a session labelled label=value still runs.
func (f *fakeBrowserbase) exists(ctx context.Context, label, value string) (bool, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	for _, s := range f.sessions {
		if s.Status == "RUNNING" && s.UserMetadata[label] == value {
			return true, nil
		}
	}
	return false, nil
}
