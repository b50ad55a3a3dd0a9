package main

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const runningSession = `{"id":"s1","state":"running","provider":"docker","image":"headless","startedAt":"2025-01-02T03:04:05Z","expiresAt":"2025-01-02T03:19:05Z","remainingSeconds":900}`

func TestConnect(t *testing.T) {
	s := newSupervisor(t)
	s.on("POST /v1/computers", http.StatusCreated, `{"agent":"a1","provider":"e2b","image":"desktop","leaseSeconds":600,"dailySeconds":7200,"createdAt":"2025-01-02T03:04:05Z"}`)
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte("secret-from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run(t, "", "computer", "connect", "--agent", "a1", "--provider", "e2b", "--lease", "600", "--daily", "7200",
		"--image", "desktop", "--credential", "apiKey=@"+keyFile, "--credential", "note=a=b,c").
		want(t, 0, "connected agent a1 to e2b: image desktop, sessions up to 10m0s, 2h0m0s a day\n", "")
	c := s.only(t)
	if c.Method != "POST" || c.Path != "/v1/computers" {
		t.Errorf("request = %+v", c)
	}
	jsonEqual(t, c.Body, `{"agent":"a1","provider":"e2b","credentials":{"apiKey":"secret-from-file","note":"a=b,c"},"leaseSeconds":600,"dailySeconds":7200,"image":"desktop"}`)
}

func TestConnectDefaults(t *testing.T) {
	s := newSupervisor(t)
	s.on("POST /v1/computers", http.StatusCreated, `{"agent":"a1","provider":"docker","image":"headless","leaseSeconds":900,"dailySeconds":3600}`)
	if r := run(t, "", "computer", "connect", "--agent", "a1"); r.code != 0 {
		t.Fatalf("%+v", r)
	}
	jsonEqual(t, s.only(t).Body, `{"agent":"a1"}`)
}

func TestConnectConflict(t *testing.T) {
	s := newSupervisor(t)
	s.on("POST /v1/computers", http.StatusConflict, `{"error":{"code":"conflict","message":"agent a1 already has a connection"}}`)
	r := run(t, "", "computer", "connect", "--agent", "a1", "--provider", "docker", "--credential", "apiKey=hunter2")
	r.want(t, exitFailure, "", "berth: agent a1 already has a connection (conflict)\n")
}

func TestStart(t *testing.T) {
	s := newSupervisor(t)
	s.on("POST /v1/agents/a1/computer/start", http.StatusOK, runningSession)
	run(t, "", "computer", "start", "--agent", "a1").
		want(t, 0, "session s1 running on docker (headless), 15m0s left, until 2025-01-02T03:19:05Z\n", "")
	c := s.only(t)
	if c.Method != "POST" || c.Path != "/v1/agents/a1/computer/start" || c.Key == "" || c.Body != "" {
		t.Errorf("request = %+v", c)
	}
}

func TestStartJSON(t *testing.T) {
	s := newSupervisor(t)
	s.on("POST /v1/agents/a1/computer/start", http.StatusOK, runningSession)
	r := run(t, "", "--json", "computer", "start", "--agent", "a1")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("%+v", r)
	}
	jsonEqual(t, r.stdout, runningSession)
}

func TestStartUncertain(t *testing.T) {
	s := newSupervisor(t)
	s.on("POST /v1/agents/a1/computer/start", http.StatusOK, `{"id":"s1","state":"uncertain","provider":"e2b","message":"the provider's reply was lost"}`)
	run(t, "", "computer", "start", "--agent", "a1").want(t, 0, "session s1 uncertain on e2b\n",
		"berth: the provider's reply was lost\n"+
			"berth: check provider e2b for a machine of this session and remove it, then run: berth computer confirm-cleanup --agent a1\n")
}

