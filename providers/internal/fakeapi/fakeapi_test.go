package fakeapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/internal/token"
)

func TestMain(m *testing.M) {
	testkit.VerifyTestMain(m)
}

func TestFaults(t *testing.T) {
	var creates atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("POST /things", func(w http.ResponseWriter, r *http.Request) {
		creates.Add(1)
		WriteJSON(w, http.StatusCreated, map[string]string{"id": "t1"})
	})
	mux.HandleFunc("DELETE /things/{id}", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	s := New(t, mux, Options{
		Authorized: func(r *http.Request) bool { return r.Header.Get("X-Key") == "k" },
		Kind: func(r *http.Request) Kind {
			if r.Method == http.MethodPost {
				return Create
			}
			if r.Method == http.MethodDelete {
				return Delete
			}
			return Other
		},
	})
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	do := func(method, path, key string) (int, error) {
		req, _ := http.NewRequestWithContext(t.Context(), method, s.URL+path, strings.NewReader(`{"a":1}`))
		req.Header.Set("X-Key", key)
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if st, _ := do("POST", "/things", "wrong"); st != http.StatusUnauthorized {
		t.Errorf("wrong key: %d", st)
	}
	s.RefuseCredentials(true)
	if st, _ := do("POST", "/things", "k"); st != http.StatusUnauthorized {
		t.Errorf("refused: %d", st)
	}
	s.RefuseCredentials(false)
	s.FailNext(http.StatusTooManyRequests, http.StatusBadGateway)
	for _, want := range []int{429, 502, 201} {
		if st, _ := do("POST", "/things", "k"); st != want {
			t.Errorf("status %d, want %d", st, want)
		}
	}
	s.LoseNextCreateReply()
	before := creates.Load()
	if st, err := do("POST", "/things", "k"); err == nil {
		t.Errorf("lost reply answered %d", st)
	}
	if creates.Load() != before+1 {
		t.Error("the create whose reply was lost did not run")
	}
	s.FailNextDeletes(2)
	for _, want := range []int{500, 500, 204} {
		if st, _ := do("DELETE", "/things/t1", "k"); st != want {
			t.Errorf("delete %d, want %d", st, want)
		}
	}
	if n := s.Count(func(r Request) bool { return r.Method == "DELETE" && r.Status == 500 }); n != 2 {
		t.Errorf("logged failed deletes: %d", n)
	}
	if rs := s.Requests(); len(rs) == 0 || string(rs[0].Body) != `{"a":1}` || rs[0].Header.Get("X-Key") != "wrong" {
		t.Errorf("request log %+v", rs)
	}
}

// TestEchoHeaders repeats the request's header values in the error
// answers it plays, and only while on.
func TestEchoHeaders(t *testing.T) {
	s := New(t, http.NotFoundHandler(), Options{})
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	get := func() string {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", s.URL+"/x", nil)
		req.Header.Set("X-Key", "sk_echoed")
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	s.RefuseCredentials(true)
	if b := get(); strings.Contains(b, "sk_echoed") {
		t.Errorf("echoed while off: %s", b)
	}
	s.EchoHeaders(true)
	if b := get(); !strings.Contains(b, "sk_echoed") {
		t.Errorf("refused answer %s: want the key echoed", b)
	}
	s.RefuseCredentials(false)
	s.FailNext(http.StatusServiceUnavailable)
	if b := get(); !strings.Contains(b, "sk_echoed") {
		t.Errorf("503 answer %s: want the key echoed", b)
	}
}

func TestComputer(t *testing.T) {
	c, err := StartComputer(t.TempDir(), token.Hash("tok"), map[string]string{"MACHINE_VAR": "yes"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	cl := computerd.NewClient(c.URL, "tok", computerd.WithTransport(tr))
	ctx, cancel := context.WithTimeout(t.Context(), 30e9)
	defer cancel()
	res, err := cl.Exec(ctx, computerd.ExecRequest{Command: "echo $MACHINE_VAR $OWN", TimeoutMs: 10000, Env: map[string]string{"OWN": "mine"}})
	if err != nil || res.Stdout != "yes mine\n" {
		t.Errorf("exec: %+v %v: want the machine's and the request's variables", res, err)
	}
	if _, err := computerd.NewClient(c.URL, "other", computerd.WithTransport(tr)).Processes(ctx); err == nil {
		t.Error("another token was accepted")
	}
	raw, _ := json.Marshal(c.Env)
	if !strings.Contains(string(raw), "MACHINE_VAR") {
		t.Errorf("Env %s", raw)
	}
}
