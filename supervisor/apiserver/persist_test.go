package apiserver_test

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/internal/objstore"
	"github.com/berthdev/berth/internal/secrets"
	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/store"
	"github.com/berthdev/berth/supervisor/store/sqlstore"
)

// homeEnv is an env whose supervisor keeps archives, sealed, in a local
// folder (objects).
type homeEnv struct {
	*env
	objects string
}

func newHomeEnv(t testing.TB, opts ...func(*supervisor.Config)) *homeEnv {
	t.Helper()
	st, err := sqlstore.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "berth.db"))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "objects")
	local, err := objstore.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	enc := sealed(t, local)
	e := newEnvWith(t, st, func(c *supervisor.Config) {
		c.Objects = enc
		for _, o := range opts {
			o(c)
		}
	})
	return &homeEnv{env: e, objects: dir}
}

// sealed returns inner behind the encryption layer, with a new key.
func sealed(t testing.TB, inner objstore.Store) *objstore.Encrypted {
	t.Helper()
	key, err := secrets.LoadOrCreateKeyFile(filepath.Join(t.TempDir(), "secret.key"))
	if err != nil {
		t.Fatal(err)
	}
	box, err := secrets.NewBox(key)
	if err != nil {
		t.Fatal(err)
	}
	enc, err := objstore.NewEncrypted(inner, box)
	if err != nil {
		t.Fatal(err)
	}
	return enc
}

// connectHome connects agent with persistence home and extra settings.
func (e *homeEnv) connectHome(agent string, extra map[string]any) {
	e.t.Helper()
	e.mustCall("POST", "/v1/agents", map[string]any{"id": agent, "name": agent, "workspace": "ws-" + agent}, 201, nil)
	body := map[string]any{"agent": agent, "provider": "fake", "leaseSeconds": 900, "dailySeconds": 36000, "persistence": "home"}
	for k, v := range extra {
		body[k] = v
	}
	e.mustCall("POST", "/v1/computers", body, 201, nil)
}

func (e *homeEnv) exec(agent, cmd string) api.ExecResult {
	e.t.Helper()
	var x api.ExecResult
	e.mustCall("POST", "/v1/agents/"+agent+"/computer/exec", map[string]any{"command": cmd, "timeoutSeconds": 60}, 200, &x)
	if x.ExitCode != 0 {
		e.t.Fatalf("exec %q: exit %d, stderr %q", cmd, x.ExitCode, x.Stderr)
	}
	return x
}

func (e *homeEnv) status(agent string) api.ComputerStatus {
	e.t.Helper()
	var s api.ComputerStatus
	e.mustCall("GET", "/v1/agents/"+agent+"/computer", nil, 200, &s)
	return s
}

