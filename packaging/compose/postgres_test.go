//go:build linux

package compose

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"
)

// TestPostgresImage runs berth/postgres:15 as compose.yaml and the Helm
// chart do: it refuses a new cluster without a password, makes one with
// the user, database and password file given, accepts that password over
// TCP and refuses another, runs as uid 999, and keeps its data across a
// restart.
func TestPostgresImage(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker; run without -short (make test)")
	}
	testkit.RequireDocker(t, postgresImage)
	ctx := testkit.ContextTimeout(t, 3*time.Minute)
	name := "berth-postgres-image-test-" + secret()[:12]

	out, err := exec.CommandContext(ctx, "docker", "run", "--rm", "--network", "none", postgresImage).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "set POSTGRES_PASSWORD or POSTGRES_PASSWORD_FILE") {
		t.Errorf("a new cluster without a password: %v\n%s", err, out)
	}

	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	password := secret()
	if err := os.WriteFile(filepath.Join(dir, "pw"), []byte(password+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	docker(t, ctx, "run", "--detach", "--name", name, "--network", "none", "--read-only",
		"--tmpfs", "/var/run/postgresql:uid=999,gid=999,mode=2775", "--tmpfs", "/tmp",
		"--cap-drop", "ALL", "--security-opt", "no-new-privileges",
		"--volume", dir+"/pw:/run/secrets/pw:ro",
		"--env", "POSTGRES_USER=owner", "--env", "POSTGRES_DB=things",
		"--env", "POSTGRES_PASSWORD_FILE=/run/secrets/pw",
		// The image's health check, run every 500 ms instead of every 5 s.
		"--health-interval", "500ms", postgresImage)
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := exec.Command("docker", "logs", name).CombinedOutput()
			t.Logf("logs:\n%s", logs)
		}
		exec.Command("docker", "rm", "--force", "--volumes", name).Run()
	})
	healthy := func() {
		t.Helper()
		testkit.EventuallyContext(t, ctx, "berth/postgres is healthy", func() bool {
			out, err := exec.CommandContext(ctx, "docker", "inspect", "--format", "{{.State.Health.Status}}", name).Output()
			return err == nil && strings.TrimSpace(string(out)) == "healthy"
		})
	}
	healthy()

	// psql over TCP (127.0.0.1 in the container), with a password.
	psql := func(pw, sql string) (string, error) {
		out, err := exec.CommandContext(ctx, "docker", "exec", "--env", "PGPASSWORD="+pw, name,
			"psql", "--host=127.0.0.1", "--username=owner", "--dbname=things", "--no-align", "--tuples-only", "--command="+sql).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if got, err := psql(password, "SELECT current_user || ' ' || current_database()"); err != nil || got != "owner things" {
		t.Fatalf("login with the password: %q, %v", got, err)
	}
	if got, err := psql("wrong"+password, "SELECT 1"); err == nil || !strings.Contains(got, "password authentication failed") {
		t.Errorf("login with a wrong password: %q, %v", got, err)
	}
	top := lines(docker(t, ctx, "top", name, "-o", "pid,uid,args"))
	if len(top) < 2 {
		t.Errorf("docker top: %v", top)
	}
	for _, l := range top[1:] {
		if f := strings.Fields(l); len(f) < 3 || f[1] != "999" {
			t.Errorf("a process not run by uid 999: %s", l)
		}
	}

	if _, err := psql(password, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('still here')"); err != nil {
		t.Fatalf("create a table: %v", err)
	}
	docker(t, ctx, "restart", "--time", "30", name)
	healthy()
	if got, err := psql(password, "SELECT v FROM kept"); err != nil || got != "still here" {
		t.Errorf("after a restart: %q, %v", got, err)
	}
}
