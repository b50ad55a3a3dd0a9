package apiserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/berthdev/berth/supervisor/apiserver"
	"github.com/berthdev/berth/supervisor/liveview"
)

// fuzzRoutes are the POST routes whose JSON body an agent or a companion
// sends. a1 has a running computer whose exec answers at once without
// running anything; the file tools go to a2, which is connected but has no
// computer, so that no fuzzed path ever reaches a file system (the fake
// provider's computers run in this process, on the host).
var fuzzRoutes = []string{
	"/v1/agents",
	"/v1/computers",
	"/v1/agents/a1/computer/start",
	"/v1/agents/a1/computer/stop",
	"/v1/agents/a1/computer/exec",
	"/v1/agents/a2/computer/read_file",
	"/v1/agents/a2/computer/write_file",
	"/v1/agents/a1/computer/confirm-cleanup",
	"/v1/agents/a1/computer/view",
	"/v1/companions/pair-codes",
	"/v1/companions/pair",
}

// stubViews issues empty live-view grants, so that the view route does
// its own decoding instead of answering that live view is off.
type stubViews struct{}

func (stubViews) Issue(context.Context, string, string) (liveview.Grant, error) {
	return liveview.Grant{}, nil
}

func (stubViews) Screenshot(context.Context, string) ([]byte, error) { return nil, nil }

func (stubViews) Handler() http.Handler { return http.NotFoundHandler() }

// FuzzPostBodies drives the real handler with a fuzzed body on each POST
// route. Whatever the body, the answer is never a 5xx, every 4xx carries
// the error envelope {"error":{"code","message"}}, and every answer is JSON.
func FuzzPostBodies(f *testing.F) {
	seeds := map[int][]string{
		0:  {`{"id":"a9","name":"nine","workspace":"w"}`, `{"name":" "}`, `{"id":"../x","name":"x"}`, `{"name":"x","extra":1}`},
		1:  {`{"agent":"a1","provider":"fake","leaseSeconds":300,"dailySeconds":3600}`, `{"agent":"a1","leaseSeconds":-1}`, `{"agent":"a1","leaseSeconds":1e400}`, `{"agent":"a1","credentials":{"k":"v"}}`, `{"agent":"a1","image":"gpu"}`},
		2:  {``, `{}`, `null`, `[]`},
		3:  {``, `{}`, `{"x":1}`},
		4:  {`{"command":"echo hi"}`, `{"command":"x","timeoutSeconds":0}`, `{"command":"x","timeoutSeconds":9223372036854775808}`, `{"command":""}`},
		5:  {`{"path":"notes/a.txt"}`, `{"path":"a","offset":-1}`, `{"path":"\u0000"}`, `{"path":"   "}`},
		6:  {`{"path":"notes/a.txt","content":"hi"}`, `{"path":"../../etc/passwd","content":""}`, `{"path":"a","content":"\ud800"}`},
		7:  {`{"providerCleanupConfirmed":true}`, `{"providerCleanupConfirmed":false}`, `{"providerCleanupConfirmed":null}`},
		8:  {``, `{}`, `{"a":1}`},
		9:  {``, `{"name":"laptop"}`, `{"name":1}`},
		10: {`{"code":"ABCD-EFGH"}`, `{"code":""}`, `{"code":"x","name":"y"}`},
	}
	for route, bodies := range seeds {
		for _, b := range bodies {
			f.Add(uint8(route), []byte(b))
		}
	}
	for _, b := range []string{`{`, `{}{}`, `{} x`, `"str"`, `123`, "\xff", `{"a":` + string(bytes.Repeat([]byte("["), 10000))} {
		f.Add(uint8(0), []byte(b))
		f.Add(uint8(4), []byte(b))
	}

	e := newEnv(f)
	e.fake.SetInstantExec(true)
	h := e.srv.Config.Handler.(*apiserver.Handler)
	h.Views = stubViews{}
	e.mustCall("POST", "/v1/agents", map[string]any{"id": "a2", "name": "a2"}, 201, nil)
	e.mustCall("POST", "/v1/computers", map[string]any{"agent": "a2", "provider": "fake"}, 201, nil)
	e.connect("a1", 300, 3600)
	e.mustCall("POST", "/v1/agents/a1/computer/start", nil, 200, nil)

	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		path := fuzzRoutes[int(route)%len(fuzzRoutes)]
		req := httptest.NewRequest("POST", path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+opToken)
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)

		if w.Code >= 500 {
			t.Fatalf("POST %s %q: status %d: %s", path, body, w.Code, w.Body.Bytes())
		}
		if ct := w.Header().Get("Content-Type"); ct != "application/json" {
			t.Fatalf("POST %s %q: status %d with Content-Type %q", path, body, w.Code, ct)
		}
		if w.Code == http.StatusNoContent {
			return
		}
		if !json.Valid(w.Body.Bytes()) {
			t.Fatalf("POST %s %q: status %d, body not JSON: %q", path, body, w.Code, w.Body.Bytes())
		}
		if w.Code < 400 {
			return
		}
		var env struct {
			Error *struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &env); err != nil || env.Error == nil || env.Error.Code == "" || env.Error.Message == "" {
			t.Fatalf("POST %s %q: status %d without the error envelope: %s", path, body, w.Code, w.Body.Bytes())
		}
	})
}