// objectFiles lists the files of the object store's folder.
func (e *homeEnv) objectFiles() []string {
	e.t.Helper()
	var out []string
	filepath.WalkDir(e.objects, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.Contains(p, "archives") {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// homeScript makes a home with what an archive must keep: a 20 MB file,
// a symlink, a hard link, modes, a file owned by uid 1000 in a subfolder
// (when the test runs as root), an empty folder.
const homeScript = `set -e
mkdir -p proj/sub empty
head -c 20000000 /dev/urandom > proj/big.bin
printf 'notes\n' > proj/notes.txt
chmod 0640 proj/notes.txt
ln -s notes.txt proj/link
ln proj/notes.txt proj/hard
printf 'x' > proj/sub/owned
chmod 0751 proj/sub
if [ "$(id -u)" = 0 ]; then chown 1000:1000 proj/sub/owned; fi
`

// fingerprint lists every file under the home with its type, mode,
// owner, link count or target and SHA-256.
const fingerprint = `cd $HOME && find proj empty -printf '%p %y %m %U:%G %n %l\n' | sort && find proj -type f -exec sha256sum {} + | sort`

// TestPersistentHome: a persistent computer's files, with their links,
// modes and owners, come back byte for byte after a stop and a start; the
// status shows it sleeping with its archive; the archive is sealed in the
// object store; disconnecting deletes it.
func TestPersistentHome(t *testing.T) {
	e := newHomeEnv(t)
	e.connectHome("keeper", nil)
	if s := e.status("keeper"); s.Connection.Persistence != "home" || s.Connection.IdleSleepSeconds != 600 || s.Connection.MaxCheckpoints != 10 || s.State != "" || s.Archive != nil {
		t.Fatalf("status before the first start = %+v", s)
	}
	e.mustCall("POST", "/v1/agents/keeper/computer/start", nil, 200, nil)
	e.exec("keeper", homeScript)
	before := e.exec("keeper", fingerprint).Stdout
	if !strings.Contains(before, "proj/big.bin") || !strings.Contains(before, "proj/link l 777") {
		t.Fatalf("fingerprint before:\n%s", before)
	}
	var stopped api.Session
	e.mustCall("POST", "/v1/agents/keeper/computer/stop", nil, 200, &stopped)
	if stopped.State != "stopped" {
		t.Fatalf("stop = %+v", stopped)
	}
	if _, destroys := e.fake.Counts(); destroys != 1 {
		t.Fatalf("destroys after stop = %d, want 1", destroys)
	}
	s := e.status("keeper")
	if s.State != api.StateSleeping || s.Session != nil || s.Archive == nil || s.Archive.Bytes < 20_000_000 || s.Archive.Image != "headless" {
		t.Fatalf("status after stop = %+v (archive %+v)", s, s.Archive)
	}
	files := e.objectFiles()
	if len(files) != 1 {
		t.Fatalf("object files = %v, want one archive", files)
	}
	raw, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "notes\n") || strings.Contains(string(raw), "proj/big.bin") {
		t.Fatal("the stored archive holds plain text: it is not sealed")
	}

	var woke api.Session
	e.mustCall("POST", "/v1/agents/keeper/computer/start", nil, 200, &woke)
	if woke.State != "running" || woke.ID == stopped.ID {
		t.Fatalf("second start = %+v", woke)
	}
	if after := e.exec("keeper", fingerprint).Stdout; after != before {
		t.Fatalf("home after wake differs:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if s := e.status("keeper"); s.State != "running" || s.Archive == nil {
		t.Fatalf("status while running = %+v", s)
	}

	var u api.Usage
	e.mustCall("GET", "/v1/usage", nil, 200, &u)
	if len(u.Stored) != 1 || u.Stored[0].Agent != "keeper" || u.Stored[0].Workspace != "ws-keeper" || u.Stored[0].Bytes != s.Archive.Bytes || u.Stored[0].Archives != 1 {
		t.Fatalf("usage stored = %+v, want the one archive of %d bytes", u.Stored, s.Archive.Bytes)
	}

	// A second sleep replaces the first archive and its object.
	e.exec("keeper", "echo more > proj/more.txt")
	e.mustCall("POST", "/v1/agents/keeper/computer/stop", nil, 200, nil)
	if files := e.objectFiles(); len(files) != 1 {
		t.Fatalf("object files after a second sleep = %v, want one", files)
	}

	e.mustCall("DELETE", "/v1/agents/keeper/computer", nil, 200, nil)
	if files := e.objectFiles(); len(files) != 0 {
		t.Fatalf("object files after disconnect = %v, want none", files)
	}
	e.mustCall("GET", "/v1/usage", nil, 200, &u)
	if len(u.Stored) != 0 {
		t.Fatalf("usage stored after disconnect = %+v", u.Stored)
	}
}

// TestIdleSleep: a persistent computer with no tool call for its
// idleSleepSeconds sleeps at the reaper's next pass; the unused reserved
// time comes back; a tool call moves the sleep on; the next start wakes
// it with its files.
func TestIdleSleep(t *testing.T) {
	e := newHomeEnv(t)
	e.connectHome("idle", map[string]any{"idleSleepSeconds": 120})
	e.mustCall("POST", "/v1/agents/idle/computer/start", nil, 200, nil)
	e.exec("idle", "echo kept > kept.txt")

	e.clock.Advance(100 * time.Second)
	e.exec("idle", "true") // moves the sleep to 100 s + 120 s
	e.clock.Advance(100 * time.Second)
	e.svc.Reap(context.Background())
	if s := e.status("idle"); s.State != "running" {
		t.Fatalf("state 200 s in, 100 s after a call = %q, want running", s.State)
	}
	e.clock.Advance(21 * time.Second)
	e.svc.Reap(context.Background())
	s := e.status("idle")
	if s.State != api.StateSleeping || s.Archive == nil {
		t.Fatalf("state after 121 s without a call = %+v, want sleeping", s)
	}
	// Charged 221 s of the 900 s reserved: the rest is back.
	if s.Budget.UsedSeconds != 221 || s.Budget.ReservedSeconds != 0 {
		t.Fatalf("budget after idle sleep = %+v, want 221 s used and nothing reserved", s.Budget)
	}
	e.mustCall("POST", "/v1/agents/idle/computer/start", nil, 200, nil)
	if got := e.exec("idle", "cat kept.txt").Stdout; got != "kept\n" {
		t.Fatalf("kept.txt after wake = %q", got)
	}
}

// TestCheckpoints: a checkpoint taken while running keeps the computer
// running; a start from it brings back its files, not the later ones;
// names, duplicates and the limit are checked; delete removes it.
func TestCheckpoints(t *testing.T) {
	e := newHomeEnv(t)
	e.connectHome("cp", map[string]any{"maxCheckpoints": 2})
	e.mustCall("POST", "/v1/agents/cp/computer/start", nil, 200, nil)
	e.exec("cp", "echo v1 > state.txt")
	var a api.Archive
	e.mustCall("POST", "/v1/agents/cp/computer/checkpoints", map[string]any{"name": "v1"}, 200, &a)
	if a.Name != "v1" || a.Bytes <= 0 || a.Image != "headless" {
		t.Fatalf("checkpoint = %+v", a)
	}
	if got := e.exec("cp", "cat state.txt").Stdout; got != "v1\n" {
		t.Fatalf("still running after the checkpoint: %q", got)
	}
	if st, code := e.call("POST", "/v1/agents/cp/computer/checkpoints", map[string]any{"name": "v1"}, nil); st != 409 || code != "conflict" {
		t.Fatalf("same name again: %d %s, want 409 conflict", st, code)
	}
	for _, bad := range []string{"", "../x", ".hidden", strings.Repeat("a", 65), "a b"} {
		if st, _ := e.call("POST", "/v1/agents/cp/computer/checkpoints", map[string]any{"name": bad}, nil); st != 400 && st != 422 {
			t.Errorf("name %q: status %d, want 400 or 422", bad, st)
		}
	}
	e.exec("cp", "echo v2 > state.txt")
	e.mustCall("POST", "/v1/agents/cp/computer/checkpoints", map[string]any{"name": "v2"}, 200, nil)
	if st, code := e.call("POST", "/v1/agents/cp/computer/checkpoints", map[string]any{"name": "v3"}, nil); st != 422 || code != "limit_exceeded" {
		t.Fatalf("third checkpoint with maxCheckpoints 2: %d %s, want 422 limit_exceeded", st, code)
	}
	if st, code := e.call("POST", "/v1/agents/cp/computer/start", map[string]any{"checkpoint": "v1"}, nil); st != 409 || code != "conflict" {
		t.Fatalf("start from a checkpoint while running: %d %s, want 409", st, code)
	}
	e.exec("cp", "echo v3 > state.txt")
	e.mustCall("POST", "/v1/agents/cp/computer/stop", nil, 200, nil)

	if st, code := e.call("POST", "/v1/agents/cp/computer/start", map[string]any{"checkpoint": "nope"}, nil); st != 404 || code != "not_found" {
		t.Fatalf("start from a missing checkpoint: %d %s, want 404", st, code)
	}
	e.mustCall("POST", "/v1/agents/cp/computer/start", map[string]any{"checkpoint": "v1"}, 200, nil)
	if got := e.exec("cp", "cat state.txt").Stdout; got != "v1\n" {
		t.Fatalf("state after starting from v1 = %q", got)
	}
	e.mustCall("POST", "/v1/agents/cp/computer/stop", nil, 200, nil)
	// The stop after a checkpoint start made the new sleep archive.
	e.mustCall("POST", "/v1/agents/cp/computer/start", nil, 200, nil)
	if got := e.exec("cp", "cat state.txt").Stdout; got != "v1\n" {
		t.Fatalf("state after the next plain start = %q, want v1 (the last sleep)", got)
	}

	var list api.Checkpoints
	e.mustCall("GET", "/v1/agents/cp/computer/checkpoints", nil, 200, &list)
	if len(list.Checkpoints) != 2 || list.Checkpoints[0].Name != "v1" || list.Checkpoints[1].Name != "v2" {
		t.Fatalf("checkpoints = %+v", list.Checkpoints)
	}
	e.mustCall("DELETE", "/v1/agents/cp/computer/checkpoints/v1", nil, 200, nil)
	if st, code := e.call("DELETE", "/v1/agents/cp/computer/checkpoints/v1", nil, nil); st != 404 || code != "not_found" {
		t.Fatalf("delete again: %d %s", st, code)
	}
	e.mustCall("GET", "/v1/agents/cp/computer/checkpoints", nil, 200, &list)
	if len(list.Checkpoints) != 1 || list.Checkpoints[0].Name != "v2" {
		t.Fatalf("checkpoints after delete = %+v", list.Checkpoints)
	}
	if n := len(e.objectFiles()); n != 2 {
		t.Fatalf("object files = %d, want v2 and the sleep archive", n)
	}
}

// TestTamperedArchive: an archive changed in the object store is refused
// at wake with a clear error; the computer is not handed out, nothing is
// charged, and the archive stays recorded.
func TestTamperedArchive(t *testing.T) {
	e := newHomeEnv(t)
	e.connectHome("t", nil)
	e.mustCall("POST", "/v1/agents/t/computer/start", nil, 200, nil)
	e.exec("t", "head -c 3000000 /dev/urandom > data.bin")
	e.mustCall("POST", "/v1/agents/t/computer/stop", nil, 200, nil)
	files := e.objectFiles()
	if len(files) != 1 {
		t.Fatalf("object files = %v", files)
	}
	raw, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)/2] ^= 0x40
	if err := os.WriteFile(files[0], raw, 0o600); err != nil {
		t.Fatal(err)
	}
	budget := e.status("t").Budget
	if st, code := e.call("POST", "/v1/agents/t/computer/start", nil, nil); st != 502 || code != supervisor.CodeArchive {
		t.Fatalf("start from a tampered archive: %d %s, want 502 %s", st, code, supervisor.CodeArchive)
	}
	s := e.status("t")
	if s.Session != nil || s.State != api.StateSleeping || s.Archive == nil {
		t.Fatalf("status after the refused wake = %+v", s)
	}
	if s.Budget.UsedSeconds != budget.UsedSeconds || s.Budget.ReservedSeconds != 0 {
		t.Fatalf("budget after the refused wake = %+v, was %+v", s.Budget, budget)
	}
	if c, d := e.fake.Counts(); c != d {
		t.Fatalf("creates %d, destroys %d: a machine was left", c, d)
	}
}

// TestSwappedArchivePlainStore: with an object store that does not seal
// archives, computerd checks each archive's SHA-256 at wake. An object
// replaced by another whole archive (which decompresses cleanly) is
// refused, and the home it held is not restored.
func TestSwappedArchivePlainStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "plain")
	plain, err := objstore.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	e := newHomeEnv(t, func(c *supervisor.Config) { c.Objects = plain })
	e.objects = dir
	e.connectHome("p", nil)
	e.mustCall("POST", "/v1/agents/p/computer/start", nil, 200, nil)
	e.exec("p", "echo one > a.txt")
	e.mustCall("POST", "/v1/agents/p/computer/checkpoints", map[string]any{"name": "one"}, 200, nil)
	e.exec("p", "echo two > a.txt")
	e.mustCall("POST", "/v1/agents/p/computer/stop", nil, 200, nil)

	ctx := context.Background()
	sleep, err := e.st.GetArchive(ctx, "p", store.SleepArchive)
	if err != nil {
		t.Fatal(err)
	}
	one, err := e.st.GetArchive(ctx, "p", "one")
	if err != nil {
		t.Fatal(err)
	}
	rc, _, err := plain.Get(ctx, one.Key)
	if err != nil {
		t.Fatal(err)
	}
	other, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Put(ctx, sleep.Key, bytes.NewReader(other), nil); err != nil {
		t.Fatal(err)
	}
	st, code := e.call("POST", "/v1/agents/p/computer/start", nil, nil)
	if st != 502 || code != supervisor.CodeArchive {
		t.Fatalf("start from a swapped archive: %d %s, want 502 %s", st, code, supervisor.CodeArchive)
	}
	if s := e.status("p"); s.Session != nil || s.State != api.StateSleeping {
		t.Fatalf("status after the refused wake = %+v", s)
	}
	// The checkpoint itself still wakes, with its own file.
	e.mustCall("POST", "/v1/agents/p/computer/start", map[string]any{"checkpoint": "one"}, 200, nil)
	if x := e.exec("p", "cat a.txt"); x.Stdout != "one\n" {
		t.Fatalf("a.txt after waking from the checkpoint = %q", x.Stdout)
	}
}

