package supervisorimage

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"
)

const (
	baseImage = "berth/debian-base:bookworm"
	image     = "berth/supervisor:latest"
)

func run(t *testing.T, ctx context.Context, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out.String(), errb.String())
	}
	return strings.TrimSpace(out.String())
}

// TestImage builds berth/supervisor (skipped by build.sh when its inputs
// are unchanged), starts it with no Docker socket and a provider that needs
// none, and gets /healthz from the host over the container's address.
func TestImage(t *testing.T) {
	testkit.RequireDocker(t, baseImage)
	ctx := testkit.ContextTimeout(t, 4*time.Minute)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	run(t, ctx, []string{"VERSION=v0.0.7-image"}, filepath.Join(root, "images/build.sh"), "supervisor")
	t.Logf("images/build.sh supervisor: %v", time.Since(t0).Round(time.Millisecond))

	if got := run(t, ctx, nil, "docker", "image", "inspect", "--format", "{{.Config.User}} {{json .Config.Entrypoint}}", image); got != `berth:berth ["/usr/bin/berth","supervisor"]` {
		t.Errorf("image user and entrypoint: %s", got)
	}
	if got := run(t, ctx, nil, "docker", "run", "--rm", "--network", "none", "--entrypoint", "/usr/bin/berth", image, "version"); !strings.HasPrefix(got, "berth v0.0.7-image ") {
		t.Errorf("berth version in the image: %q", got)
	}

	name := fmt.Sprintf("berth-supervisor-image-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	run(t, ctx, nil, "docker", "run", "-d", "--name", name, "--read-only", "--cap-drop", "ALL",
		"--security-opt", "no-new-privileges", "--tmpfs", "/var/lib/berth:uid=999,gid=999,mode=0750",
		"-e", "DEFAULT_PROVIDER=tunnel", image)
	t.Cleanup(func() { exec.Command("docker", "rm", "-f", name).Run() })
	ip := run(t, ctx, nil, "docker", "inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", name)
	if ip == "" {
		t.Fatal("the container has no address")
	}

	url := "http://" + ip + ":8080/healthz"
	var status int
	var body string
	ok := testkit.PollContext(ctx, 30*time.Second, func() bool {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		status, body = resp.StatusCode, b.String()
		return true
	})
	if !ok {
		logs, _ := exec.Command("docker", "logs", name).CombinedOutput()
		t.Fatalf("GET %s never answered; logs:\n%s", url, logs)
	}
	if status != http.StatusOK || !strings.Contains(body, `"ok"`) {
		t.Errorf("GET %s: %d %s", url, status, body)
	}
	// The supervisor's process runs as berth, not root.
	if got := run(t, ctx, nil, "docker", "top", name, "-o", "pid,uid,args"); !strings.Contains(got, "999") || !strings.Contains(got, "berth supervisor") {
		t.Errorf("docker top:\n%s", got)
	}
	t.Logf("healthz %d in %v", status, time.Since(t0).Round(time.Millisecond))
}