func TestStatus(t *testing.T) {
	s := newSupervisor(t)
	s.on("GET /v1/agents/a1/computer", http.StatusOK, `{
		"connection":{"agent":"a1","provider":"docker","image":"headless","leaseSeconds":900,"dailySeconds":3600,"createdAt":"2025-01-01T00:00:00Z"},
		"session":`+runningSession+`,
		"budget":{"day":"2025-01-02","dailySeconds":3600,"usedSeconds":600,"reservedSeconds":900,"leftSeconds":2100,"resetsAt":"2025-01-03T00:00:00Z"}}`)
	run(t, "", "computer", "status", "--agent", "a1").want(t, 0, ""+
		"agent     a1\n"+
		"provider  docker\n"+
		"image     headless\n"+
		"lease     15m0s\n"+
		"session   s1 running on docker (headless), 15m0s left, until 2025-01-02T03:19:05Z\n"+
		"budget    35m0s left of 1h0m0s today (10m0s used, 15m0s reserved), resets 2025-01-03T00:00:00Z\n", "")
	if c := s.only(t); c.Method != "GET" || c.Key != "" {
		t.Errorf("request = %+v", c)
	}
}

func TestStatusNoSession(t *testing.T) {
	s := newSupervisor(t)
	s.on("GET /v1/agents/a1/computer", http.StatusOK, `{"connection":{"agent":"a1","provider":"docker"},"session":null,"budget":{"leftSeconds":3600,"dailySeconds":3600}}`)
	r := run(t, "", "computer", "status", "--agent", "a1")
	if r.code != 0 || !strings.Contains(r.stdout, "session   none\n") {
		t.Errorf("%+v", r)
	}
	r = run(t, "", "computer", "status", "--agent", "a1", "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"session": null`) {
		t.Errorf("%+v", r)
	}
}

func TestStopDisconnectConfirm(t *testing.T) {
	s := newSupervisor(t)
	s.on("POST /v1/agents/a1/computer/stop", http.StatusOK, `{"id":"s1","state":"stopped","provider":"docker"}`)
	s.on("DELETE /v1/agents/a1/computer", http.StatusOK, `{"agent":"a1","disconnected":true}`)
	s.on("POST /v1/agents/a1/computer/confirm-cleanup", http.StatusOK, `{"id":"s0","state":"stopped","provider":"e2b"}`)
	run(t, "", "computer", "stop", "--agent", "a1").want(t, 0, "session s1 stopped on docker\n", "")
	run(t, "", "computer", "disconnect", "--agent", "a1").want(t, 0, "disconnected agent a1\n", "")
	run(t, "", "computer", "confirm-cleanup", "--agent", "a1").want(t, 0, "cleanup confirmed; session s0 stopped on e2b\n", "")
	calls := s.requests()
	if len(calls) != 3 {
		t.Fatalf("%d requests", len(calls))
	}
	for i, want := range []string{"POST /v1/agents/a1/computer/stop", "DELETE /v1/agents/a1/computer", "POST /v1/agents/a1/computer/confirm-cleanup"} {
		if got := calls[i].Method + " " + calls[i].Path; got != want || calls[i].Key == "" {
			t.Errorf("request %d = %s (key %q), want %s", i, got, calls[i].Key, want)
		}
	}
	jsonEqual(t, calls[2].Body, `{"providerCleanupConfirmed":true}`)
}

func TestExec(t *testing.T) {
	s := newSupervisor(t)
	s.on("POST /v1/agents/a1/computer/exec", http.StatusOK, `{"exitCode":3,"stdout":"out\n","stderr":"err\n","truncated":false,"timedOut":false,"uncertain":false}`)
	run(t, "", "computer", "exec", "--agent", "a1", "--timeout", "30", "--", "ls", "-la", "'/tmp/a b'").
		want(t, 3, "out\n", "err\n")
	jsonEqual(t, s.only(t).Body, `{"command":"ls -la '/tmp/a b'","timeoutSeconds":30}`)
}

func TestExecWithoutDash(t *testing.T) {
	s := newSupervisor(t)
	s.on("POST /v1/agents/a1/computer/exec", http.StatusOK, `{"exitCode":0,"stdout":"ok"}`)
	// Flags after the command's first word belong to the command.
	run(t, "", "computer", "exec", "--agent", "a1", "grep", "-r", "--agent", "x").want(t, 0, "ok", "")
	jsonEqual(t, s.only(t).Body, `{"command":"grep -r --agent x"}`)
}