// flipper alters one byte in the middle of every archive computerd sends,
// keeping its length, as a faulty link on the way could.
type flipper struct{ next http.RoundTripper }

func (f flipper) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := f.next.RoundTrip(r)
	if err != nil || r.Method != http.MethodGet || r.URL.Path != "/v1/archive" {
		return resp, err
	}
	resp.Body = &flipBody{ReadCloser: resp.Body, at: 20000}
	return resp, nil
}

type flipBody struct {
	io.ReadCloser
	at, n int64
}

func (b *flipBody) Read(p []byte) (int, error) {
	k, err := b.ReadCloser.Read(p)
	if i := b.at - b.n; i >= 0 && i < int64(k) {
		p[i] ^= 0x01
	}
	b.n += int64(k)
	return k, err
}

// TestArchiveAlteredOnTheWay: an archive that reaches the supervisor with
// a byte changed (its length right) is not kept: the checkpoint fails,
// and no object or record is left. The sealed store's SHA-256 is what
// catches it, compared with computerd's.
func TestArchiveAlteredOnTheWay(t *testing.T) {
	e := newHomeEnv(t, func(c *supervisor.Config) {
		c.HTTPClient = &http.Client{Transport: flipper{next: http.DefaultTransport}}
	})
	e.connectHome("f", nil)
	e.mustCall("POST", "/v1/agents/f/computer/start", nil, 200, nil)
	e.exec("f", "head -c 300000 /dev/urandom > data.bin")
	if st, _ := e.call("POST", "/v1/agents/f/computer/checkpoints", map[string]any{"name": "v1"}, nil); st < 500 {
		t.Fatalf("checkpoint of an archive altered on the way: status %d, want a failure", st)
	}
	var list api.Checkpoints
	e.mustCall("GET", "/v1/agents/f/computer/checkpoints", nil, 200, &list)
	if len(list.Checkpoints) != 0 {
		t.Fatalf("checkpoints = %+v, want none", list.Checkpoints)
	}
	if files := e.objectFiles(); len(files) != 0 {
		t.Fatalf("object files left: %v", files)
	}
}

