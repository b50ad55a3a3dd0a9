package browserbase

// fakeBrowserbase is a local Browserbase API for the provider's tests,
// following Browserbase's API reference (https://docs.browserbase.com/reference/api):
// POST /v1/sessions ("Create a Session": projectId, keepAlive, timeout
// 60..21600, userMetadata; answers the session with id, status RUNNING,
// connectUrl, signingKey), GET /v1/sessions/{id}, POST /v1/sessions/{id}
// ("Update a Session": status REQUEST_RELEASE ends it), GET
// /v1/sessions/{id}/debug (debuggerUrl, debuggerFullscreenUrl, wsUrl,
// pages) and GET /v1/sessions?status=&q=user_metadata['key']:'value'
// ("List Sessions"). The key goes in X-BB-API-Key.
//
// Each session is a real headless Chromium (/usr/bin/chromium, an empty
// profile, DevTools on a loopback port of its own) whose DevTools
// WebSocket is the session's connectUrl; it is killed by its PID when the
// session is released or the test ends. Bad days: 401 while keys are
// refused, 429 on the next create, a create whose reply is lost after the
// session started, releases that fail with 500.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// chromiumPath is the browser the fakes run; tests skip without it only
// when BERTH_REQUIRE_CHROMIUM is unset.
const chromiumPath = "/usr/bin/chromium"

type chromium struct {
	cmd  *exec.Cmd
	ws   string // ws://127.0.0.1:PORT/devtools/browser/ID
	http string // http://127.0.0.1:PORT
	dir  string
}

// startChromium runs a headless Chromium with an empty profile and
// returns once its DevTools endpoint listens.
func startChromium(ctx context.Context) (*chromium, error) {
	dir, err := os.MkdirTemp("", "berth-chromium-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(chromiumPath, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--disable-crash-reporter", "--disable-breakpad",
		"--user-data-dir="+dir, "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", "about:blank")
	// Its own process group, so that stop ends the helpers it forks too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c := &chromium{cmd: cmd, dir: dir}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sent := false
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "DevTools listening on "); ok && !sent {
				found <- strings.TrimSpace(rest)
				sent = true
			}
		}
		close(found)
	}()
	select {
	case ws, ok := <-found:
		if !ok {
			c.stop()
			return nil, errors.New("chromium exited before DevTools listened")
		}
		c.ws = ws
		host := strings.TrimPrefix(ws, "ws://")
		host, _, _ = strings.Cut(host, "/")
		c.http = "http://" + host
		return c, nil
	case <-time.After(60 * time.Second):
		c.stop()
		return nil, errors.New("chromium's DevTools did not listen within 60 s")
	case <-ctx.Done():
		c.stop()
		return nil, ctx.Err()
	}
}