func TestExecOutcomes(t *testing.T) {
	tests := []struct {
		name   string
		answer string
		code   int
		stderr []string
	}{
		{
			name:   "truncated",
			answer: `{"exitCode":0,"stdout":"aaa","truncated":true}`,
			code:   0,
			stderr: []string{"berth: the output was truncated"},
		},
		{
			name:   "timed out",
			answer: `{"exitCode":-1,"stdout":"","timedOut":true}`,
			code:   exitTimedOut,
			stderr: []string{"berth: the command timed out after 5 s"},
		},
		{
			name:   "uncertain",
			answer: `{"exitCode":0,"uncertain":true,"advice":"Run ls to see whether the file exists."}`,
			code:   exitUncertain,
			stderr: []string{"berth: the command's outcome is uncertain", "Inspect the computer before repeating", "berth: Run ls to see whether the file exists."},
		},
		{
			name:   "odd exit code",
			answer: `{"exitCode":-9}`,
			code:   exitFailure,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSupervisor(t)
			s.on("POST /v1/agents/a1/computer/exec", http.StatusOK, tt.answer)
			r := run(t, "", "computer", "exec", "--agent", "a1", "--timeout", "5", "--", "touch", "x")
			if r.code != tt.code {
				t.Errorf("exit code = %d, want %d", r.code, tt.code)
			}
			for _, want := range tt.stderr {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("stderr = %q, want %q", r.stderr, want)
				}
			}
			if len(tt.stderr) == 0 && r.stderr != "" {
				t.Errorf("stderr = %q", r.stderr)
			}
		})
	}
}

func TestExecJSON(t *testing.T) {
	s := newSupervisor(t)
	answer := `{"exitCode":2,"stdout":"o","stderr":"e","truncated":false,"timedOut":false,"uncertain":false}`
	s.on("POST /v1/agents/a1/computer/exec", http.StatusOK, answer)
	r := run(t, "", "computer", "exec", "--json", "--agent", "a1", "false")
	if r.code != 2 || r.stderr != "" {
		t.Errorf("%+v", r)
	}
	jsonEqual(t, r.stdout, answer)
}

func TestRead(t *testing.T) {
	s := newSupervisor(t)
	s.on("POST /v1/agents/a1/computer/read_file", http.StatusOK, `{"content":"part one ","truncated":true,"nextOffset":9}`)
	run(t, "", "computer", "read", "--agent", "a1", "/home/user/notes.txt").want(t, 0, "part one ",
		"berth: /home/user/notes.txt continues at offset 9: pass --offset 9 for the next part, or --all\n")
	jsonEqual(t, s.only(t).Body, `{"path":"/home/user/notes.txt"}`)
}

func TestReadOffset(t *testing.T) {
	s := newSupervisor(t)
	s.on("POST /v1/agents/a1/computer/read_file", http.StatusOK, `{"content":"two","truncated":false}`)
	run(t, "", "computer", "read", "--agent", "a1", "f.txt", "--offset", "9").want(t, 0, "two", "")
	jsonEqual(t, s.only(t).Body, `{"path":"f.txt","offset":9}`)
}

func TestReadAll(t *testing.T) {
	s := newSupervisor(t)
	s.on("POST /v1/agents/a1/computer/read_file", http.StatusOK, `{"content":"one ","truncated":true,"nextOffset":4}`)
	s.on("POST /v1/agents/a1/computer/read_file", http.StatusOK, `{"content":"two ","truncated":true,"nextOffset":8}`)
	s.on("POST /v1/agents/a1/computer/read_file", http.StatusOK, `{"content":"three","truncated":false}`)
	run(t, "", "computer", "read", "--agent", "a1", "--all", "f.txt").want(t, 0, "one two three", "")
	calls := s.requests()
	if len(calls) != 3 {
		t.Fatalf("%d requests, want 3", len(calls))
	}
	for i, want := range []string{`{"path":"f.txt"}`, `{"path":"f.txt","offset":4}`, `{"path":"f.txt","offset":8}`} {
		jsonEqual(t, calls[i].Body, want)
	}
	if calls[0].Key == calls[1].Key {
		t.Error("two reads share an idempotency key")
	}
}

