package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"
)

// TestCrashDuringSleepAndWake kills the supervisor with SIGKILL while a
// persistent computer's home (400 MB) is being archived at its stop,
// again while it is being restored at the next start, and a third time
// the moment a stop has recorded its archive, before the machine is gone.
// After each restart nothing is lost: the first restart finishes the sleep
// (the machine is still there, so the home is archived again, then the
// machine removed), the second wakes the computer with its files, the
// third removes the machine and keeps the recorded archive; no machine is
// left, and disconnecting deletes the archives.
func TestCrashDuringSleepAndWake(t *testing.T) {
	requireDocker(t, "berth/test:latest")
	light(t)
	dir := t.TempDir()
	p := runSupervisor(t, dir)
	dep := p.deployment()
	p.must("POST", "/v1/agents", map[string]any{"id": "crash-home", "name": "crash-home"}, 201, nil)
	p.must("POST", "/v1/computers", map[string]any{"agent": "crash-home", "persistence": "home"}, 201, nil)
	p.must("POST", "/v1/agents/crash-home/computer/start", nil, 200, nil)
	s := &super{t: t, url: p.url, token: p.token}
	if x := s.exec("crash-home", "head -c 400000000 /dev/urandom > big.bin && echo v1 > marker"); x.ExitCode != 0 {
		t.Fatalf("fill the home: %+v", x)
	}
	const print = "cd $HOME && sha256sum big.bin marker && stat -c '%n %s %a' big.bin marker"
	before := s.exec("crash-home", print).Stdout

	// SIGKILL while the stop archives the home.
	go p.call("POST", "/v1/agents/crash-home/computer/stop", "", nil, nil)
	if !testkit.Poll(time.Minute, func() bool { return objectBytes(filepath.Join(dir, "objects")) > 100<<20 }) {
		t.Fatalf("the archive's upload did not begin:\n%s", p.logs.String())
	}
	p.kill()
	archived := strings.Contains(p.logs.String(), "home archived")
	t.Logf("killed during the sleep; the archive had been recorded: %v", archived)

	p = runSupervisor(t, dir)
	var st struct {
		State   string `json:"state"`
		Session *struct {
			State string `json:"state"`
		} `json:"session"`
	}
	if !testkit.Poll(2*time.Minute, func() bool {
		p.call("GET", "/v1/agents/crash-home/computer", "", nil, &st)
		return st.State == "sleeping" && deploymentContainers(t, dep) == ""
	}) {
		t.Fatalf("after the restart the computer is %+v (containers: %q), not asleep:\n%s", st, deploymentContainers(t, dep), p.logs.String())
	}

	// SIGKILL while the start restores the home.
	go p.call("POST", "/v1/agents/crash-home/computer/start", "", nil, nil)
	testkit.Poll(30*time.Second, func() bool { return strings.Contains(p.logs.String(), `msg=started`) })
	time.Sleep(time.Second)
	p.kill()
	woke := strings.Contains(p.logs.String(), "msg=woke")
	t.Logf("killed during the wake; the wake had finished: %v", woke)

	p = runSupervisor(t, dir)
	s = &super{t: t, url: p.url, token: p.token}
	var code int
	if !testkit.Poll(2*time.Minute, func() bool {
		code, _ = p.call("POST", "/v1/agents/crash-home/computer/start", "", nil, nil)
		return code == 200
	}) {
		t.Fatalf("start after the second restart: %d\n%s", code, p.logs.String())
	}
	if after := s.exec("crash-home", print).Stdout; after != before {
		t.Fatalf("home after the crashes:\n%s\nbefore:\n%s", after, before)
	}

	// SIGKILL the moment the sleep's archive is recorded, before the
	// machine is removed (which takes a Docker computer about a second).
	if x := s.exec("crash-home", "echo v2 > marker"); x.ExitCode != 0 {
		t.Fatalf("change the home: %+v", x)
	}
	before = s.exec("crash-home", print).Stdout
	go p.call("POST", "/v1/agents/crash-home/computer/stop", "", nil, nil)
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(p.logs.String(), "home archived") {
		if time.Now().After(deadline) {
			t.Fatalf("the stop recorded no archive:\n%s", p.logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.kill()
	t.Logf("killed once the archive was recorded; the machine was still there: %v", deploymentContainers(t, dep) != "")
	p = runSupervisor(t, dir)
	s = &super{t: t, url: p.url, token: p.token}
	if !testkit.Poll(2*time.Minute, func() bool {
		p.call("GET", "/v1/agents/crash-home/computer", "", nil, &st)
		return st.State == "sleeping" && deploymentContainers(t, dep) == ""
	}) {
		t.Fatalf("after the third restart the computer is %+v (containers: %q), not asleep:\n%s", st, deploymentContainers(t, dep), p.logs.String())
	}
	p.must("POST", "/v1/agents/crash-home/computer/start", nil, 200, nil)
	if after := s.exec("crash-home", print).Stdout; after != before {
		t.Fatalf("home after the third crash:\n%s\nbefore:\n%s", after, before)
	}
	// The cleanup of the session the third kill cut short may still be
	// removing its network and volume: until it is done a disconnect
	// answers 409 and keeps the connection, and a retry finishes it.
	var disc int
	if !testkit.Poll(time.Minute, func() bool {
		disc, _ = p.call("DELETE", "/v1/agents/crash-home/computer", "", nil, nil)
		return disc != http.StatusConflict
	}) || disc != http.StatusOK {
		t.Fatalf("disconnect: %d, want 200 once the cleanup is done", disc)
	}
	if left := deploymentContainers(t, dep); left != "" {
		t.Fatalf("containers left after disconnect: %s", left)
	}
	var objects []string
	filepath.WalkDir(filepath.Join(dir, "objects"), func(path string, d os.DirEntry, err error) error {
		// An upload the SIGKILL cut short stays as a .put- file, which the
		// local store removes a day later (objstore.Local); it was never
		// an object.
		if err == nil && !d.IsDir() && strings.Contains(path, "archives") && !strings.HasPrefix(d.Name(), ".put-") {
			objects = append(objects, path)
		}
		return nil
	})
	if len(objects) != 0 {
		t.Fatalf("archive objects left after disconnect: %v", objects)
	}
}

// objectBytes sums the sizes of the files under dir: the object store's
// objects, and its uploads in progress.
func objectBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// deploymentContainers lists the computers (not the network holders) of
// one deployment.
func deploymentContainers(t *testing.T, dep string) string {
	t.Helper()
	var out []string
	for _, part := range strings.Split(deploymentObjects(t, dep), "; ") {
		if names, ok := strings.CutPrefix(part, "ps: "); ok {
			for _, n := range strings.Split(names, ",") {
				if strings.HasPrefix(n, "berth-c-") {
					out = append(out, n)
				}
			}
		}
	}
	return strings.Join(out, ",")
}
