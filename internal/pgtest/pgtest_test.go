package pgtest

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		// A child of TestServerStops: stop the server through Wrap, as
		// Main does, or die without stopping it.
		os.Exit(Wrap(child(mode)).Run())
	}
	testkit.VerifyTestMain(Wrap(m))
}

func testContext(t *testing.T) context.Context {
	return testkit.Context(t)
}

func open(t *testing.T, url string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestStartGivesFreshDatabases(t *testing.T) {
	ctx := testContext(t)
	a, b := Start(t), Start(t)
	if a == b {
		t.Fatalf("two Starts gave one database: %s", a)
	}
	dba, dbb := open(t, a), open(t, b)
	if _, err := dba.ExecContext(ctx, `CREATE TABLE only_in_a (x INT)`); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := dbb.QueryRowContext(ctx, `SELECT COUNT(*) FROM pg_tables WHERE tablename = 'only_in_a'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("a table made in %s shows in %s", a, b)
	}
	var name string
	if err := dba.QueryRowContext(ctx, `SELECT current_database()`).Scan(&name); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(strings.SplitN(a, "?", 2)[0], "/"+name) {
		t.Fatalf("connected to %s through %s", name, a)
	}
}

func TestDatabaseDroppedAfterTest(t *testing.T) {
	ctx := testContext(t)
	var url string
	t.Run("user", func(t *testing.T) {
		url = Start(t)
		// A connection left open must not keep the database alive.
		db, err := sql.Open("pgx", url)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.PingContext(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
	})
	if url == "" {
		t.Skip("no server")
	}
	name := strings.TrimPrefix(strings.SplitN(url, "?", 2)[0], shared.url("")[:len(shared.url(""))-len("?sslmode=disable")])
	var n int
	if err := shared.admin.QueryRowContext(ctx, `SELECT COUNT(*) FROM pg_database WHERE datname = $1`, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("database %s still exists after its test", name)
	}
}

type fakeTB struct {
	testing.TB
	skipped, failed string
}

func (f *fakeTB) Helper()                           {}
func (f *fakeTB) Skipf(format string, args ...any)  { f.skipped = fmt.Sprintf(format, args...) }
func (f *fakeTB) Fatalf(format string, args ...any) { f.failed = fmt.Sprintf(format, args...) }

func TestMissingPostgres(t *testing.T) {
	missing := &missingError{what: "initdb and postgres not found"}
	t.Run("skips", func(t *testing.T) {
		t.Setenv(RequireEnv, "")
		f := &fakeTB{}
		unavailable(f, missing)
		if f.failed != "" || !strings.Contains(f.skipped, "`apt-get install -y postgresql`") {
			t.Fatalf("skipped %q, failed %q", f.skipped, f.failed)
		}
	})
	t.Run("required", func(t *testing.T) {
		t.Setenv(RequireEnv, "1")
		f := &fakeTB{}
		unavailable(f, missing)
		if f.skipped != "" || !strings.Contains(f.failed, "`apt-get install -y postgresql`") {
			t.Fatalf("skipped %q, failed %q", f.skipped, f.failed)
		}
	})
	t.Run("broken", func(t *testing.T) {
		t.Setenv(RequireEnv, "")
		f := &fakeTB{}
		unavailable(f, errors.New("initdb: exit status 1"))
		if f.skipped != "" || f.failed == "" {
			t.Fatalf("a broken installation must fail: skipped %q, failed %q", f.skipped, f.failed)
		}
	})
}

// childEnv selects what a re-executed test binary does: "main" starts the
// server and returns, "crash" starts it and exits at once, the way a
// crashed or killed test binary would.
const childEnv = "PGTEST_CHILD"

type child string

func (mode child) Run() int {
	once.Do(func() { shared, errInit = startServer() })
	if errInit != nil {
		fmt.Fprintln(os.Stderr, errInit)
		return 1
	}
	fmt.Printf("server pid=%d dir=%s\n", shared.pid, shared.dir)
	if mode == "crash" {
		os.Exit(3)
	}
	return 0
}

func TestServerStops(t *testing.T) {
	Start(t) // skips here when PostgreSQL is missing
	for _, mode := range []string{"main", "crash"} {
		t.Run(mode, func(t *testing.T) {
			ctx := testContext(t)
			cmd := exec.CommandContext(ctx, os.Args[0])
			cmd.Env = append(os.Environ(), childEnv+"="+mode)
			out, err := cmd.Output()
			pid, dir := parseChild(t, string(out))
			if mode == "main" && err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
			if mode == "main" {
				// Main has stopped the server before the child exited.
				if alive(pid) {
					t.Errorf("postgres pid %d outlived the test binary", pid)
				}
				if _, err := os.Stat(dir); !os.IsNotExist(err) {
					t.Errorf("server directory %s left behind: %v", dir, err)
				}
				return
			}
			// After a crash the watchdog stops the server on its own.
			for alive(pid) || exists(dir) {
				select {
				case <-ctx.Done():
					t.Fatalf("postgres pid %d (alive %v) or %s (exists %v) outlived the crashed test binary",
						pid, alive(pid), dir, exists(dir))
				case <-time.After(50 * time.Millisecond):
				}
			}
		})
	}
}

func parseChild(t *testing.T, out string) (int, string) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var pid int
		var dir string
		if _, err := fmt.Sscanf(sc.Text(), "server pid=%d dir=%s", &pid, &dir); err == nil {
			return pid, dir
		}
	}
	t.Fatalf("child did not report its server:\n%s", out)
	return 0, ""
}

// alive reports whether pid names a process that has not exited (a zombie
// has).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
