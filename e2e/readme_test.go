package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"
)

// readmeBlock is one fenced code block of README.md.
type readmeBlock struct {
	lang  string
	lines []string // the commands: continuation lines joined, blank lines left out
}

// readmeSection is what README.md says under one "## " heading: its prose
// and its code blocks ("" is the part before the first heading).
type readmeSection struct {
	prose  string
	blocks []readmeBlock
}

// parseREADME splits README.md into its sections.
func parseREADME(t *testing.T, path string) map[string]*readmeSection {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]*readmeSection{"": {}}
	cur := sections[""]
	var block *readmeBlock
	var cont string
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case block != nil && strings.HasPrefix(line, "```"):
			cur.blocks = append(cur.blocks, *block)
			block = nil
		case block != nil:
			if strings.HasSuffix(line, "\\") {
				cont += strings.TrimSuffix(line, "\\")
				continue
			}
			if line = cont + line; strings.TrimSpace(line) != "" {
				block.lines = append(block.lines, line)
			}
			cont = ""
		case strings.HasPrefix(line, "```"):
			block = &readmeBlock{lang: strings.TrimPrefix(line, "```")}
		case strings.HasPrefix(line, "## "):
			cur = &readmeSection{}
			sections[strings.TrimPrefix(line, "## ")] = cur
		default:
			cur.prose += line + "\n"
		}
	}
	if block != nil {
		t.Fatalf("%s: a code block is never closed", path)
	}
	return sections
}

// shBlocks returns the section's sh blocks, failing when it has fewer
// than n.
func shBlocks(t *testing.T, sections map[string]*readmeSection, heading string, n int) []readmeBlock {
	t.Helper()
	sec, ok := sections[heading]
	if !ok {
		t.Fatalf("README.md has no section %q", heading)
	}
	var sh []readmeBlock
	for _, b := range sec.blocks {
		if b.lang == "sh" {
			sh = append(sh, b)
		}
	}
	if len(sh) < n {
		t.Fatalf("README.md's %q has %d sh blocks, want %d", heading, len(sh), n)
	}
	return sh
}

// lineRun is what one README line did when the shell ran it.
type lineRun struct {
	line           string
	stdout, stderr string
	ran            bool
	httpStatuses   []int // curl's answers, in order
}

const (
	lineMark = "\x1eline %d\x1e\n"
	endMark  = "\x1eend\x1e\n"
	// curl's status goes to stderr with a mark the test finds, so that
	// stdout stays what a person sees.
	httpMark = "@@http "
)

var httpStatusRE = regexp.MustCompile(httpMark + `(\d{3})`)

// runShellBlock runs the lines in order in one bash (-euo pipefail, as a
// shell would run them, with the variables one line sets seen by the
// next), after prelude, in dir. It fails the test when a line exits
// non-zero, naming it. curl is wrapped to report each answer's HTTP
// status on stderr; the command line itself is unchanged.
func runShellBlock(t *testing.T, ctx context.Context, dir string, env, prelude, lines []string) []lineRun {
	t.Helper()
	var script strings.Builder
	fmt.Fprintf(&script, "curl() { command curl -w '%%{stderr}\\n%s%%{http_code}\\n' \"$@\"; }\n", httpMark)
	for _, p := range prelude {
		script.WriteString(p + "\n")
	}
	for i, l := range lines {
		script.WriteString(printMark(fmt.Sprintf(lineMark, i)))
		script.WriteString(l + "\n")
	}
	script.WriteString(printMark(endMark))

	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script.String())
	cmd.Dir, cmd.Env = dir, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()

	runs := make([]lineRun, len(lines))
	outs, errs := splitMarks(out.String(), len(lines)), splitMarks(errb.String(), len(lines))
	for i, l := range lines {
		runs[i] = lineRun{line: l, stdout: outs[i], stderr: errs[i], ran: outs[i] != "\x00"}
		if !runs[i].ran {
			runs[i].stdout, runs[i].stderr = "", ""
		}
		runs[i].stderr = httpStatusRE.ReplaceAllStringFunc(runs[i].stderr, func(m string) string {
			n, _ := strconv.Atoi(strings.TrimPrefix(m, httpMark))
			runs[i].httpStatuses = append(runs[i].httpStatuses, n)
			return ""
		})
		runs[i].stderr = strings.TrimSpace(runs[i].stderr)
		if runs[i].ran {
			t.Logf("$ %s\n%s%s", l, runs[i].stdout, stderrNote(runs[i].stderr))
		}
	}
	if err != nil || !strings.Contains(out.String(), endMark) {
		for i := len(runs) - 1; i >= 0; i-- {
			if runs[i].ran {
				t.Fatalf("README line failed (%v): %s\n%s%s", err, runs[i].line, runs[i].stdout, runs[i].stderr)
			}
		}
		t.Fatalf("README block failed before its first line (%v): %s", err, errb.String())
	}
	return runs
}

