package apiserver_test

import (
	"strings"
	"testing"
)

// TestBrowserOptionsNeedBrowserProvider: browserRecording and
// browserProxyCountry are refused, naming the field, on a connection whose
// provider gives computers, not hosted browsers; left out (or false), the
// connection is made and its GET shows neither.
func TestBrowserOptionsNeedBrowserProvider(t *testing.T) {
	e := newEnv(t)
	e.mustCall("POST", "/v1/agents", map[string]any{"id": "b", "name": "b"}, 201, nil)
	for field, v := range map[string]any{"browserRecording": true, "browserProxyCountry": "de"} {
		var out struct {
			Error struct{ Message string } `json:"error"`
		}
		st, code := e.call("POST", "/v1/computers", map[string]any{"agent": "b", "provider": "fake", field: v}, &out)
		if st != 400 || code != "bad_request" || !strings.HasPrefix(out.Error.Message, field+":") || !strings.Contains(out.Error.Message, "hosted browser") {
			t.Errorf("%s on the fake provider: %d %s %q; want 400 naming the field", field, st, code, out.Error.Message)
		}
	}
	e.mustCall("POST", "/v1/computers", map[string]any{"agent": "b", "provider": "fake", "browserRecording": false}, 201, nil)
	var raw struct {
		Connection map[string]any `json:"connection"`
	}
	e.mustCall("GET", "/v1/agents/b/computer", nil, 200, &raw)
	for _, field := range []string{"browserRecording", "browserProxyCountry"} {
		if v, ok := raw.Connection[field]; ok {
			t.Errorf("GET shows %s %v on a computer connection", field, v)
		}
	}
}
