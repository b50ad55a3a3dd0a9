package browseruse

// fakeBrowserUse is a local Browser Use cloud API for the provider's
// tests, following Browser Use's API reference
// (https://docs.browser-use.com/cloud/browser/quickstart and the v3
// browsers endpoints, https://docs.browser-use.com/cloud/api-v3/browsers/update-browser-session):
// POST /browsers {timeout (minutes), proxyCountryCode, profileId} answers
// {id, status: active, cdpUrl, liveUrl, timeoutAt}; cdpUrl is an HTTP
// DevTools discovery endpoint (its /json/version names the WebSocket);
// GET /browsers/{id}; PATCH /browsers/{id} {action: stop}. The key goes in
// X-Browser-Use-API-Key; errors are {"detail": ...}. The bodies are
// checked against Browser Use's OpenAPI document (see createBrowserRules):
// a field it does not have, a wrong type, a value out of its bounds or
// enum answer 422 with a validation detail, as Browser Use does; a timeout
// over the plan's limit answers 403.
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
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/conformance/browsertest"
	"github.com/berthdev/berth/conformance/hostedtest"
)

type fakeBrowserUse struct {
	t   testing.TB
	srv *httptest.Server
	Key string

	browsertest.Faults
	browsers   map[string]*fakeBrowser
	lastCreate map[string]any
	// maxTimeout is the plan's longest browser, minutes (240 on every
	// plan, per the document).
	maxTimeout int
}

type fakeBrowser struct {
	ID        string    `json:"id"`
	Status    string    `json:"status"`
	CDPURL    string    `json:"cdpUrl"`
	LiveURL   string    `json:"liveUrl"`
	TimeoutAt time.Time `json:"timeoutAt"`
	// Recorded and Proxy are what the browser was asked for, with Browser
	// Use's defaults: enableRecording false; proxyCountryCode us when left
	// out, none ("") when null.
	Recorded bool   `json:"-"`
	Proxy    string `json:"-"`
	chrome   *browsertest.Chromium
}

