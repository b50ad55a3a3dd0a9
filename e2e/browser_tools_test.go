package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/supervisor/daemon"
)

// greeterPage is served inside the computer: a field and a button that
// writes a greeting into the page, and a form that shows what was sent.
const greeterPage = `<!doctype html>
<html><head><meta charset="utf-8"><title>Greeter</title></head><body>
<h1>Greeter</h1>
<label for="name">Name</label> <input id="name" type="text">
<button id="go" onclick="document.getElementById('out').textContent = 'Hello, ' + document.getElementById('name').value + '!'">Greet</button>
<p id="out"></p>
<form onsubmit="event.preventDefault(); document.getElementById('sent').textContent = 'Sent: ' + document.getElementById('msg').value">
<label for="msg">Message</label> <input id="msg" type="text">
</form>
<p id="sent"></p>
</body></html>
`

// browserName is typed into the page and must come back exactly.
const browserName = "héllo — 世界 🚀"

// refOf finds an element's ref in a snapshot's text.
func refOf(t *testing.T, tree, role, name string) string {
	t.Helper()
	m := regexp.MustCompile(regexp.QuoteMeta(role+` "`+name+`"`) + `.*?\[ref=(e\d+)\]`).FindStringSubmatch(tree)
	if m == nil {
		t.Fatalf("no %s %q with a ref in the snapshot:\n%s", role, name, tree)
	}
	return m[1]
}

