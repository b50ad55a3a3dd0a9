package e2bfake_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers/e2b/e2bfake"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

const key = "e2b_test_key"

// call sends one request to the fake's API with the key and answers its
// status and message (or body).
func call(t *testing.T, f *e2bfake.Fake, method, path, contentType, body string) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, f.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-API-Key", key)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := f.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if len(raw) > 0 && raw[0] == '{' {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s %s: answer %q: %v", method, path, raw, err)
		}
	}
	return resp.StatusCode, out
}

// valid is a create body the API accepts: what the e2b provider sends.
const valid = `{"templateID":"berth-headless","timeout":960,"autoPause":false,"secure":true,"allow_internet_access":true,` +
	`"metadata":{"dev.berth.managed":"true"},"envVars":{"A":"1"},"network":{"allowPublicTraffic":false}}`

// with returns valid with its field k set to the JSON v (or removed when
// v is "").
func with(k, v string) string {
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(valid), &m); err != nil {
		panic(err)
	}
	if v == "" {
		delete(m, k)
	} else {
		m[k] = json.RawMessage(v)
	}
	out, _ := json.Marshal(m)
	return string(out)
}

// TestContract sends one request per rule of the API and checks the fake
// answers as E2B's API does: the document's schemas (required fields,
// types, formats, minimums, enums; unknown fields ignored) and the server
// rules the document does not show.
func TestContract(t *testing.T) {
	const jsonType = "application/json"
	for _, c := range []struct {
		name             string
		method, path, ct string
		body             string
		status           int
		msg              string // part of the answer's message
	}{
		{"the provider's create is accepted", "POST", "/sandboxes", jsonType, valid, 201, ""},
		{"closed port URLs without secure are refused", "POST", "/sandboxes", jsonType, with("secure", ""), 400, "secure"},
		{"closed port URLs with secure false are refused", "POST", "/sandboxes", jsonType, with("secure", "false"), 400, "secure"},
		{"public port URLs need no secure", "POST", "/sandboxes", jsonType, `{"templateID":"berth-headless","timeout":60}`, 201, ""},
		{"templateID is required", "POST", "/sandboxes", jsonType, with("templateID", ""), 400, "/templateID: property is required"},
		{"templateID is a string", "POST", "/sandboxes", jsonType, with("templateID", "7"), 400, "/templateID: value must be a string"},
		{"timeout is an integer", "POST", "/sandboxes", jsonType, with("timeout", `"960"`), 400, "/timeout: value must be an integer"},
		{"timeout has no fraction", "POST", "/sandboxes", jsonType, with("timeout", "1.5"), 400, "/timeout: value must be an integer"},
		{"timeout is an int32", "POST", "/sandboxes", jsonType, with("timeout", "2147483648"), 400, "/timeout: number must be an int32"},
		{"timeout is at least 0", "POST", "/sandboxes", jsonType, with("timeout", "-1"), 400, "/timeout: number must be at least 0"},
		{"timeout 0 is refused by the server", "POST", "/sandboxes", jsonType, with("timeout", "0"), 400, "more than 0"},
		{"timeout above the tier's hour is refused", "POST", "/sandboxes", jsonType, with("timeout", "3601"), 400, "1 hours"},
		{"secure is a boolean", "POST", "/sandboxes", jsonType, with("secure", `"true"`), 400, "/secure: value must be a boolean"},
		{"allowPublicTraffic is a boolean", "POST", "/sandboxes", jsonType, with("network", `{"allowPublicTraffic":"no"}`), 400, "/network/allowPublicTraffic: value must be a boolean"},
		{"metadata values are strings", "POST", "/sandboxes", jsonType, with("metadata", `{"a":1}`), 400, "/metadata/a: value must be a string"},
		{"metadata is not nullable", "POST", "/sandboxes", jsonType, with("metadata", "null"), 400, "/metadata: value is not nullable"},
		{"envVars is an object", "POST", "/sandboxes", jsonType, with("envVars", `["A=1"]`), 400, "/envVars: value must be an object"},
		{"autoResume.enabled is required", "POST", "/sandboxes", jsonType, with("autoResume", `{}`), 400, "/autoResume/enabled: property is required"},
		{"autoPauseMemory false needs autoPause", "POST", "/sandboxes", jsonType, with("autoPauseMemory", "false"), 400, "autoPause"},
		{"unknown fields are ignored", "POST", "/sandboxes", jsonType, with("colour", `"blue"`), 201, ""},
		{"the body is required", "POST", "/sandboxes", jsonType, "", 400, "required"},
		{"the body is JSON", "POST", "/sandboxes", "text/plain", valid, 400, "Content-Type"},
		{"the body is one JSON object", "POST", "/sandboxes", jsonType, "[1]", 400, "value must be an object"},
		{"a template it does not know is 404", "POST", "/sandboxes", jsonType, with("templateID", `"nope"`), 404, "template 'nope' not found"},
		{"a tag it does not know is 404", "POST", "/sandboxes", jsonType, with("templateID", `"berth-headless:v9"`), 404, "tag 'v9' does not exist for template 'berth-headless'"},
		{"the default tag is the template", "POST", "/sandboxes", jsonType, with("templateID", `"Berth-Headless:default"`), 201, ""},
		{"a template reference that is not valid is 400", "POST", "/sandboxes", jsonType, with("templateID", `"berth headless!"`), 400, "template"},
		{"list states are running or paused", "GET", "/v2/sandboxes?state=running,stopped", "", "", 400, "not one of running, paused"},
		{"list order is asc or desc", "GET", "/v2/sandboxes?order=up", "", "", 400, "order"},
		{"list limit is at least 1", "GET", "/v2/sandboxes?limit=0", "", "", 400, "limit: number must be at least 1"},
		{"list limit is at most 100", "GET", "/v2/sandboxes?limit=101", "", "", 400, "limit: number must be at most 100"},
		{"list limit is an integer", "GET", "/v2/sandboxes?limit=ten", "", "", 400, "limit: value must be an integer"},
		{"list startedAfter is a date-time", "GET", "/v2/sandboxes?startedAfter=yesterday", "", "", 400, "date-time"},
		{"the provider's list is accepted", "GET", "/v2/sandboxes?metadata=a%253Db&state=running,paused&limit=100", "", "", 200, ""},
		{"connect needs a timeout", "POST", "/sandboxes/iabc/connect", jsonType, `{}`, 400, "/timeout: property is required"},
		{"connect timeout is at least 0", "POST", "/sandboxes/iabc/connect", jsonType, `{"timeout":-5}`, 400, "at least 0"},
		{"connect timeout above the tier's hour is refused", "POST", "/sandboxes/iabc/connect", jsonType, `{"timeout":7200}`, 400, "1 hours"},
		{"connect to a sandbox it does not have is 404", "POST", "/sandboxes/iabc/connect", jsonType, `{"timeout":0}`, 404, "iabc"},
		{"a sandbox id is lower-case letters and digits", "DELETE", "/sandboxes/I_ABC", "", "", 400, "invalid sandbox ID"},
		{"a delete of a sandbox it does not have is 404", "DELETE", "/sandboxes/iabc", "", "", 404, "iabc"},
		{"a route the document does not have is 404", "POST", "/v1/sandboxes", jsonType, valid, 404, "no matching operation"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := e2bfake.New(t, key, "berth-headless")
			status, out := call(t, f, c.method, c.path, c.ct, c.body)
			msg, _ := out["message"].(string)
			if status != c.status || !strings.Contains(msg, c.msg) {
				t.Errorf("%s %s %s: %d %q, want %d with %q", c.method, c.path, c.body, status, msg, c.status, c.msg)
			}
			if status >= 400 {
				if code, _ := out["code"].(float64); int(code) != status {
					t.Errorf("error answer %v: want {code: %d, message}", out, status)
				}
			}
		})
	}
}

