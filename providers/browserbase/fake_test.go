package browserbase

// fakeBrowserbase is a local Browserbase API for the provider's tests,
// following Browserbase's API reference (https://docs.browserbase.com/reference/api):
// POST /v1/sessions ("Create a Session": projectId, keepAlive, timeout
// 60..21600, userMetadata; answers the session with id, status RUNNING,
// connectUrl, signingKey), GET /v1/sessions/{id}, POST /v1/sessions/{id}
// ("Update a Session": status REQUEST_RELEASE ends it), GET
// /v1/sessions/{id}/debug (debuggerUrl, debuggerFullscreenUrl, wsUrl,
// pages) and GET /v1/sessions?status=&q=user_metadata['key']:'value'
// ("List Sessions"). The key goes in X-BB-API-Key. The create and update
// bodies and the list's status are checked against Browserbase's
// published API (see createSessionRules): a field it does not have, a
// wrong type, a value out of bounds or enum, or a missing required field
// answer 400 with a message naming the field. A session remembers whether
// it was asked to be recorded (recordSession, which Browserbase defaults
// to true) and the proxy it was asked for (proxies, which Browserbase
// defaults to none).
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
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/berthdev/berth/conformance/browsertest"
	"github.com/berthdev/berth/conformance/hostedtest"
	"github.com/berthdev/berth/providers"
)

type fakeBrowserbase struct {
	t   testing.TB
	srv *httptest.Server
	Key string

	browsertest.Faults
	sessions   map[string]*fakeSession
	failDebug  int
	lastCreate map[string]any
	// refuseCreate, when set, is the message of a 400 the next create
	// answers (a plan without keep-alive, say).
	refuseCreate string
}

type fakeSession struct {
	ID        string `json:"id"`
	Status    string `json:"status"`
	ProjectID string `json:"projectId"`
	Recorded  bool   `json:"-"`
	// Proxy is what the session's traffic goes through: "" for no proxy
	// (Browserbase's default), "default" for proxies: true, or the
	// country of its first browserbase proxy.
	Proxy        string            `json:"-"`
	KeepAlive    bool              `json:"keepAlive"`
	ConnectURL   string            `json:"connectUrl"`
	SigningKey   string            `json:"signingKey"`
	UserMetadata map[string]string `json:"userMetadata"`
	browser      *browsertest.Chromium
}