func TestReadAllStopsWithoutProgress(t *testing.T) {
	s := newSupervisor(t)
	s.on("POST /v1/agents/a1/computer/read_file", http.StatusOK, `{"content":"x","truncated":true}`)
	r := run(t, "", "computer", "read", "--agent", "a1", "--all", "f.txt")
	if r.code != exitFailure || !strings.Contains(r.stderr, "without a later offset") || len(s.requests()) != 1 {
		t.Errorf("%+v after %d requests", r, len(s.requests()))
	}
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func TestWriteFromStdin(t *testing.T) {
	s := newSupervisor(t)
	content := "hello, wörld\n"
	s.on("POST /v1/agents/a1/computer/write_file", http.StatusOK, `{"bytes":14,"sha256":"`+sha(content)+`"}`)
	run(t, content, "computer", "write", "--agent", "a1", "/tmp/hello.txt").
		want(t, 0, "wrote 14 bytes to /tmp/hello.txt, sha256 "+sha(content)+"\n", "")
	c := s.only(t)
	if c.Key == "" {
		t.Error("no idempotency key")
	}
	jsonEqual(t, c.Body, `{"path":"/tmp/hello.txt","content":"hello, wörld\n"}`)
}

func TestWriteFromFile(t *testing.T) {
	s := newSupervisor(t)
	local := filepath.Join(t.TempDir(), "in.txt")
	if err := os.WriteFile(local, []byte("abc"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.on("POST /v1/agents/a1/computer/write_file", http.StatusOK, `{"bytes":3,"sha256":"`+sha("abc")+`"}`)
	r := run(t, "ignored", "computer", "write", "--agent", "a1", "out.txt", "--file", local)
	if r.code != 0 {
		t.Fatalf("%+v", r)
	}
	jsonEqual(t, s.only(t).Body, `{"path":"out.txt","content":"abc"}`)
}

func TestWriteMismatch(t *testing.T) {
	s := newSupervisor(t)
	s.on("POST /v1/agents/a1/computer/write_file", http.StatusOK, `{"bytes":3,"sha256":"`+sha("abd")+`"}`)
	r := run(t, "abc", "computer", "write", "--agent", "a1", "out.txt")
	if r.code != exitFailure || r.stdout != "" || !strings.Contains(r.stderr, "berth: out.txt: the computer has 3 bytes with sha256 "+sha("abd")) {
		t.Errorf("%+v", r)
	}
}

func TestWriteRefusesBinary(t *testing.T) {
	s := newSupervisor(t)
	r := run(t, "\xff\xfe", "computer", "write", "--agent", "a1", "out.bin")
	if r.code != exitFailure || !strings.Contains(r.stderr, "not valid UTF-8") {
		t.Errorf("%+v", r)
	}
	if len(s.requests()) != 0 {
		t.Error("binary content was sent")
	}
}

func TestConnectDesktopAndBrowserOptions(t *testing.T) {
	s := newSupervisor(t)
	s.on("POST /v1/computers", http.StatusCreated, `{"agent":"a1","provider":"docker","image":"desktop","leaseSeconds":900,"dailySeconds":3600,
		"persistence":"none","desktopUsers":2,"browserEvaluate":true,"createdAt":"2025-01-02T03:04:05Z"}`)
	run(t, "", "computer", "connect", "--agent", "a1", "--provider", "docker", "--image", "desktop", "--desktop-users", "2", "--browser-evaluate").
		want(t, 0, "connected agent a1 to docker: image desktop, sessions up to 15m0s, 1h0m0s a day; "+
			"2 callers may use the desktop at once; browser evaluate allowed\n", "")
	jsonEqual(t, s.only(t).Body, `{"agent":"a1","provider":"docker","image":"desktop","desktopUsers":2,"browserEvaluate":true}`)

	s = newSupervisor(t)
	s.on("POST /v1/computers", http.StatusCreated, `{"agent":"b1","provider":"browserbase","image":"headless","leaseSeconds":900,"dailySeconds":3600,
		"persistence":"none","desktopUsers":1,"browserRecording":true,"browserProxyCountry":"de","createdAt":"2025-01-02T03:04:05Z"}`)
	run(t, "", "computer", "connect", "--agent", "b1", "--provider", "browserbase", "--credential", "apiKey=k", "--browser-recording", "--browser-proxy-country", "de").
		want(t, 0, "connected agent b1 to browserbase: image headless, sessions up to 15m0s, 1h0m0s a day; sessions recorded; proxy in de\n", "")
	jsonEqual(t, s.only(t).Body, `{"agent":"b1","provider":"browserbase","credentials":{"apiKey":"k"},"browserRecording":true,"browserProxyCountry":"de"}`)

	if r := run(t, "", "computer", "connect", "--agent", "a1", "--desktop-users", "0"); r.code != exitUsage || !strings.Contains(r.stderr, "--desktop-users 0: want 1..10") {
		t.Errorf("--desktop-users 0: %+v", r)
	}
}
