package testkit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// The variables that turn a missing facility into a failure instead of a
// skip, as `make test` and CI set them (to 1).
const (
	DockerEnv   = "BERTH_REQUIRE_DOCKER"   // the Docker engine, its test images, and the tools the desktop tests run
	PostgresEnv = "BERTH_REQUIRE_POSTGRES" // a PostgreSQL server (see internal/pgtest)
	NetnsEnv    = "BERTH_REQUIRE_NETNS"    // network namespaces
	CgroupEnv   = "BERTH_REQUIRE_CGROUP"   // cgroups that limit a process's CPU (LimitCPU)
)

// Required reports whether env is set to 1, that is whether a missing
// facility fails the tests that need it.
func Required(env string) bool { return os.Getenv(env) == "1" }

// Missing ends t because something it needs is missing here: it skips,
// saying why and how to run the test (fix), or fails when env is 1.
func Missing(t TB, env, why, fix string) {
	t.Helper()
	if Required(env) {
		t.Fatalf("%s, and %s=1; run: %s", why, env, fix)
		return
	}
	t.Skipf("%s; to run this test: %s (%s=1 turns this skip into a failure)", why, fix, env)
}

// The engine the tests use: DOCKER_SOCKET as the docker provider reads it
// (providers/docker.SettingSocket), or the default socket.
const (
	socketEnv     = "DOCKER_SOCKET"
	defaultSocket = "unix:///var/run/docker.sock"
)

// StartDocker is the command that installs and starts the engine, and
// builds the images the tests use.
const StartDocker = "make docker images (or make test)"

var (
	engineOnce sync.Once
	engineErr  error // nil, or why the engine cannot be used
	engineMiss bool  // the engine is absent (a skip), not broken (a failure)
	imagesMu   sync.Mutex
	imagesSeen = map[string]bool{}
)

// RequireDocker skips t when no Docker engine answers at DOCKER_SOCKET (or
// the default socket), or when one of images is missing, and fails it
// instead under BERTH_REQUIRE_DOCKER=1. An engine that answers with an
// error fails the test either way. The engine is asked once per test
// binary; an image, until it is found.
func RequireDocker(t TB, images ...string) {
	t.Helper()
	engineOnce.Do(func() { engineMiss, engineErr = pingEngine() })
	if engineErr != nil {
		if engineMiss {
			Missing(t, DockerEnv, fmt.Sprintf("no Docker engine at %s (%v)", host(), engineErr), StartDocker)
			return
		}
		t.Fatalf("Docker engine at %s: %v (start it with `make docker`)", host(), engineErr)
		return
	}
	for _, img := range images {
		missing, err := inspectImage(img)
		if err == nil {
			continue
		}
		if missing {
			Missing(t, DockerEnv, "image "+img+" is missing", "make images")
			return
		}
		t.Fatalf("image %s: %v (build it with `make images`)", img, err)
		return
	}
}

func host() string {
	if h := os.Getenv(socketEnv); h != "" {
		return h
	}
	return defaultSocket
}

// engineClient returns an HTTP client for the engine at host() and the
// base URL of its API. The kit speaks the two calls it needs (/_ping and
// an image's inspect) itself, so that the tests of packages that never
// touch the engine do not link a Docker client.
func engineClient() (*http.Client, string, error) {
	h := host()
	tr := &http.Transport{DisableKeepAlives: true}
	switch {
	case strings.HasPrefix(h, "unix://") || strings.HasPrefix(h, "/"):
		path := strings.TrimPrefix(h, "unix://")
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}
		return &http.Client{Transport: tr}, "http://docker", nil
	case strings.HasPrefix(h, "tcp://"):
		return &http.Client{Transport: tr}, "http://" + strings.TrimPrefix(h, "tcp://"), nil
	}
	return nil, "", fmt.Errorf("%s=%q: want unix:///PATH, tcp://HOST:PORT or a socket path", socketEnv, h)
}

// engineGet asks the engine for path and returns the answer's status.
// A connection that fails is reported as the engine missing.
func engineGet(path string) (status int, missing bool, err error) {
	hc, base, err := engineClient()
	if err != nil {
		return 0, false, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return 0, false, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		var op *net.OpError
		return 0, errors.As(err, &op) && op.Op == "dial", err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode/100 != 2 && resp.StatusCode != http.StatusNotFound {
		return resp.StatusCode, false, fmt.Errorf("GET %s: %s: %s", path, resp.Status, strings.TrimSpace(string(msg)))
	}
	return resp.StatusCode, false, nil
}

func pingEngine() (missing bool, err error) {
	_, missing, err = engineGet("/_ping")
	return missing, err
}

func inspectImage(img string) (missing bool, err error) {
	imagesMu.Lock()
	defer imagesMu.Unlock()
	if imagesSeen[img] {
		return false, nil
	}
	st, _, err := engineGet("/images/" + img + "/json")
	switch {
	case err != nil:
		return false, err
	case st == http.StatusNotFound:
		return true, fmt.Errorf("no such image: %s", img)
	}
	imagesSeen[img] = true
	return false, nil
}

// RequireTools skips t unless every one of names is an executable, on PATH
// or at the absolute path given, and fails it instead under
// BERTH_REQUIRE_DOCKER=1 (CI installs the tools the Docker-backed tests
// need). install is the command that installs them.
func RequireTools(t TB, install string, names ...string) {
	t.Helper()
	var missing []string
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		Missing(t, DockerEnv, strings.Join(missing, ", ")+" missing", install)
	}
}