// printMark is the shell line that prints mark on stdout and on stderr.
func printMark(mark string) string {
	m := strings.NewReplacer("\x1e", `\036`, "\n", `\n`).Replace(mark)
	return fmt.Sprintf("printf '%s'; printf '%s' >&2\n", m, m)
}

// splitMarks cuts a stream at the line marks; a line that never ran is "\x00".
func splitMarks(s string, n int) []string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = "\x00"
	}
	s, _, _ = strings.Cut(s, endMark)
	for i := n - 1; i >= 0; i-- {
		before, after, ok := strings.Cut(s, fmt.Sprintf(lineMark, i))
		if ok {
			parts[i], s = after, before
		}
	}
	return parts
}

// stderrNote is a line's stderr as the test's log shows it.
func stderrNote(s string) string {
	if s == "" {
		return ""
	}
	return "stderr: " + s + "\n"
}

// lineCheck is what the README promises about the line matching re.
type lineCheck struct {
	re    *regexp.Regexp
	check func(t *testing.T, r lineRun)
}

// checkLines runs every check on the one line it matches, and the checks
// every line gets: a curl answered 2xx with no "error" in its JSON. A
// check that matches no line, or two, fails: the README lost (or doubled)
// what it promises.
func checkLines(t *testing.T, runs []lineRun, checks []lineCheck) {
	t.Helper()
	for _, r := range runs {
		if !strings.HasPrefix(strings.TrimSpace(r.line), "curl ") {
			continue
		}
		if len(r.httpStatuses) == 0 {
			t.Errorf("%s: curl reported no HTTP status", r.line)
		}
		for _, st := range r.httpStatuses {
			if st/100 != 2 {
				t.Errorf("%s: HTTP %d: %s", r.line, st, r.stdout)
			}
		}
		var e struct {
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &e); err != nil {
			t.Errorf("%s: answer is not JSON (%v): %q", r.line, err, r.stdout)
		} else if e.Error != nil {
			t.Errorf("%s: answered an error: %s", r.line, e.Error)
		}
	}
	for _, c := range checks {
		var hit []lineRun
		for _, r := range runs {
			if c.re.MatchString(r.line) {
				hit = append(hit, r)
			}
		}
		if len(hit) != 1 {
			t.Errorf("README block: %d lines match %s, want 1", len(hit), c.re)
			continue
		}
		c.check(t, hit[0])
	}
	if t.Failed() {
		t.FailNow()
	}
}

// jsonOf decodes a curl line's answer.
func jsonOf[T any](t *testing.T, r lineRun) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Errorf("%s: %v: %q", r.line, err, r.stdout)
	}
	return v
}

var sessionIDRE = regexp.MustCompile(`\bs_[0-9A-Za-z]+`)