// TestArchiveFailsAtEnd: a machine that dies before its session's end
// cannot be archived; the cleanup retries, then gives the home up and
// removes the machine; the earlier archive stays the one to wake from.
func TestArchiveFailsAtEnd(t *testing.T) {
	e := newHomeEnv(t)
	e.connectHome("d", nil)
	e.mustCall("POST", "/v1/agents/d/computer/start", nil, 200, nil)
	e.exec("d", "echo first > f.txt")
	e.mustCall("POST", "/v1/agents/d/computer/stop", nil, 200, nil)
	first := e.status("d").Archive
	e.mustCall("POST", "/v1/agents/d/computer/start", nil, 200, nil)
	e.exec("d", "echo second > f.txt")
	x, err := e.st.LiveSession(context.Background(), "d")
	if err != nil {
		t.Fatal(err)
	}
	e.fake.Kill(x.MachineID)
	var v api.Session
	e.mustCall("POST", "/v1/agents/d/computer/stop", nil, 200, &v)
	if v.State != "stopping" {
		t.Fatalf("stop of a dead machine = %+v, want stopping while the archive is retried", v)
	}
	for i := 0; i < 10; i++ {
		e.clock.Advance(10 * time.Minute)
		e.svc.Reap(context.Background())
	}
	y, err := e.st.GetSession(context.Background(), x.ID)
	if err != nil {
		t.Fatal(err)
	}
	if y.State != store.StateStopped || y.Home != store.HomeLost || !strings.Contains(y.LastError, "could not be archived") {
		t.Fatalf("session after the retries = %+v", y)
	}
	if s := e.status("d"); s.State != api.StateSleeping || s.Archive == nil || !s.Archive.CreatedAt.Equal(first.CreatedAt) {
		t.Fatalf("status = %+v, want the first archive kept", s)
	}
	e.mustCall("POST", "/v1/agents/d/computer/start", nil, 200, nil)
	if got := e.exec("d", "cat f.txt").Stdout; got != "first\n" {
		t.Fatalf("f.txt = %q, want the first archive's", got)
	}
}

