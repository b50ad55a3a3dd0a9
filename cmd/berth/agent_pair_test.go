package main

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zalando/go-keyring"

	"github.com/berthdev/berth/agent/credstore"
)

const pairToken = "c2VjcmV0LXRva2VuLW9mLXRoZS1jb21wYW5pb24tYWdlbnQ"

// pairEnv points the agent's files at a temp dir and breaks the keyring,
// as on a headless machine, so that pairing uses the encrypted file.
func pairEnv(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "berth")
	t.Setenv(configDirEnv, dir)
	keyring.MockInitWithError(errors.New("dbus: no secret service"))
	return dir
}

func TestAgentPair(t *testing.T) {
	dir := pairEnv(t)
	s := newSupervisor(t)
	s.on("POST /v1/companions/pair", http.StatusCreated, `{"agentId":"cp_abc","token":"`+pairToken+`"}`)
	r := run(t, "", "agent", "pair", "ABCD-EFGH-JK", "--supervisor", s.URL+"/", "--name", "lab laptop")
	r.want(t, 0, "paired as companion cp_abc with "+s.URL+"; token kept in an encrypted file in "+dir+" (no OS keyring available)\n", "")
	if strings.Contains(r.stdout+r.stderr, pairToken) {
		t.Errorf("the token was printed")
	}
	calls := s.requests()
	if len(calls) != 1 {
		t.Fatalf("%d requests, want 1", len(calls))
	}
	if calls[0].Auth != "" {
		t.Errorf("pairing sent Authorization %q; it takes no operator token", calls[0].Auth)
	}
	jsonEqual(t, calls[0].Body, `{"code":"ABCD-EFGH-JK","name":"lab laptop"}`)

	cs, err := credstore.New(credstore.WithDir(dir), credstore.FileOnly())
	if err != nil {
		t.Fatal(err)
	}
	got, err := cs.Load()
	want := credstore.Credentials{LenderID: "cp_abc", Token: pairToken, SupervisorURL: s.URL}
	if err != nil || got != want {
		t.Fatalf("stored credentials = %+v, %v; want %+v", got, err, want)
	}
	fi, err := os.Stat(filepath.Join(dir, credstore.FileName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("credentials file: %v, %v", fi, err)
	}
}

func TestAgentPairJSON(t *testing.T) {
	pairEnv(t)
	s := newSupervisor(t)
	s.on("POST /v1/companions/pair", http.StatusCreated, `{"agentId":"cp_abc","token":"`+pairToken+`"}`)
	r := run(t, "", "agent", "pair", "ABCD-EFGH-JK", "--supervisor", s.URL, "--json")
	if r.code != 0 {
		t.Fatalf("%+v", r)
	}
	jsonEqual(t, r.stdout, `{"agentId":"cp_abc","supervisorUrl":"`+s.URL+`","storedIn":"file"}`)
}

func TestAgentPairRefused(t *testing.T) {
	dir := pairEnv(t)
	s := newSupervisor(t)
	s.on("POST /v1/companions/pair", http.StatusForbidden,
		`{"error":{"code":"pair_code_invalid","message":"pairing code unknown, expired or already used"}}`)
	r := run(t, "", "agent", "pair", "ABCD-EFGH-JK", "--supervisor", s.URL)
	r.want(t, 1, "", "berth: pair: pairing code unknown, expired or already used (pair_code_invalid)\n")
	if _, err := os.Stat(filepath.Join(dir, credstore.FileName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("credentials stored after a refusal: %v", err)
	}
	if n := len(s.requests()); n != 1 {
		t.Errorf("%d requests, want 1 (a code is not retried)", n)
	}
}

func TestAgentPairUsage(t *testing.T) {
	pairEnv(t)
	for _, args := range [][]string{
		{"agent", "pair", "ABCD-EFGH-JK"},
		{"agent", "pair", "--supervisor", "http://127.0.0.1:1"},
		{"agent", "pair", "ABCD-EFGH-JK", "--supervisor", "127.0.0.1:8080"},
	} {
		if r := run(t, "", args...); r.code != exitUsage {
			t.Errorf("berth %s: exit %d, want %d", strings.Join(args, " "), r.code, exitUsage)
		}
	}
}

// TestAgentPairRefusesPlainHTTP: the token would travel in clear to a
// host that is not loopback, so pairing refuses before any network call.
func TestAgentPairRefusesPlainHTTP(t *testing.T) {
	pairEnv(t)
	r := run(t, "", "agent", "pair", "ABCD-EFGH-JK", "--supervisor", "http://192.0.2.10:8080")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--insecure") || !strings.Contains(r.stderr, "http://192.0.2.10:8080") ||
		!strings.Contains(r.stderr, "https://") {
		t.Fatalf("pair over plain http: %d %q", r.code, r.stderr)
	}
}