// TestBrowserToolsOverMCP drives the Chromium of a real headless computer
// through the MCP browser tools, as a browser agent would: it opens a page
// served inside the computer, reads its accessibility tree, types Unicode
// into a field and clicks a button by ref (the page's own text proves
// both), submits a form with Enter, takes a screenshot, opens and closes a
// tab, is refused browser_evaluate on a connection that does not allow it,
// and gets a working browser again after Chromium is killed. REST answers
// bad input with the field and the limit.
func TestBrowserToolsOverMCP(t *testing.T) {
	requireDocker(t, "berth/headless:latest")
	heavy(t)
	s, _ := serveDaemon(t, daemon.Options{Egress: daemon.EgressOptions{Listen: ":0"}},
		map[string]string{"COMPUTER_IMAGE_HEADLESS": "berth/headless:latest", "COMPUTER_MEMORY_MB": "1024", "COMPUTER_NETWORK_POOL": "1"})
	const agent = "browse"
	connect(s, agent)
	s.must("POST", "/v1/agents/"+agent+"/computer/start", nil, 200, nil)
	t.Cleanup(func() { s.call("POST", "/v1/agents/"+agent+"/computer/stop", nil, nil) })
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	if x := s.exec(agent, "mkdir -p /tmp/site && cat > /tmp/site/index.html <<'EOF'\n"+greeterPage+"EOF\n"+
		"nohup python3 -m http.server 8000 --bind 127.0.0.1 --directory /tmp/site >/tmp/http.log 2>&1 &"); x.ExitCode != 0 {
		t.Fatalf("serve the page: %+v", x)
	}

	cmd := exec.Command(berthBin, "mcp", "--agent", agent)
	cmd.Env = append(cmd.Environ(), "BERTH_URL="+s.url, "SUPERVISOR_TOKEN="+s.token)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	try := func(name string, args map[string]any) (*mcp.CallToolResult, string) {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		text := texts(res)
		t.Logf("%s %v -> error=%v %.300s", name, args, res.IsError, text)
		return res, text
	}
	call := func(name string, args map[string]any) (*mcp.CallToolResult, string) {
		t.Helper()
		res, text := try(name, args)
		if res.IsError {
			t.Fatalf("%s %v: %s", name, args, text)
		}
		return res, text
	}

	// The server inside the computer may take a moment to listen.
	deadline := time.Now().Add(20 * time.Second)
	for {
		res, text := try("browser_navigate", map[string]any{"url": "http://127.0.0.1:8000/"})
		if !res.IsError && strings.Contains(text, "Greeter") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page never loaded: %s", text)
		}
		time.Sleep(500 * time.Millisecond)
	}
	_, tree := call("browser_snapshot", nil)
	if !strings.Contains(tree, `heading "Greeter"`) {
		t.Fatalf("snapshot has no heading:\n%s", tree)
	}
	name, greet, msg := refOf(t, tree, "textbox", "Name"), refOf(t, tree, "button", "Greet"), refOf(t, tree, "textbox", "Message")

	call("browser_type", map[string]any{"ref": name, "text": browserName})
	call("browser_click", map[string]any{"ref": greet})
	call("browser_wait_for", map[string]any{"text": "Hello, " + browserName + "!", "timeoutMs": 10000})
	if _, tree = call("browser_snapshot", nil); !strings.Contains(tree, "Hello, "+browserName+"!") {
		t.Fatalf("the greeting is not in the page:\n%s", tree)
	}
	call("browser_type", map[string]any{"ref": msg, "text": "sent with Enter", "submit": true})
	call("browser_wait_for", map[string]any{"text": "Sent: sent with Enter", "timeoutMs": 10000})

	res, _ := call("browser_screenshot", nil)
	img := imageOf(t, res)
	pic, err := png.Decode(bytes.NewReader(img))
	if err != nil || pic.Bounds().Dx() < 100 || pic.Bounds().Dy() < 100 {
		t.Fatalf("screenshot: %v, %v", err, pic)
	}
	path := filepath.Join(t.ArtifactDir(), "browser-page.png")
	if err := os.WriteFile(path, img, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the page: %s", path)

	if _, text := call("browser_tabs", map[string]any{"action": "open", "url": "about:blank"}); !strings.Contains(text, "* 1: ") {
		t.Fatalf("open a tab: %s", text)
	}
	if _, text := call("browser_tabs", map[string]any{"action": "close", "index": 1}); strings.Contains(text, "1: ") || !strings.Contains(text, "* 0: Greeter") {
		t.Fatalf("close the tab: %s", text)
	}

	if res, text := try("browser_evaluate", map[string]any{"expression": "1+1"}); !res.IsError || !strings.Contains(text, "browserEvaluate") {
		t.Fatalf("browser_evaluate on a connection that does not allow it: %s", text)
	}
	// A connection that allows it: the page's own value comes back.
	const evaluator = "browse-eval"
	s.must("POST", "/v1/agents", map[string]any{"id": evaluator, "name": evaluator}, 201, nil)
	s.must("POST", "/v1/computers", map[string]any{"agent": evaluator, "provider": "docker", "leaseSeconds": 600, "dailySeconds": 3600, "browserEvaluate": true}, 201, nil)
	s.must("POST", "/v1/agents/"+evaluator+"/computer/start", nil, 200, nil)
	t.Cleanup(func() { s.call("POST", "/v1/agents/"+evaluator+"/computer/stop", nil, nil) })
	var ev struct{ Value json.RawMessage }
	s.must("POST", "/v1/agents/"+evaluator+"/computer/browser/evaluate", map[string]any{"expression": "[navigator.userAgent.includes('Chrome'), 6*7]"}, 200, &ev)
	if string(ev.Value) != "[true,42]" {
		t.Fatalf("browser_evaluate where allowed: %s", ev.Value)
	}
	s.call("POST", "/v1/agents/"+evaluator+"/computer/stop", nil, nil)

	// REST: bad input names the field and the limit; a stale ref is a 404.
	var e struct {
		Error struct{ Code, Message string }
	}
	base := "/v1/agents/" + agent + "/computer/browser/"
	if st := s.call("POST", base+"type", map[string]any{"ref": name, "text": strings.Repeat("x", 100<<10)}, &e); st != 400 ||
		!strings.Contains(e.Error.Message, "text") || !strings.Contains(e.Error.Message, "10000") {
		t.Fatalf("100 KB of text: %d %+v", st, e)
	}
	if st := s.call("POST", base+"click", map[string]any{"ref": "e999999999"}, &e); st != 404 || e.Error.Code != "ref_not_found" {
		t.Fatalf("unknown ref: %d %+v", st, e)
	}

	// Chromium killed: at most the next call fails, and the one after has
	// a new browser.
	s.exec(agent, "pkill -KILL -f chromium; true")
	if res, text := try("browser_navigate", map[string]any{"url": "http://127.0.0.1:8000/"}); res.IsError && !strings.Contains(text, "browser") {
		t.Fatalf("the call after the crash: %s", text)
	}
	if _, text := call("browser_navigate", map[string]any{"url": "http://127.0.0.1:8000/"}); !strings.Contains(text, "Greeter") {
		t.Fatalf("after the crash: %s", text)
	}
	if _, tree = call("browser_snapshot", nil); !strings.Contains(tree, `button "Greet"`) {
		t.Fatalf("snapshot after the crash:\n%s", tree)
	}
}