func newFakeBrowserbase(t testing.TB) *fakeBrowserbase {
	browsertest.RequireChromium(t)
	f := &fakeBrowserbase{t: t, Key: "bb_live_" + strings.ToLower(rand.Text()), sessions: map[string]*fakeSession{}}
	f.StopWhenDone(t, func() []*browsertest.Chromium {
		var out []*browsertest.Chromium
		for _, s := range f.sessions {
			out = append(out, s.browser)
		}
		return out
	})
	f.srv = httptest.NewServer(f)
	t.Cleanup(f.srv.Close)
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
		if bad := checkValue("body", body, createSessionRules); bad != "" {
			f.fail(w, 400, bad)
			return
		}
		if f.refuseCreate != "" {
			f.fail(w, 400, f.refuseCreate)
			f.refuseCreate = ""
			return
		}
		if hostedtest.Take(&f.RateLimit) {
			f.fail(w, 429, "concurrent session limit reached")
			return
		}
		c, err := browsertest.StartChromiumFor(r)
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
		s.Recorded = true // Browserbase's default
		if bs, ok := body["browserSettings"].(map[string]any); ok && bs["recordSession"] == false {
			s.Recorded = false
		}
		switch p := body["proxies"].(type) {
		case bool:
			if p {
				s.Proxy = "default"
			}
		case []any:
			for _, x := range p {
				if m, _ := x.(map[string]any); m["type"] == "browserbase" {
					g, _ := m["geolocation"].(map[string]any)
					s.Proxy, _ = g["country"].(string)
					s.Proxy = cmp.Or(s.Proxy, "default")
					break
				}
			}
		}
		if s.ProjectID == "" {
			s.ProjectID = "proj-of-key"
		}
		if m, ok := body["userMetadata"].(map[string]any); ok {
			for k, v := range m {
				s.UserMetadata[k], _ = v.(string)
			}
		}
		f.sessions[s.ID] = s
		if hostedtest.Take(&f.LoseReplies) {
			hostedtest.HangUp(w)
			return
		}
		browsertest.WriteJSON(w, 201, s)
	case r.URL.Path == "/v1/sessions" && r.Method == "GET":
		out := []*fakeSession{}
		if st := r.URL.Query().Get("status"); st != "" && !slices.Contains(sessionStatuses, st) {
			f.fail(w, 400, "querystring/status must be one of "+strings.Join(sessionStatuses, ", "))
			return
		}
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
			if hostedtest.Take(&f.failDebug) {
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
			var body map[string]any
			json.NewDecoder(r.Body).Decode(&body)
			if bad := checkValue("body", body, updateSessionRules); bad != "" {
				f.fail(w, 400, bad)
				return
			}
			if hostedtest.Take(&f.FailDeletes) {
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

// recorded returns, for each session, whether it is recorded.
func (f *fakeBrowserbase) recorded() map[string]bool {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	out := map[string]bool{}
	for _, s := range f.sessions {
		out[s.ID] = s.Recorded
	}
	return out
}

// proxied returns what each session's traffic goes through (see
// fakeSession.Proxy).
func (f *fakeBrowserbase) proxied() map[string]string {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	out := map[string]string{}
	for _, s := range f.sessions {
		out[s.ID] = s.Proxy
	}
	return out
}

// askedBy returns what the session of agent (by its user metadata) was
// asked for: recording, and its proxy (see fakeSession.Proxy).
func (f *fakeBrowserbase) askedBy(agent string) [2]any {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	for _, s := range f.sessions {
		if s.UserMetadata[providers.LabelAgent] == agent {
			return [2]any{s.Recorded, s.Proxy}
		}
	}
	return [2]any{"no session", ""}
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

// The request rules below are Browserbase's API as published on
// 2026-12-01: the API reference's "Create a Session", "Update a Session"
// and "List Sessions" (https://docs.browserbase.com/reference/api), in the
// form its official Python SDK generates from Browserbase's OpenAPI
// document (github.com/browserbase/sdk-python v1.17.0, commit 530eb39,
// 2026-08-17: types/session_create_params.py, session_update_params.py,
// session_list_params.py). Where Browserbase would ignore a field it does
// not know, the fake refuses it, so that a field Berth sends and the
// reference lacks fails the tests.

// rule is one value's schema.
type rule struct {
	kind     string // string, integer, boolean, object, array, map (any keys), or bool|array
	required bool   // as a field of its object
	min, max float64
	enum     []string
	pattern  *regexp.Regexp  // of a string, when set
	fields   map[string]rule // of an object
	items    *rule           // of an array
}

var (
	strRule  = rule{kind: "string"}
	boolRule = rule{kind: "boolean"}
	strList  = rule{kind: "array", items: &strRule}
)

// sessionStatuses is the status enum of a session and of List's filter.
var sessionStatuses = []string{"PENDING", "RUNNING", "ERROR", "TIMED_OUT", "COMPLETED"}

// proxyRule is one entry of proxies: a browserbase, external or none
// proxy (the fake checks the union's fields together, type deciding). A
// browserbase proxy's geolocation.country is required, "Country code in
// ISO 3166-1 alpha-2 format" (session_create_params,
// ProxiesUnionMember0UnionMember0Geolocation), upper case as in
// Browserbase's examples ("US"); city and state are optional.
var proxyRule = rule{kind: "object", fields: map[string]rule{
	"type":          {kind: "string", required: true, enum: []string{"browserbase", "external", "none"}},
	"domainPattern": strRule,
	"geolocation": {kind: "object", fields: map[string]rule{
		"country": {kind: "string", required: true, pattern: regexp.MustCompile(`^[A-Z]{2}$`)}, "city": strRule, "state": strRule,
	}},
	"server": strRule, "username": strRule, "password": strRule,
}}

// createSessionRules is the body of POST /v1/sessions. recordSession and
// logSession default to true, timeout to the project's default.
var createSessionRules = rule{kind: "object", fields: map[string]rule{
	"browserSettings": {kind: "object", fields: map[string]rule{
		"advancedStealth":      boolRule,
		"allowedDomains":       strList,
		"blockAds":             boolRule,
		"captchaImageSelector": strRule,
		"captchaInputSelector": strRule,
		"context": {kind: "object", fields: map[string]rule{
			"id": {kind: "string", required: true}, "persist": boolRule,
		}},
		"extensionId":             strRule,
		"ignoreCertificateErrors": boolRule,
		"logSession":              boolRule,
		"os":                      {kind: "string", enum: []string{"windows", "mac", "linux", "mobile", "tablet"}},
		"recordSession":           boolRule,
		"solveCaptchas":           boolRule,
		"verified":                boolRule,
		"viewport": {kind: "object", fields: map[string]rule{
			"height": {kind: "integer"}, "width": {kind: "integer"},
		}},
	}},
	"extensionId":   strRule,
	"keepAlive":     boolRule,
	"projectId":     strRule,
	"proxies":       {kind: "bool|array", items: &proxyRule},
	"proxySettings": {kind: "object", fields: map[string]rule{"caCertificates": strList}},
	"region":        {kind: "string", enum: []string{"us-west-2", "us-east-1", "eu-central-1", "ap-southeast-1"}},
	"timeout":       {kind: "integer", min: 60, max: 21600},
	"userMetadata":  {kind: "map"},
}}

// updateSessionRules is the body of POST /v1/sessions/{id}.
var updateSessionRules = rule{kind: "object", fields: map[string]rule{
	"status":    {kind: "string", required: true, enum: []string{"REQUEST_RELEASE"}},
	"projectId": strRule,
}}

// checkValue returns what is wrong with v (at path) against r, "" when
// nothing is.
func checkValue(path string, v any, r rule) string {
	switch r.kind {
	case "string":
		s, ok := v.(string)
		if !ok {
			return path + " must be a string"
		}
		if r.enum != nil && !slices.Contains(r.enum, s) {
			return path + " must be one of " + strings.Join(r.enum, ", ")
		}
		if r.pattern != nil && !r.pattern.MatchString(s) {
			return path + " must match pattern \"" + r.pattern.String() + "\""
		}
	case "integer":
		n, ok := v.(float64)
		if !ok || n != math.Trunc(n) {
			return path + " must be an integer"
		}
		if r.max > 0 && (n < r.min || n > r.max) {
			return fmt.Sprintf("%s must be within %v..%v", path, r.min, r.max)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return path + " must be a boolean"
		}
	case "map":
		if _, ok := v.(map[string]any); !ok {
			return path + " must be an object"
		}
	case "array", "bool|array":
		if _, ok := v.(bool); ok && r.kind == "bool|array" {
			return ""
		}
		list, ok := v.([]any)
		if !ok {
			return path + " must be an array"
		}
		for i, x := range list {
			if bad := checkValue(fmt.Sprintf("%s/%d", path, i), x, *r.items); bad != "" {
				return bad
			}
		}
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			return path + " must be an object"
		}
		for name, fr := range r.fields {
			if _, ok := m[name]; !ok && fr.required {
				return path + " must have required property '" + name + "'"
			}
		}
		for name, x := range m {
			fr, ok := r.fields[name]
			if !ok {
				return path + " must NOT have additional property '" + name + "'"
			}
			if bad := checkValue(path+"/"+name, x, fr); bad != "" {
				return bad
			}
		}
	}
	return ""
}