// TestCreateAnswer checks what a create answers: a secure sandbox has an
// envd access token, one with closed port URLs a traffic token, and a
// longer timeout is accepted on an account whose tier allows it.
func TestCreateAnswer(t *testing.T) {
	f := e2bfake.New(t, key, "berth-headless")
	status, out := call(t, f, "POST", "/sandboxes", "application/json", valid)
	if status != 201 {
		t.Fatalf("create: %d %v", status, out)
	}
	for _, k := range []string{"sandboxID", "templateID", "clientID", "envdVersion", "envdAccessToken", "trafficAccessToken", "domain"} {
		if s, _ := out[k].(string); s == "" {
			t.Errorf("the answer has no %s: %v", k, out)
		}
	}
	sbs := f.Sandboxes()
	if len(sbs) != 1 || sbs[0].Secure == nil || !*sbs[0].Secure || sbs[0].Public || sbs[0].Timeout != 960 {
		t.Errorf("sandboxes %+v", sbs)
	}
	if status, out := call(t, f, "POST", "/sandboxes", "application/json", `{"templateID":"berth-headless"}`); status != 201 || out["envdAccessToken"] != nil || out["trafficAccessToken"] != nil {
		t.Errorf("create without secure, public: %d %v, want no tokens", status, out)
	}
	f.SetMaxLengthHours(24)
	if status, out := call(t, f, "POST", "/sandboxes", "application/json", with("timeout", "86400")); status != 201 {
		t.Errorf("a day on a 24-hour tier: %d %v", status, out)
	}
}