// bigPage writes a page of 1,000 elements an agent reads and acts on (250
// each of links, buttons, labelled fields and paragraphs, in lists and
// sections) into the computer and serves it on port 8001.
const bigPage = `mkdir -p /tmp/big && python3 - <<'EOF'
parts = ['<!doctype html><html><head><meta charset="utf-8"><title>Big page</title></head><body><h1>Big page</h1>']
for s in range(25):
    parts.append('<section><h2>Section %d</h2><ul>' % s)
    for i in range(10):
        n = s * 10 + i
        parts.append('<li><a href="#a%d">Link %d</a> <button>Button %d</button> '
                     '<label>Field %d <input value="v%d"></label><p>Paragraph %d of the big page.</p></li>' % (n, n, n, n, n, n))
    parts.append('</ul></section>')
parts.append('</body></html>')
open('/tmp/big/index.html', 'w').write(''.join(parts))
EOF
nohup python3 -m http.server 8001 --bind 127.0.0.1 --directory /tmp/big >/tmp/big.log 2>&1 &`

// BenchmarkBrowserSnapshot times browser_snapshot through REST of a page
// of 1,000 elements served in a real headless computer (target: at most
// 300 ms), against browser_tabs listing the tabs through the same path in
// the same run (the call's own cost without the tree).
func BenchmarkBrowserSnapshot(b *testing.B) {
	requireDocker(b, "berth/headless:latest")
	s, _ := serveDaemon(b, daemon.Options{Egress: daemon.EgressOptions{Listen: ":0"}},
		map[string]string{"COMPUTER_IMAGE_HEADLESS": "berth/headless:latest", "COMPUTER_MEMORY_MB": "1024", "COMPUTER_NETWORK_POOL": "1"})
	const agent = "benchsnap"
	connect(s, agent)
	s.must("POST", "/v1/agents/"+agent+"/computer/start", nil, 200, nil)
	defer s.call("POST", "/v1/agents/"+agent+"/computer/stop", nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute+time.Duration(b.N)*5*time.Second)
	defer cancel()
	if x := s.exec(agent, bigPage); x.ExitCode != 0 {
		b.Fatalf("serve the page: %+v", x)
	}
	base := "/v1/agents/" + agent + "/computer/browser/"
	if !testkit.Poll(30*time.Second, func() bool {
		st, _, err := postRaw(ctx, s, base+"navigate", map[string]any{"url": "http://127.0.0.1:8001/"})
		return err == nil && st == 200
	}) {
		b.Fatalf("the page never loaded: %s", s.exec(agent, "cat /tmp/big.log").Stdout)
	}
	timed := func(tool string, check func([]byte)) func() time.Duration {
		return func() time.Duration {
			start := time.Now()
			st, data, err := postRaw(ctx, s, base+tool, map[string]any{})
			d := time.Since(start)
			if err != nil || st != 200 {
				b.Fatalf("%s: %d %v %.300s", tool, st, err, data)
			}
			check(data)
			return d
		}
	}
	snapshot := timed("snapshot", func(data []byte) {
		var snap struct {
			Nodes     int
			Truncated bool
			Tree      string
		}
		json.Unmarshal(data, &snap)
		if snap.Nodes < 1000 || snap.Truncated || !strings.Contains(snap.Tree, `button "Button 249"`) {
			b.Fatalf("snapshot: %d nodes, truncated %v, %d bytes", snap.Nodes, snap.Truncated, len(snap.Tree))
		}
	})
	tabs := timed("tabs", func([]byte) {})
	snapshot()
	pairedRuns(b, "rest-snapshot-ms", snapshot, "base-rest-tabs-ms", tabs)
}