func newFakeBrowserUse(t testing.TB) *fakeBrowserUse {
	browsertest.RequireChromium(t)
	f := &fakeBrowserUse{t: t, Key: "bu_" + strings.ToLower(rand.Text()), browsers: map[string]*fakeBrowser{}, maxTimeout: 240}
	f.StopWhenDone(t, func() []*browsertest.Chromium {
		var out []*browsertest.Chromium
		for _, b := range f.browsers {
			out = append(out, b.chrome)
		}
		return out
	})
	f.srv = httptest.NewServer(f)
	t.Cleanup(f.srv.Close)
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
		if bad := checkBody(body, createBrowserRules); len(bad) > 0 {
			browsertest.WriteJSON(w, 422, map[string]any{"detail": bad})
			return
		}
		if hostedtest.Take(&f.RateLimit) {
			browsertest.WriteJSON(w, 429, map[string]any{"detail": "Too many concurrent active sessions."})
			return
		}
		minutes := 60.0 // the document's default
		if t, ok := body["timeout"].(float64); ok {
			minutes = t
		}
		if minutes > float64(f.maxTimeout) {
			browsertest.WriteJSON(w, 403, map[string]any{"detail": "Maximum session timeout exceeded."})
			return
		}
		c, err := browsertest.StartChromiumFor(r)
		if err != nil {
			browsertest.WriteJSON(w, 500, map[string]any{"detail": err.Error()})
			return
		}
		id := strings.ToLower(rand.Text())
		b := &fakeBrowser{ID: id, Status: "active", CDPURL: c.HTTP, LiveURL: f.srv.URL + "/live/" + id,
			TimeoutAt: time.Now().Add(time.Duration(minutes) * time.Minute).UTC(), chrome: c, Proxy: "us"}
		b.Recorded, _ = body["enableRecording"].(bool)
		if v, ok := body["proxyCountryCode"]; ok {
			b.Proxy, _ = v.(string)
		}
		f.browsers[id] = b
		if hostedtest.Take(&f.LoseReplies) {
			hostedtest.HangUp(w)
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
			var body map[string]any
			json.NewDecoder(r.Body).Decode(&body)
			if bad := checkBody(body, updateBrowserRules); len(bad) > 0 {
				browsertest.WriteJSON(w, 422, map[string]any{"detail": bad})
				return
			}
			if hostedtest.Take(&f.FailDeletes) {
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

// asked returns what each browser was asked for: recording, and its
// proxy's country ("" for none).
func (f *fakeBrowserUse) asked() map[string][2]any {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	out := map[string][2]any{}
	for id, b := range f.browsers {
		out[id] = [2]any{b.Recorded, b.Proxy}
	}
	return out
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

// The request bodies as Browser Use's OpenAPI document describes them:
// "Browser Use Public API v3", version 3.0.0, published at
// https://docs.browser-use.com/cloud/openapi/v3.json (the copy in
// github.com/browser-use/sdk, docs/cloud/openapi/v3.json at commit
// 4454694, 2026-08-07, read on 2026-12-01). POST /browsers takes a
// CreateBrowserSessionRequest, PATCH /browsers/{session_id} an
// UpdateBrowserSessionRequest. Browser Use ignores a body field it does not
// know; the fake refuses one, so that a field Berth sends and the document
// lacks fails the tests instead of being dropped without a word.

// bodyRule is one body field's schema.
type bodyRule struct {
	kind     string // string, uuid, integer, boolean or object
	nullable bool   // anyOf [..., {type: null}]
	required bool
	min, max float64 // integer bounds, when max > 0
	enum     []string
}

// createBrowserRules is CreateBrowserSessionRequest. proxyCountryCode
// defaults to us when left out, and null turns the proxy off; timeout
// (minutes) defaults to 60; enableRecording defaults to false.
var createBrowserRules = map[string]bodyRule{
	"profileId":           {kind: "uuid", nullable: true},
	"proxyCountryCode":    {kind: "string", nullable: true, enum: strings.Fields(proxyCountryCodes)},
	"timeout":             {kind: "integer", min: 1, max: 240},
	"browserScreenWidth":  {kind: "integer", nullable: true, min: 320, max: 6144},
	"browserScreenHeight": {kind: "integer", nullable: true, min: 320, max: 3456},
	"allowResizing":       {kind: "boolean"},
	"customProxy":         {kind: "object", nullable: true}, // CustomProxy; Berth sends none
	"enableRecording":     {kind: "boolean"},
}

// updateBrowserRules is UpdateBrowserSessionRequest, whose action is a
// BrowserSessionUpdateAction.
var updateBrowserRules = map[string]bodyRule{
	"action": {kind: "string", required: true, enum: []string{"stop"}},
}

// proxyCountryCodes is the document's ProxyCountryCode enum.
const proxyCountryCodes = `ad ae af ag ai al am an ao aq ar as at au aw az ba bb bd be bf bg bh bi bj bl bm bn bo bq br bs bt bv bw by bz
ca cc cd cf cg ch ck cl cm co cr cs cu cv cw cx cy cz de dj dk dm do dz ec ee eg eh er es et fi fj fk fm fo fr
ga gd ge gf gg gh gi gl gm gn gp gq gr gs gt gu gw gy hk hm hn hr ht hu id ie il im in iq ir is it je jm jo jp
ke kg kh ki km kn kp kr kw ky kz la lb lc li lk lr ls lt lu lv ly ma mc md me mf mg mh mk ml mm mn mo mp mq mr
ms mt mu mv mw mx my mz na nc ne nf ng ni nl no np nr nu nz om pa pe pf pg ph pk pl pm pn pr ps pt pw py qa re
ro rs ru rw sa sb sc sd se sg sh si sj sk sl sm sn so sr ss st sv sx sy sz tc td tf tg th tj tk tl tm tn to tr
tt tv tw tz ua ug uk us uy uz va vc ve vg vi vn vu wf ws xk ye yt za zm zw`

var uuidForm = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// checkBody returns body's faults against rules as validation details
// ({loc, msg, type}), none when it conforms.
func checkBody(body map[string]any, rules map[string]bodyRule) []map[string]any {
	var bad []map[string]any
	fault := func(name, msg string) {
		bad = append(bad, map[string]any{"loc": []string{"body", name}, "msg": msg, "type": "value_error"})
	}
	if body == nil {
		fault("", "a JSON object is required")
		return bad
	}
	for name, r := range rules {
		if _, ok := body[name]; !ok && r.required {
			fault(name, "Field required")
		}
	}
	for name, v := range body {
		r, ok := rules[name]
		switch {
		case !ok:
			fault(name, "not a field of the request")
		case v == nil:
			if !r.nullable {
				fault(name, "must not be null")
			}
		case r.kind == "string" || r.kind == "uuid":
			s, ok := v.(string)
			if !ok {
				fault(name, "Input should be a valid string")
			} else if r.kind == "uuid" && !uuidForm.MatchString(s) {
				fault(name, "Input should be a valid UUID")
			} else if r.enum != nil && !slices.Contains(r.enum, s) {
				fault(name, "Input should be one of the enum's values")
			}
		case r.kind == "integer":
			n, ok := v.(float64)
			if !ok || n != math.Trunc(n) {
				fault(name, "Input should be a valid integer")
			} else if r.max > 0 && (n < r.min || n > r.max) {
				fault(name, fmt.Sprintf("Input should be within %v..%v", r.min, r.max))
			}
		case r.kind == "boolean":
			if _, ok := v.(bool); !ok {
				fault(name, "Input should be a valid boolean")
			}
		case r.kind == "object":
			if _, ok := v.(map[string]any); !ok {
				fault(name, "Input should be an object")
			}
		}
	}
	return bad
}
