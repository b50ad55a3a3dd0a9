// Package pgtest runs a real, throwaway PostgreSQL server for tests.
//
// The first call to Start in a test binary starts one server, shared by
// every test of that binary; each call then creates a fresh database on it
// (CREATE DATABASE takes tens of milliseconds, a server half a second or
// more) and drops it when the test ends. The server listens on 127.0.0.1
// at a free port (and on a Unix socket in its own directory), with
// durability switched off (fsync, synchronous_commit, full_page_writes) for
// speed, and trusts local connections as the superuser "postgres".
//
// Start-up copies a data directory made once by initdb and kept in the
// user's cache directory (berth/pgtest), so that only the first run on a
// machine pays for initdb; a template that fails to start is made anew.
// The server's files go to /dev/shm when TMPDIR is unset and it is a tmpfs
// with room, else to the temporary directory. When the process runs as
// root, initdb and postgres (which refuse root) run as the user "nobody"
// through setpriv, in a temporary directory handed to that user.
//
// Stopping: a package that uses Start calls Main (or Wrap, for use with
// goleak) from its TestMain; the server then stops and its directory is
// removed when the tests end. Without that, or when the test binary dies,
// a small watchdog shell that owns the server notices that the binary's end
// of a pipe has closed, stops the server and removes its directory. Only
// processes that pgtest started are signalled, by their pids.
//
// When initdb or postgres cannot be found, Start skips the test with the
// command that installs them; with BERTH_REQUIRE_POSTGRES=1 it fails
// instead.
package pgtest

import (
	"bufio"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
)

// InstallCommand is the command that installs the PostgreSQL server on
// Debian and Ubuntu.
const InstallCommand = "apt-get install -y postgresql"

// RequireEnv names the variable that turns a missing PostgreSQL into a test
// failure instead of a skip (CI sets it).
const RequireEnv = "BERTH_REQUIRE_POSTGRES"

// startTimeout bounds how long the server may take to accept connections.
const startTimeout = 60 * time.Second

var (
	once    sync.Once
	shared  *server
	errInit error
	dbSeq   atomic.Int64
)

// Start returns the URL of a new, empty database on the test binary's
// shared PostgreSQL server, starting the server on first use. The database
// is dropped when t ends.
func Start(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		begin := time.Now()
		shared, errInit = startServer()
		if errInit == nil {
			t.Logf("pgtest: %s ready at %s in %v", shared.version, shared.addr(), time.Since(begin).Round(time.Millisecond))
		}
	})
	if errInit != nil {
		unavailable(t, errInit)
		return ""
	}
	name := dbName(t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := shared.admin.ExecContext(ctx, `CREATE DATABASE `+quoteIdent(name)); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := shared.admin.ExecContext(ctx, `DROP DATABASE IF EXISTS `+quoteIdent(name)+` WITH (FORCE)`); err != nil {
			t.Logf("pgtest: drop database %s: %v", name, err)
		}
	})
	return shared.url(name)
}

// unavailable ends t: a skip when PostgreSQL is missing (unless RequireEnv
// is 1), a failure otherwise.
func unavailable(t testing.TB, err error) {
	t.Helper()
	var missing *missingError
	if errors.As(err, &missing) && os.Getenv(RequireEnv) != "1" {
		t.Skipf("pgtest: %v", err)
		return
	}
	t.Fatalf("pgtest: %v", err)
}

// Main runs the tests of m, stops the shared server, and exits with the
// tests' status. Call it from TestMain.
func Main(m *testing.M) {
	os.Exit(Wrap(m).Run())
}

// Runner is what testing.M and goleak.VerifyTestMain share.
type Runner interface{ Run() int }

// Wrap returns m with a Run that also stops the shared server once the
// tests have run, for TestMain functions that hand m on, as in
// goleak.VerifyTestMain(pgtest.Wrap(m)).
func Wrap(m Runner) Runner { return wrapped{m} }

type wrapped struct{ m Runner }

