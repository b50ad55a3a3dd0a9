package apiserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/berthdev/berth/relay/relayserver"
)

// TestRelayReport: a relay's report of its lenders is taken with
// RELAY_TOKEN only, refused with the field and its limit when wrong, and
// the route is unknown while no relay token is set.
func TestRelayReport(t *testing.T) {
	e := newEnv(t)
	const relayToken = "relay-report-token-0123456789"
	var mu sync.Mutex
	var got []relayserver.Report
	e.h.RelayReport = func(_ context.Context, r relayserver.Report) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, r)
		return nil
	}
	post := func(tok string, body []byte) (int, string) {
		req, _ := http.NewRequest("POST", e.srv.URL+relayserver.ReportPath, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if tok != "" {
			req.Header.Set(relayserver.TokenHeader, tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		json.NewDecoder(resp.Body).Decode(&b)
		return resp.StatusCode, b.Error.Message
	}
	good, _ := json.Marshal(relayserver.Report{Relay: "http://10.0.0.5:8081", LeaseSeconds: 6,
		Lenders: []relayserver.PresenceInfo{{LenderID: "cp_a", Online: true}}})

	// No relay token set: the route is not there.
	if st, _ := post(relayToken, good); st != 404 {
		t.Fatalf("without RELAY_TOKEN: %d, want 404", st)
	}
	e.h.RelayToken = relayToken
	if st, _ := post("", good); st != 401 {
		t.Fatalf("without the token: %d, want 401", st)
	}
	if st, _ := post("wrong-relay-token-0123456789", good); st != 401 {
		t.Fatalf("with a wrong token: %d, want 401", st)
	}
	if st, msg := post(relayToken, good); st != 204 {
		t.Fatalf("a good report: %d %s", st, msg)
	}
	for _, tc := range []struct {
		name string
		body string
		want int
		msg  string
	}{
		{"lease too short", `{"relay":"http://10.0.0.5:8081","leaseSeconds":1,"lenders":[]}`, 400, "leaseSeconds: 1 is not within 2..300"},
		{"lease too long", `{"relay":"http://10.0.0.5:8081","leaseSeconds":301,"lenders":[]}`, 400, "leaseSeconds"},
		{"relay with a path", `{"relay":"http://10.0.0.5:8081/x","leaseSeconds":6,"lenders":[]}`, 400, "relay:"},
		{"relay not http", `{"relay":"ftp://10.0.0.5","leaseSeconds":6,"lenders":[]}`, 400, "relay:"},
		{"relay with a user", `{"relay":"http://u:p@10.0.0.5:8081","leaseSeconds":6,"lenders":[]}`, 400, "relay:"},
		{"lender without id", `{"relay":"http://10.0.0.5:8081","leaseSeconds":6,"lenders":[{"online":true}]}`, 400, "lenders[0].agentId"},
		{"lender id too long", `{"relay":"http://10.0.0.5:8081","leaseSeconds":6,"lenders":[{"agentId":"` + strings.Repeat("x", 129) + `"}]}`, 400, "want 1 to 128 characters"},
		{"too many lenders", `{"relay":"http://10.0.0.5:8081","leaseSeconds":6,"lenders":[` + strings.Repeat(`{"agentId":"cp_a"},`, 10000) + `{"agentId":"cp_b"}]}`, 400, "lenders: 10001 is more than 10000"},
		{"unknown field", `{"relay":"http://10.0.0.5:8081","leaseSeconds":6,"lenders":[],"extra":1}`, 400, "extra"},
		{"too large", `{"relay":"http://10.0.0.5:8081","leaseSeconds":6,"lenders":[` + strings.Repeat(`{"agentId":"cp_aaaaaaaaaaaaaaaa","online":true},`, 100000) + `{}]}`, 413, "larger than"},
	} {
		if st, msg := post(relayToken, []byte(tc.body)); st != tc.want || !strings.Contains(msg, tc.msg) {
			t.Errorf("%s: %d %q, want %d with %q", tc.name, st, msg, tc.want, tc.msg)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0].Relay != "http://10.0.0.5:8081" || got[0].Lenders[0].LenderID != "cp_a" {
		t.Fatalf("recorded %+v, want the one good report", got)
	}
}
