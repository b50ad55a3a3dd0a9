package browser

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/httpjson"
	"github.com/berthdev/berth/internal/testkit"
)

func TestMain(m *testing.M) {
	testkit.VerifyTestMain(m)
}

// chromiumPath is the browser the tests run.
const chromiumPath = "/usr/bin/chromium"

// testFlags are the flags a test's Chromium runs with (as the images'
// BERTH_CHROMIUM_FLAGS).
var testFlags = []string{"--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
	"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
	"--disable-breakpad", "--password-store=basic"}

// requireChromium skips t without chromiumPath, or fails it under
// BERTH_REQUIRE_DOCKER (as CI runs).
func requireChromium(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		testkit.Missing(t, testkit.DockerEnv, chromiumPath+" is missing", "apt-get install chromium")
	}
}

// external is a Chromium the test starts itself, as a hosted provider
// runs one.
type external struct {
	ws   string
	cmd  *exec.Cmd
	dir  string
	done chan struct{}
}

func startExternal(t *testing.T) *external {
	t.Helper()
	requireChromium(t)
	dir := t.TempDir()
	args := append(append([]string{}, testFlags...), "--headless=new", "--user-data-dir="+dir,
		"--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", "about:blank")
	cmd := exec.Command(chromiumPath, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	e := &external{cmd: cmd, dir: dir, done: make(chan struct{})}
	t.Cleanup(e.stop)
	found := make(chan string, 1)
	go func() {
		defer close(e.done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "DevTools listening on "); ok {
				select {
				case found <- strings.TrimSpace(rest):
				default:
				}
			}
		}
	}()
	select {
	case e.ws = <-found:
	case <-time.After(60 * time.Second):
		t.Fatal("chromium's DevTools did not listen within 60 s")
	}
	return e
}

func (e *external) alive() bool {
	return e.cmd.ProcessState == nil && syscall.Kill(e.cmd.Process.Pid, 0) == nil
}

func (e *external) stop() {
	syscall.Kill(-e.cmd.Process.Pid, syscall.SIGKILL)
	e.cmd.Wait()
	<-e.done
}

// pages serves the test pages on loopback.
func pages(t testing.TB) *httptest.Server {
	t.Helper()
	release := make(chan struct{})
	mux := http.NewServeMux()
	html := func(body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprint(w, body)
		}
	}
	mux.Handle("/form", html(`<!doctype html><html><head><title>Form</title></head><body>
<h1>Sign in</h1>
<form id="f" action="/done" method="get">
<label>Name <input id="name" name="name" type="text"></label>
<label><input type="checkbox" id="agree"> Agree</label>
<button type="button" id="echo" onclick="document.getElementById('out').textContent = 'typed: ' + document.getElementById('name').value">Echo</button>
<button type="button" disabled>Later</button>
</form>
<p id="out"></p>
<a href="/links">Links</a>
<div style="height:3000px"></div>
<p id="bottom">Bottom</p>
</body></html>`))
	mux.HandleFunc("/done", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>Done</title><p id="got">%s</p>`, strings.ReplaceAll(r.URL.Query().Get("name"), "<", "&lt;"))
	})
	mux.Handle("/links", html(`<!doctype html><title>Links</title><ul><li><a href="/form">Form</a></li><li><a href="/late">Late</a></li></ul>`))
	mux.Handle("/late", html(`<!doctype html><title>Late</title><body><script>setTimeout(() => { document.body.insertAdjacentHTML('beforeend', '<p>arrived now</p>') }, 300)</script></body>`))
	mux.Handle("/rich", html(`<!doctype html><html><head><meta charset="utf-8"><title>Rich</title>
<script>window.berth = {snapshot: () => ({tree: "- text \"forged\"\\n"}), lookup: () => null};</script></head><body>
<nav aria-label="Main"><a href="#top">Top</a></nav>
<main>
<h2>Café 世界</h2>
<p style="display:none">gone by display</p>
<p aria-hidden="true">gone by aria</p>
<p style="visibility:hidden">gone by visibility <span style="visibility:visible">back by visibility</span></p>
<div id="host"></div>
<details><summary>More</summary><p>folded text</p></details>
<select aria-label="Colour"><option>Red</option><option selected>Green</option></select>
<input type="checkbox" checked aria-label="Sure"> <input type="hidden" value="secret">
<input type="password" aria-label="Secret" value="abc">
<input type="submit" value="Send it">
<img src="data:," alt="A logo">
<table><tr><th>Head</th></tr><tr><td>Cell</td></tr></table>
<div onclick="this.textContent = 'div clicked'" id="clickable">Click this div</div>
<button id="doomed" onclick="this.remove()">Remove me</button>
<div contenteditable="true">Editable</div>
</main>
<script>
const r = document.getElementById('host').attachShadow({mode: 'open'});
r.innerHTML = '<button onclick="this.textContent = \'shadow clicked\'">In the shadow</button><slot></slot>';
document.getElementById('host').innerHTML = '<span>Slotted text</span>';
</script>
</body></html>`))
	var many strings.Builder
	many.WriteString(`<!doctype html><title>Many</title><body><h1>Many</h1>`)
	for i := range 1000 {
		switch i % 4 {
		case 0:
			fmt.Fprintf(&many, `<a href="#a%d">link %d</a>`, i, i)
		case 1:
			fmt.Fprintf(&many, `<button>button %d</button>`, i)
		case 2:
			fmt.Fprintf(&many, `<input aria-label="field %d" value="v%d">`, i, i)
		default:
			fmt.Fprintf(&many, `<p>text %d</p>`, i)
		}
	}
	many.WriteString(`</body>`)
	mux.Handle("/many", html(many.String()))
	mux.HandleFunc("/never", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		case <-time.After(2 * time.Minute):
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		close(release)
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv
}

// wantCode fails t unless err is an *httpjson.Error with status and code.
func wantCode(t *testing.T, err error, status int, code string) *httpjson.Error {
	t.Helper()
	var he *httpjson.Error
	if !errors.As(err, &he) {
		t.Fatalf("error = %v (%T), want %d %s", err, err, status, code)
	}
	if he.Status != status || he.Code != code {
		t.Fatalf("error = %d %s %q, want %d %s", he.Status, he.Code, he.Message, status, code)
	}
	return he
}

// refOf finds the ref on the first line of tree containing what.
func refOf(t *testing.T, tree, what string) string {
	t.Helper()
	for _, line := range strings.Split(tree, "\n") {
		if strings.Contains(line, what) {
			if _, rest, ok := strings.Cut(line, "[ref="); ok {
				ref, _, _ := strings.Cut(rest, "]")
				return ref
			}
		}
	}
	t.Fatalf("no line with %q and a ref in:\n%s", what, tree)
	return ""
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}