func (w wrapped) Run() int {
	code := w.m.Run()
	if err := stop(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// stop stops the shared server, if one was started, and waits for it.
func stop() error {
	var err error
	once.Do(func() { errInit = errors.New("server already stopped") })
	if shared != nil {
		err = shared.stop()
		shared = nil
		errInit = errors.New("server already stopped")
	}
	return err
}

// missingError reports that PostgreSQL cannot run on this machine.
type missingError struct{ what string }

func (e *missingError) Error() string {
	return e.what + "; install PostgreSQL with `" + InstallCommand + "` (set " + RequireEnv + "=1 to fail instead of skip)"
}

// server is one running postmaster under its watchdog shell.
type server struct {
	dir     string // owns the data directory, socket and log
	port    int
	pid     int // the postmaster
	version string
	cmd     *exec.Cmd // the watchdog shell
	stdin   io.WriteCloser
	exited  chan struct{} // closed when the shell has exited
	admin   *sql.DB
}

func (s *server) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

func (s *server) url(db string) string {
	return "postgres://postgres@" + s.addr() + "/" + db + "?sslmode=disable"
}

// runAs describes how to run PostgreSQL's programs: directly, or through
// setpriv as an unprivileged user when the process is root.
type runAs struct {
	prefix   []string // setpriv and its arguments, or nothing
	uid, gid int      // owner for the directories the programs write; -1 keeps the current one
}

func (r runAs) command(name string, args ...string) *exec.Cmd {
	argv := append(append([]string{}, r.prefix...), name)
	argv = append(argv, args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LC_ALL=C", "LANG=C", "TZ=UTC"}
	return cmd
}

// mkdir makes a private temporary directory that the programs can write.
func (r runAs) mkdir(pattern string) (string, error) {
	dir, err := os.MkdirTemp(baseDir(), pattern)
	if err != nil {
		return "", err
	}
	if r.uid >= 0 {
		if err := os.Chown(dir, r.uid, r.gid); err != nil {
			os.RemoveAll(dir)
			return "", err
		}
	}
	return dir, nil
}

// tmpfsMagic is the f_type that statfs reports for a tmpfs.
const tmpfsMagic = 0x01021994

// baseDir returns where servers keep their data: /dev/shm when TMPDIR is
// unset and it is a tmpfs with at least 1 GiB free (the server's files
// then never wait on a disk), else the temporary directory.
func baseDir() string {
	if os.Getenv("TMPDIR") == "" {
		var st syscall.Statfs_t
		if err := syscall.Statfs("/dev/shm", &st); err == nil && st.Type == tmpfsMagic &&
			st.Bavail*uint64(st.Bsize) >= 1<<30 {
			return "/dev/shm"
		}
	}
	return os.TempDir()
}

func unprivileged() (runAs, error) {
	if os.Geteuid() != 0 {
		return runAs{uid: -1, gid: -1}, nil
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		return runAs{}, &missingError{what: "running as root needs setpriv (util-linux) to start PostgreSQL as nobody"}
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		return runAs{}, &missingError{what: "running as root needs the user nobody to start PostgreSQL"}
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return runAs{
		prefix: []string{setpriv, "--reuid=" + u.Uid, "--regid=" + u.Gid, "--clear-groups", "--"},
		uid:    uid, gid: gid,
	}, nil
}

// findBin returns the directory that holds initdb and postgres: the one on
// PATH, else the newest /usr/lib/postgresql/*/bin.
func findBin() (string, error) {
	has := func(dir string) bool {
		for _, name := range []string{"initdb", "postgres"} {
			if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
				return false
			}
		}
		return true
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil && has(filepath.Dir(real)) {
			return filepath.Dir(real), nil
		}
		if has(filepath.Dir(p)) {
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if has(d) {
			return d, nil
		}
	}
	return "", &missingError{what: "initdb and postgres not found on PATH or in /usr/lib/postgresql/*/bin"}
}

func versionOf(binDir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	return v
}

// startServer starts the shared server: it prepares a data directory from
// the cached template (making the template first if needed), then starts
// postgres at a free port, retrying when another process takes the port
// first.
func startServer() (*server, error) {
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	as, err := unprivileged()
	if err != nil {
		return nil, err
	}
	vcmd := as.command(filepath.Join(bin, "postgres"), "--version")
	vcmd.Dir = "/"
	out, err := vcmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s --version: %w", filepath.Join(bin, "postgres"), err)
	}
	version := strings.TrimSpace(string(out))
	template := templateDir(bin, version)

	var lastErr error
	for range 5 {
		dir, err := as.mkdir("berth-pgtest-")
		if err != nil {
			return nil, err
		}
		data := filepath.Join(dir, "data")
		copied, err := prepareData(as, bin, template, data)
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		s, err := launch(as, bin, dir)
		if err == nil {
			s.version = version
			return s, nil
		}
		lastErr = err
		switch {
		case errors.Is(err, errPortTaken):
		case copied:
			// A damaged template: make a new one with initdb.
			os.RemoveAll(template)
		default:
			return nil, err
		}
	}
	return nil, lastErr
}

var errPortTaken = errors.New("port taken")

// initdbArgs are the options of every data directory; templateDir's key
// includes them.
var initdbArgs = []string{"-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync", "--no-instructions", "--wal-segsize=1"}

// templateDir returns where the initdb result for this PostgreSQL is kept,
// or "" when there is no cache directory.
func templateDir(bin, version string) string {
	cache, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	h := sha256.Sum256([]byte(bin + "\n" + version + "\n" + strings.Join(initdbArgs, " ") + "\n" + strconv.Itoa(os.Geteuid())))
	return filepath.Join(cache, "berth", "pgtest", "initdb-"+hex.EncodeToString(h[:8]))
}

// prepareData fills data with a fresh cluster: a copy of the template when
// there is one (copied is then true), else initdb's output, which then
// becomes the template.
func prepareData(as runAs, bin, template, data string) (copied bool, err error) {
	if template != "" {
		if _, err := os.Stat(filepath.Join(template, "PG_VERSION")); err == nil {
			if out, err := exec.Command("cp", "-a", template, data).CombinedOutput(); err != nil {
				return false, fmt.Errorf("copy template %s: %v: %s", template, err, out)
			}
			return true, nil
		}
	}
	cmd := as.command(filepath.Join(bin, "initdb"), append([]string{"-D", data}, initdbArgs...)...)
	cmd.Dir = filepath.Dir(data)
	if out, err := cmd.CombinedOutput(); err != nil {
		return false, fmt.Errorf("initdb: %v: %s", err, out)
	}
	if template != "" {
		saveTemplate(data, template)
	}
	return false, nil
}

// saveTemplate copies a fresh data directory into the cache. It builds the
// copy beside its final place and renames it, so that test binaries
// running at the same time never see half a template; losing the race is
// fine.
func saveTemplate(data, template string) {
	if err := os.MkdirAll(filepath.Dir(template), 0o700); err != nil {
		return
	}
	staging, err := os.MkdirTemp(filepath.Dir(template), ".staging-")
	if err != nil {
		return
	}
	defer os.RemoveAll(staging)
	copyDir := filepath.Join(staging, "data")
	if err := exec.Command("cp", "-a", data, copyDir).Run(); err != nil {
		return
	}
	os.Rename(copyDir, template)
}

// watchdog runs postgres in the background and stops it, then removes the
// server's directory, when its standard input reaches end of file: when
// the test binary closes the pipe or dies. It prints the postmaster's pid.
const watchdog = `dir=$1; shift
exec 3<&0 0</dev/null
"$@" >"$dir/postgres.log" 2>&1 &
pg=$!
echo "$pg"
{
	read -r _ <&3 || :
	trap '' TERM
	kill -INT "$pg" 2>/dev/null
	while kill -0 "$pg" 2>/dev/null; do sleep 0.05; done
	rm -rf "$dir"
} >/dev/null 2>&1 &
watch=$!
exec 3<&-
wait "$pg"
status=$?
kill "$watch" 2>/dev/null
exit "$status"
`

// launch starts postgres on the data directory in dir and waits until it
// accepts connections.
func launch(as runAs, bin, dir string) (*server, error) {
	port, err := testkit.FreePort()
	if err != nil {
		return nil, err
	}
	args := []string{"-c", watchdog, "pgtest-watchdog", dir,
		filepath.Join(bin, "postgres"),
		"-D", filepath.Join(dir, "data"),
		"-p", strconv.Itoa(port),
		"-k", dir,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off",
		"-c", "synchronous_commit=off",
		"-c", "full_page_writes=off",
		"-c", "max_connections=300",
		"-c", "shared_buffers=64MB",
		"-c", "autovacuum=off",
		"-c", "checkpoint_timeout=1h",
		"-c", "max_wal_size=4GB",
		"-c", "wal_level=minimal",
		"-c", "max_wal_senders=0",
		"-c", "logging_collector=off",
		"-c", "log_min_messages=warning",
	}
	cmd := as.command("/bin/sh", args...)
	cmd.Dir = dir
	// A new process group: a Ctrl-C at the terminal reaches the test
	// binary, which then stops the server in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	s := &server{dir: dir, port: port, cmd: cmd, stdin: stdin, exited: make(chan struct{})}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	go func() {
		cmd.Wait()
		close(s.exited)
	}()
	s.pid, err = strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		s.stop()
		return nil, fmt.Errorf("start postgres: no pid from the watchdog (%q)", line)
	}
	if err := s.waitReady(); err != nil {
		log := s.logTail()
		s.stop()
		if strings.Contains(log, "could not bind") || strings.Contains(log, "Address already in use") {
			return nil, fmt.Errorf("%w: %d", errPortTaken, port)
		}
		return nil, fmt.Errorf("%v; postgres log:\n%s", err, log)
	}
	return s, nil
}

// waitReady polls until the server accepts connections, gives up, or
// exits; then it keeps the connection pool for CREATE DATABASE.
func (s *server) waitReady() error {
	db, err := sql.Open("pgx", s.url("postgres"))
	if err != nil {
		return err
	}
	db.SetMaxOpenConns(4)
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = db.PingContext(ctx)
		cancel()
		if err == nil {
			s.admin = db
			return nil
		}
		select {
		case <-s.exited:
			db.Close()
			return errors.New("postgres exited during start-up")
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			db.Close()
			return fmt.Errorf("postgres did not accept connections within %v: %v", startTimeout, err)
		}
	}
}

func (s *server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// stop asks for a fast shutdown by closing the watchdog's input, escalates
// to an immediate shutdown and then SIGKILL of the processes it started if
// that takes too long, and removes the server's directory.
func (s *server) stop() error {
	if s.admin != nil {
		s.admin.Close()
	}
	s.stdin.Close()
	var err error
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		err = fmt.Errorf("postgres (pid %d) did not stop within 30s; sent SIGQUIT", s.pid)
		syscall.Kill(s.pid, syscall.SIGQUIT)
		select {
		case <-s.exited:
		case <-time.After(10 * time.Second):
			syscall.Kill(s.pid, syscall.SIGKILL)
			s.cmd.Process.Kill()
			<-s.exited
		}
	}
	if rerr := os.RemoveAll(s.dir); rerr != nil && err == nil {
		err = rerr
	}
	return err
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9]+`)

// dbName makes a database name from a test's name and a sequence number.
func dbName(test string) string {
	base := strings.Trim(unsafeChars.ReplaceAllString(strings.ToLower(test), "_"), "_")
	if len(base) > 40 {
		base = base[:40]
	}
	return fmt.Sprintf("t_%s_%d", base, dbSeq.Add(1))
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