// TestPersistenceSettings: the connection's settings are checked, and
// checkpoints are refused on a computer that keeps nothing.
func TestPersistenceSettings(t *testing.T) {
	e := newHomeEnv(t)
	e.mustCall("POST", "/v1/agents", map[string]any{"id": "p", "name": "p"}, 201, nil)
	for _, c := range []struct {
		body map[string]any
		want int
	}{
		{map[string]any{"persistence": "memory"}, 400},
		{map[string]any{"persistence": "disk"}, 400},
		{map[string]any{"persistence": "home", "idleSleepSeconds": 59}, 422},
		{map[string]any{"persistence": "home", "idleSleepSeconds": 3601}, 422},
		{map[string]any{"persistence": "home", "maxCheckpoints": 101}, 422},
		{map[string]any{"idleSleepSeconds": 600}, 400},
	} {
		c.body["agent"], c.body["provider"] = "p", "fake"
		if st, _ := e.call("POST", "/v1/computers", c.body, nil); st != c.want {
			t.Errorf("connect %v: %d, want %d", c.body, st, c.want)
		}
	}
	e.mustCall("POST", "/v1/computers", map[string]any{"agent": "p", "provider": "fake"}, 201, nil)
	e.mustCall("POST", "/v1/agents/p/computer/start", nil, 200, nil)
	if st, code := e.call("POST", "/v1/agents/p/computer/checkpoints", map[string]any{"name": "x"}, nil); st != 409 || code != "conflict" {
		t.Fatalf("checkpoint without persistence: %d %s", st, code)
	}
	if s := e.status("p"); s.Connection.Persistence != "none" || s.State != "running" || s.Archive != nil {
		t.Fatalf("status = %+v", s)
	}

	// A supervisor without an object store refuses persistence.
	plain := newEnv(t)
	plain.mustCall("POST", "/v1/agents", map[string]any{"id": "q", "name": "q"}, 201, nil)
	if st, code := plain.call("POST", "/v1/computers", map[string]any{"agent": "q", "provider": "fake", "persistence": "home"}, nil); st != 409 || code != "conflict" {
		t.Fatalf("persistence without an object store: %d %s", st, code)
	}
}
