package apiserver_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/supervisor"
)

// anon does a request without the operator token; it returns the status,
// the error code if any, and decodes a 2xx answer into out.
func (e *env) anon(method, path string, body any, out any) (int, string) {
	e.t.Helper()
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequest(method, e.srv.URL+path, bytes.NewReader(raw))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 400 {
		var eb struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if err := json.Unmarshal(data, &eb); err != nil || eb.Error.Code == "" || eb.Error.Message == "" {
			e.t.Fatalf("%s %s: status %d without an error envelope: %s", method, path, resp.StatusCode, data)
		}
		return resp.StatusCode, eb.Error.Code
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			e.t.Fatalf("%s %s: decode %s: %v", method, path, data, err)
		}
	}
	return resp.StatusCode, ""
}

var pairCodeRE = regexp.MustCompile(`^[A-HJKMNP-TV-Z2-9]{4}-[A-HJKMNP-TV-Z2-9]{4}-[A-HJKMNP-TV-Z2-9]{2}$`)

func (e *env) pairCode(body any) supervisor.PairCode {
	e.t.Helper()
	var pc supervisor.PairCode
	e.mustCall("POST", "/v1/companions/pair-codes", body, http.StatusCreated, &pc)
	if !pairCodeRE.MatchString(pc.Code) {
		e.t.Fatalf("pairing code %q is not like ABCD-EFGH-JK", pc.Code)
	}
	return pc
}

// checkLogs fails when the supervisor's log holds any of the secrets.
func (e *env) checkLogs(secrets ...string) {
	e.t.Helper()
	logs := e.logs.String()
	for _, s := range secrets {
		if s != "" && strings.Contains(logs, s) {
			e.t.Errorf("log holds the secret %q:\n%s", s, logs)
		}
	}
}

func TestPairOnce(t *testing.T) {
	e := newEnv(t)
	pc := e.pairCode(map[string]string{"name": "lab laptop"})
	if want := e.clock.Now().Add(10 * time.Minute); !pc.ExpiresAt.Equal(want) {
		t.Errorf("expiresAt = %s, want %s", pc.ExpiresAt, want)
	}

	// The code is accepted in any case and with spaces for dashes.
	typed := strings.ToLower(strings.ReplaceAll(pc.Code, "-", " "))
	var p supervisor.Paired
	if st, code := e.anon("POST", "/v1/companions/pair", map[string]string{"code": typed}, &p); st != http.StatusCreated {
		t.Fatalf("pair: %d %s", st, code)
	}
	if !strings.HasPrefix(p.LenderID, "cp_") {
		t.Errorf("agentId = %q", p.LenderID)
	}
	if raw, err := base64.RawURLEncoding.DecodeString(p.Token); err != nil || len(raw) != 32 {
		t.Errorf("token %q is not 32 bytes of base64url (%v)", p.Token, err)
	}
	c, err := e.svc.AuthenticateCompanion(t.Context(), p.Token)
	if err != nil || c.ID != p.LenderID || c.Name != "lab laptop" {
		t.Errorf("companion by token: %+v, %v", c, err)
	}
	if _, err := e.svc.AuthenticateCompanion(t.Context(), p.Token+"x"); supervisor.AsError(err).Status != http.StatusUnauthorized {
		t.Errorf("wrong token: %v, want 401", err)
	}

	// A second redeem is refused, the same way as an unknown code.
	for _, code := range []string{pc.Code, "ABCD-EFGH-JK", "short"} {
		if st, ec := e.anon("POST", "/v1/companions/pair", map[string]string{"code": code}, nil); st != http.StatusForbidden || ec != supervisor.CodePairInvalid {
			t.Errorf("pair with %q: %d %s, want 403 %s", code, st, ec, supervisor.CodePairInvalid)
		}
	}
	if st, ec := e.anon("POST", "/v1/companions/pair", map[string]string{}, nil); st != http.StatusBadRequest {
		t.Errorf("pair without a code: %d %s, want 400", st, ec)
	}
	e.checkLogs(pc.Code, p.Token, typed)
	if !strings.Contains(e.logs.String(), "pairing refused") || !strings.Contains(e.logs.String(), "companion paired") {
		t.Errorf("log lacks the pairing events:\n%s", e.logs)
	}
}

func TestPairNameFromAgent(t *testing.T) {
	e := newEnv(t)
	pc := e.pairCode(nil) // no body at all
	var p supervisor.Paired
	if st, code := e.anon("POST", "/v1/companions/pair", map[string]string{"code": pc.Code, "name": "desk pc"}, &p); st != http.StatusCreated {
		t.Fatalf("pair: %d %s", st, code)
	}
	c, err := e.st.GetCompanion(t.Context(), p.LenderID)
	if err != nil || c.Name != "desk pc" {
		t.Errorf("companion = %+v, %v", c, err)
	}
	if c.TokenHash == p.Token || strings.Contains(c.TokenHash, p.Token) {
		t.Errorf("the store holds the token itself")
	}
}

func TestPairCodeExpires(t *testing.T) {
	e := newEnv(t)
	pc := e.pairCode(map[string]string{})
	e.clock.Advance(11 * time.Minute)
	if st, ec := e.anon("POST", "/v1/companions/pair", map[string]string{"code": pc.Code}, nil); st != http.StatusForbidden || ec != supervisor.CodePairInvalid {
		t.Errorf("pair after 11 minutes: %d %s, want 403 %s", st, ec, supervisor.CodePairInvalid)
	}
	e.checkLogs(pc.Code)
}

func TestPairConcurrentOneWinner(t *testing.T) {
	e := newEnv(t)
	e.h.SetPairLimit(0, 0) // every redeem comes from one address
	pc := e.pairCode(nil)
	const n = 10
	var wg sync.WaitGroup
	statuses := make([]int, n)
	tokens := make([]string, n)
	for i := range n {
		wg.Go(func() {
			var p supervisor.Paired
			statuses[i], _ = e.anon("POST", "/v1/companions/pair", map[string]string{"code": pc.Code}, &p)
			tokens[i] = p.Token
		})
	}
	wg.Wait()
	won := 0
	for i, st := range statuses {
		switch st {
		case http.StatusCreated:
			won++
		case http.StatusForbidden:
		default:
			t.Errorf("redeem %d: status %d", i, st)
		}
	}
	if won != 1 {
		t.Fatalf("%d redeems won, want 1 (statuses %v)", won, statuses)
	}
	e.checkLogs(append(tokens, pc.Code)...)
}

func TestPairCodesNeedOperator(t *testing.T) {
	e := newEnv(t)
	for _, auth := range []string{"", "Bearer wrong"} {
		req, _ := http.NewRequest("POST", e.srv.URL+"/v1/companions/pair-codes", strings.NewReader(`{}`))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("pair-codes with %q: status %d, want 401", auth, resp.StatusCode)
		}
	}
	if st, _ := e.call("POST", "/v1/companions/pair-codes", map[string]any{"name": strings.Repeat("n", 201)}, nil); st != http.StatusBadRequest {
		t.Errorf("long name: status %d, want 400", st)
	}
	if st, _ := e.call("POST", "/v1/companions/pair-codes", `{"bogus":1}`, nil); st != http.StatusBadRequest {
		t.Errorf("unknown field: status %d, want 400", st)
	}
}