// TestREADME runs the README's examples as written, against a real berth
// dev on the real Docker engine: berth dev prints what the README shows,
// then the curl and CLI blocks of "A first computer" and the desktop block
// of "A desktop, watched live" run line by line in bash, with the export
// lines berth dev printed and berth on PATH as the README says; each line
// succeeds and prints what the README promises.
func TestREADME(t *testing.T) {
	requireDocker(t, "berth/headless:latest", "berth/desktop:latest")
	heavy(t)
	sections := parseREADME(t, "../README.md")
	first := shBlocks(t, sections, "A first computer", 2)
	curlBlock, cliBlock := first[0], first[1]
	deskBlock := shBlocks(t, sections, "A desktop, watched live", 1)[0]
	keepBlock := shBlocks(t, sections, "A computer that keeps its files", 1)[0]
	webBlock := shBlocks(t, sections, "A browser the agent drives", 1)[0]

	deadline := time.Now().Add(10 * time.Minute)
	if d, ok := t.Deadline(); ok && d.Add(-30*time.Second).Before(deadline) {
		deadline = d.Add(-30 * time.Second)
	}
	// Not t.Context: berth dev must outlive the test's body to clean up.
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	t.Cleanup(cancel)

	// What berth dev prints, as the README shows it: its first lines, with
	// the address and token of this run.
	var shown []*regexp.Regexp
	for _, b := range sections[""].blocks {
		if b.lang == "" && len(b.lines) > 0 && strings.HasPrefix(b.lines[0], "berth dev: ready at ") {
			for _, l := range b.lines {
				re := regexp.QuoteMeta(strings.TrimSpace(l))
				re = strings.ReplaceAll(re, regexp.QuoteMeta("http://127.0.0.1:8080"), `http://127\.0\.0\.1:\d+`)
				re = strings.ReplaceAll(re, regexp.QuoteMeta("..."), `\S+`)
				shown = append(shown, regexp.MustCompile(`^\s*(`+re+`)$`))
			}
		}
	}
	if len(shown) != 3 {
		t.Fatalf("README.md shows %d lines of berth dev's output, want its 3 (ready, and the two exports)", len(shown))
	}
	// "run the two export lines it printed and put berth on your PATH (...)"
	m := regexp.MustCompile("`(export PATH=[^`]+)`").FindStringSubmatch(sections["A first computer"].prose)
	if m == nil {
		t.Fatalf("README.md's \"A first computer\" no longer says how to put berth on PATH")
	}
	putOnPath := m[1]

	dir := t.TempDir()
	// The checkout the README's shell runs in: bin/berth, as make run builds it.
	work := filepath.Join(dir, "checkout")
	if err := os.MkdirAll(filepath.Join(work, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(berthBin, filepath.Join(work, "bin", "berth")); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "BERTH_URL", "SUPERVISOR_TOKEN", "BERTH_MCP_TOKEN", "PROVIDERS", "DEFAULT_PROVIDER",
			"COMPUTER_IMAGE_HEADLESS", "COMPUTER_IMAGE_DESKTOP", "TURN_LISTEN", "EGRESS_LISTEN":
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "BERTH_CONFIG_DIR="+filepath.Join(dir, "config"), "DBUS_SESSION_BUS_ADDRESS=unix:path="+filepath.Join(dir, "no-bus"))

	// berth dev as make run starts it, but on free ports (other supervisors
	// may run on this machine) and with its data in the test's folder.
	var dep string
	var devPid int
	t.Cleanup(func() {
		removeHolders(devPid)
		if dep != "" {
			cleanupDeployment(t, dep)
		}
	})
	devEnv := append(env[:len(env):len(env)], "EGRESS_LISTEN=:0", "TURN_LISTEN=:0")
	dev := startProc(t, ctx, devEnv, "dev", "--listen", "127.0.0.1:0", "--data", filepath.Join(dir, "berth-data"), "--relay-listen", "127.0.0.1:0")
	devPid = dev.cmd.Process.Pid
	dep = dev.waitLine(t, regexp.MustCompile(`msg="supervisor listening" .*deployment=(\S+)`))
	var printed []string
	for _, re := range shown {
		printed = append(printed, dev.waitLine(t, re))
	}
	exports := printed[1:]
	baseURL := strings.TrimPrefix(exports[0], "export BERTH_URL=")
	token := strings.TrimPrefix(exports[1], "export SUPERVISOR_TOKEN=")
	s := &super{t: t, url: baseURL, token: token}

	agents := []string{"demo", "demo2", "keeper", "web", "desk"}
	sessions := map[string]string{} // agent -> its session
	t.Cleanup(func() {
		// Whatever the test left: stop the sessions, disconnect the agents.
		for _, a := range agents {
			callAPI(s.url, s.token, "POST", "/v1/agents/"+a+"/computer/stop", "", nil, nil)
			callAPI(s.url, s.token, "DELETE", "/v1/agents/"+a+"/computer", "", nil, nil)
		}
	})

	prelude := append(exports[:len(exports):len(exports)], putOnPath)
	gone := func(agent string) {
		t.Helper()
		testkit.Eventually(t, 2*time.Minute, agent+"'s computer removed from the engine", func() bool { return managed(t, sessions[agent]) == "" })
	}

	// The curl block.
	runs := runShellBlock(t, ctx, work, env, prelude, curlBlock.lines)
	type sess struct{ ID, State, Provider, Image string }
	checkLines(t, runs, []lineCheck{
		{regexp.MustCompile(`/v1/agents\s*$`), func(t *testing.T, r lineRun) {
			if a := jsonOf[struct{ ID string }](t, r); a.ID != "demo" {
				t.Errorf("%s: created %+v, want agent demo", r.line, a)
			}
		}},
		{regexp.MustCompile(`/v1/computers\s*$`), func(t *testing.T, r lineRun) {
			if c := jsonOf[struct{ Agent, Provider string }](t, r); c.Agent != "demo" || c.Provider != "docker" {
				t.Errorf("%s: connected %+v, want demo on docker", r.line, c)
			}
		}},
		{regexp.MustCompile(`/computer/start\s*$`), func(t *testing.T, r lineRun) {
			ss := jsonOf[sess](t, r)
			if ss.State != "running" || ss.Provider != "docker" || !sessionIDRE.MatchString(ss.ID) {
				t.Errorf("%s: session %+v, want one running on docker", r.line, ss)
			}
			sessions["demo"] = ss.ID
		}},
		{regexp.MustCompile(`/computer/exec\s*$`), func(t *testing.T, r lineRun) {
			if x := jsonOf[execResult](t, r); x.ExitCode != 0 || !strings.HasPrefix(x.Stdout, "Linux ") {
				t.Errorf("%s: %+v, want uname's Linux ...", r.line, x)
			}
		}},
		{regexp.MustCompile(`/computer/write_file\s*$`), func(t *testing.T, r lineRun) {
			if w := jsonOf[struct{ Bytes int }](t, r); w.Bytes != len("hello from the agent\n") {
				t.Errorf("%s: wrote %+v, want %d bytes", r.line, w, len("hello from the agent\n"))
			}
		}},
		{regexp.MustCompile(`/computer/read_file\s*$`), func(t *testing.T, r lineRun) {
			if f := jsonOf[struct{ Content string }](t, r); f.Content != "hello from the agent\n" {
				t.Errorf("%s: read %q, want the text written", r.line, f.Content)
			}
		}},
		{regexp.MustCompile(`/computer/stop\s*$`), func(t *testing.T, r lineRun) {
			if ss := jsonOf[sess](t, r); ss.ID != sessions["demo"] || (ss.State != "stopped" && ss.State != "stopping") {
				t.Errorf("%s: %+v, want session %s stopped", r.line, ss, sessions["demo"])
			}
		}},
	})
	gone("demo")

	// The CLI block.
	runs = runShellBlock(t, ctx, work, env, prelude, cliBlock.lines)
	checkLines(t, runs, []lineCheck{
		{regexp.MustCompile(`^berth agent create `), func(t *testing.T, r lineRun) {
			if !strings.Contains(r.stdout, "demo2") {
				t.Errorf("%s: %q does not name demo2", r.line, r.stdout)
			}
		}},
		{regexp.MustCompile(`^berth computer start `), func(t *testing.T, r lineRun) {
			id := sessionIDRE.FindString(r.stdout)
			if id == "" || !strings.Contains(r.stdout, "running on docker") {
				t.Errorf("%s: %q, want a session running on docker", r.line, r.stdout)
			}
			sessions["demo2"] = id
		}},
		{regexp.MustCompile(`^berth computer exec `), func(t *testing.T, r lineRun) {
			if !strings.HasPrefix(r.stdout, "Linux ") {
				t.Errorf("%s: %q, want uname's Linux ...", r.line, r.stdout)
			}
		}},
		{regexp.MustCompile(`\| *berth computer write `), func(t *testing.T, r lineRun) {}},
		{regexp.MustCompile(`^berth computer read `), func(t *testing.T, r lineRun) {
			if r.stdout != "hello from the agent\n" {
				t.Errorf("%s: read %q, want the text written", r.line, r.stdout)
			}
		}},
		{regexp.MustCompile(`^berth computer status `), func(t *testing.T, r lineRun) {
			if !regexp.MustCompile(`(?m)^session +` + regexp.QuoteMeta(sessions["demo2"]) + ` running on docker`).MatchString(r.stdout) {
				t.Errorf("%s: %q does not show session %s running", r.line, r.stdout, sessions["demo2"])
			}
		}},
		{regexp.MustCompile(`^berth computer ls\s*$`), func(t *testing.T, r lineRun) {
			// Both agents of this section: demo without a session since its
			// stop, demo2 with its running one.
			for _, want := range []string{`(?m)^demo +docker +\S+ +none$`, `(?m)^demo2 +docker +\S+ +` + regexp.QuoteMeta(sessions["demo2"]) + ` running`} {
				if !regexp.MustCompile(want).MatchString(r.stdout) {
					t.Errorf("%s: %q, want a line matching %s", r.line, r.stdout, want)
				}
			}
		}},
		{regexp.MustCompile(`^berth computer stop `), func(t *testing.T, r lineRun) {
			if !regexp.MustCompile(`session ` + regexp.QuoteMeta(sessions["demo2"]) + ` (stopped|stopping)`).MatchString(r.stdout) {
				t.Errorf("%s: %q, want session %s stopped", r.line, r.stdout, sessions["demo2"])
			}
		}},
	})
	gone("demo2")

	// The persistent computer's block.
	runs = runShellBlock(t, ctx, work, env, prelude, keepBlock.lines)
	checkLines(t, runs, []lineCheck{
		{regexp.MustCompile(`^berth computer checkpoint --agent keeper before-upgrade`), func(t *testing.T, r lineRun) {
			if !strings.Contains(r.stdout, "before-upgrade") {
				t.Errorf("%s: %q does not name the checkpoint", r.line, r.stdout)
			}
		}},
		{regexp.MustCompile(`^berth computer status `), func(t *testing.T, r lineRun) {
			if !strings.Contains(r.stdout, "sleeping") {
				t.Errorf("%s: %q, want the computer sleeping", r.line, r.stdout)
			}
		}},
		{regexp.MustCompile(`^berth computer read `), func(t *testing.T, r lineRun) {
			if r.stdout != "kept across sessions\n" {
				t.Errorf("%s: read %q after the wake, want the text written before the stop", r.line, r.stdout)
			}
		}},
		{regexp.MustCompile(`^berth computer checkpoints --agent keeper\s`), func(t *testing.T, r lineRun) {
			if !regexp.MustCompile(`(?m)^before-upgrade\s`).MatchString(r.stdout) {
				t.Errorf("%s: %q, want a line for before-upgrade", r.line, r.stdout)
			}
		}},
	})

	// The browser block: the page served in the computer is read and
	// looked at.
	runs = runShellBlock(t, ctx, work, env, prelude, webBlock.lines)
	checkLines(t, runs, []lineCheck{
		{regexp.MustCompile(`^berth computer start `), func(t *testing.T, r lineRun) {
			sessions["web"] = sessionIDRE.FindString(r.stdout)
		}},
		{regexp.MustCompile(`^berth computer browse --agent web navigate `), func(t *testing.T, r lineRun) {
			if !strings.Contains(r.stdout, "tab 0: Hi (http://127.0.0.1:8000/)") {
				t.Errorf("%s: %q, want the page's title and URL", r.line, r.stdout)
			}
		}},
		{regexp.MustCompile(`^berth computer browse --agent web snapshot`), func(t *testing.T, r lineRun) {
			if !regexp.MustCompile(`(?m)^- button "Go" \[ref=e\d+\]$`).MatchString(r.stdout) {
				t.Errorf("%s: %q, want the button with its ref", r.line, r.stdout)
			}
		}},
		{regexp.MustCompile(`^berth computer browse --agent web screenshot `), func(t *testing.T, r lineRun) {
			f, err := os.Open(filepath.Join(work, "page.png"))
			if err != nil {
				t.Errorf("%s: %v", r.line, err)
				return
			}
			defer f.Close()
			if cfg, err := png.DecodeConfig(f); err != nil || cfg.Width != 1280 || cfg.Height != 720 {
				t.Errorf("%s: page.png is %+v, %v; want a 1280x720 PNG", r.line, cfg, err)
			}
		}},
	})
	gone("web")

	// The desktop block.
	runs = runShellBlock(t, ctx, work, env, prelude, deskBlock.lines)
	checkLines(t, runs, []lineCheck{
		{regexp.MustCompile(`^berth computer start `), func(t *testing.T, r lineRun) {
			id := sessionIDRE.FindString(r.stdout)
			if id == "" || !strings.Contains(r.stdout, "running on docker (desktop)") {
				t.Errorf("%s: %q, want a desktop session running on docker", r.line, r.stdout)
			}
			sessions["desk"] = id
		}},
		{regexp.MustCompile(`^berth computer view `), func(t *testing.T, r lineRun) {
			link := strings.TrimSpace(r.stdout)
			u, err := url.Parse(link)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.Contains(link, "\n") {
				t.Errorf("%s: printed %q, want one link", r.line, r.stdout)
				return
			}
			// The link opens the viewer page.
			req, _ := http.NewRequestWithContext(ctx, "GET", link, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("open %s: %v", link, err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
				t.Errorf("open %s: %d %s, want the viewer page", link, resp.StatusCode, resp.Header.Get("Content-Type"))
			}
		}},
	})

	// The README leaves the desktop running; stop it, and remove the
	// agents' computers.
	var stopped sess
	s.must("POST", "/v1/agents/desk/computer/stop", nil, 200, &stopped)
	if stopped.ID != sessions["desk"] {
		t.Errorf("stopped session %s, want %s", stopped.ID, sessions["desk"])
	}
	gone("desk")
	for _, a := range agents {
		s.must("DELETE", "/v1/agents/"+a+"/computer", nil, 200, nil)
	}
	dev.stop(t)
}