// stop kills the browser and the helpers it forked (its process group,
// numbered by its PID) and removes its profile.
func (c *chromium) stop() {
	if p := c.cmd.Process; p != nil {
		syscall.Kill(-p.Pid, syscall.SIGKILL)
		c.cmd.Wait()
	}
	for range 50 {
		if os.RemoveAll(c.dir) == nil {
			if _, err := os.Stat(c.dir); os.IsNotExist(err) {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type fakeBrowserbase struct {
	t   testing.TB
	srv *httptest.Server
	Key string

	mu          sync.Mutex
	sessions    map[string]*fakeSession
	refuse      bool
	rateLimit   int
	loseReplies int
	failDeletes int
	lastCreate  map[string]any
}

type fakeSession struct {
	ID           string            `json:"id"`
	Status       string            `json:"status"`
	ProjectID    string            `json:"projectId"`
	KeepAlive    bool              `json:"keepAlive"`
	ConnectURL   string            `json:"connectUrl"`
	SigningKey   string            `json:"signingKey"`
	UserMetadata map[string]string `json:"userMetadata"`
	browser      *chromium
}

func newFakeBrowserbase(t testing.TB) *fakeBrowserbase {
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("BERTH_REQUIRE_DOCKER") != "" {
			t.Fatalf("%s is missing: apt-get install chromium", chromiumPath)
		}
		t.Skipf("%s is missing: apt-get install chromium to run this test", chromiumPath)
	}
	f := &fakeBrowserbase{t: t, Key: "bb_live_" + strings.ToLower(rand.Text()), sessions: map[string]*fakeSession{}}
	f.srv = httptest.NewServer(f)
	t.Cleanup(func() {
		f.srv.Close()
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, s := range f.sessions {
			if s.browser != nil {
				s.browser.stop()
			}
		}
	})
	return f
}

func (f *fakeBrowserbase) reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func (f *fakeBrowserbase) fail(w http.ResponseWriter, status int, msg string) {
	f.reply(w, status, map[string]any{"statusCode": status, "error": http.StatusText(status), "message": msg})
}

var metaQuery = regexp.MustCompile(`^user_metadata\['([^']+)'\]:'([^']*)'$`)

func (f *fakeBrowserbase) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuse || r.Header.Get("X-BB-API-Key") != f.Key {
		f.fail(w, 401, "Unauthorized")
		return
	}
	switch {
	case r.URL.Path == "/v1/sessions" && r.Method == "POST":
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		f.lastCreate = body
		if f.rateLimit > 0 {
			f.rateLimit--
			f.fail(w, 429, "concurrent session limit reached")
			return
		}
		if t, _ := body["timeout"].(float64); t < 60 || t > 21600 {
			f.fail(w, 400, "timeout must be within 60..21600")
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
		defer cancel()
		c, err := startChromium(ctx)
		if err != nil {
			f.fail(w, 500, err.Error())
			return
		}
		s := &fakeSession{ID: strings.ToLower(rand.Text()), Status: "RUNNING", KeepAlive: body["keepAlive"] == true, browser: c,
			ConnectURL: c.ws, SigningKey: rand.Text(), UserMetadata: map[string]string{}}
		s.ProjectID, _ = body["projectId"].(string)
		if s.ProjectID == "" {
			s.ProjectID = "proj-of-key"
		}
		if m, ok := body["userMetadata"].(map[string]any); ok {
			for k, v := range m {
				s.UserMetadata[k], _ = v.(string)
			}
		}
		f.sessions[s.ID] = s
		if f.loseReplies > 0 {
			f.loseReplies--
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		f.reply(w, 201, s)
	case r.URL.Path == "/v1/sessions" && r.Method == "GET":
		out := []*fakeSession{}
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
		f.reply(w, 200, out)
	case strings.HasPrefix(r.URL.Path, "/v1/sessions/"):
		id, sub, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/v1/sessions/"), "/")
		s := f.sessions[id]
		if s == nil {
			f.fail(w, 404, "Session not found")
			return
		}
		switch {
		case sub == "" && r.Method == "GET":
			f.reply(w, 200, s)
		case sub == "debug" && r.Method == "GET":
			if s.Status != "RUNNING" {
				f.fail(w, 400, "session is not running")
				return
			}
			live := f.srv.URL + "/devtools-fullscreen/inspector.html?wss=" + strings.TrimPrefix(s.browser.ws, "ws://")
			f.reply(w, 200, map[string]any{"debuggerUrl": live, "debuggerFullscreenUrl": live, "wsUrl": s.browser.ws, "pages": []any{}})
		case sub == "" && r.Method == "POST":
			var body struct {
				Status string `json:"status"`
			}
			json.NewDecoder(r.Body).Decode(&body)
			if body.Status != "REQUEST_RELEASE" {
				f.fail(w, 400, "status must be REQUEST_RELEASE")
				return
			}
			if f.failDeletes > 0 {
				f.failDeletes--
				f.fail(w, 500, "Internal Server Error")
				return
			}
			if s.browser != nil {
				s.browser.stop()
				s.browser = nil
			}
			s.Status = "COMPLETED"
			f.reply(w, 200, s)
		default:
			f.fail(w, 404, "Not Found")
		}
	default:
		f.fail(w, 404, "Not Found")
	}
}

// running reports whether a session labelled label=value still runs.
func (f *fakeBrowserbase) exists(ctx context.Context, label, value string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.sessions {
		if s.Status == "RUNNING" && s.UserMetadata[label] == value {
			return true, nil
		}
	}
	return false, nil
}

// Faults for providertest.
func (f *fakeBrowserbase) LoseNextCreateReply()      { f.mu.Lock(); f.loseReplies++; f.mu.Unlock() }
func (f *fakeBrowserbase) FailNextDeletes(n int)     { f.mu.Lock(); f.failDeletes += n; f.mu.Unlock() }
func (f *fakeBrowserbase) RefuseCredentials(on bool) { f.mu.Lock(); f.refuse = on; f.mu.Unlock() }
