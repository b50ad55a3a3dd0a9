package providertest

import (
	"net/http"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/store"
)

// Persistence runs the persistent computer scenario on h: a connection
// with persistence "home" keeps the home (files, a symlink, a hard link,
// modes, a 3 MB file) across a stop and a start, the machine in between
// removed; a checkpoint brings back its own files. The archive is made and
// restored by computerd through whatever way the provider gives to reach
// it. It is not part of Run: the Docker computers of the e2e tests and the
// hosted providers' fakes run it.
func Persistence(t T, h Harness) {
	e := newEnv(t, h)
	e.connectWith("keep", map[string]any{"persistence": "home"})
	v := e.start("keep")
	const fill = "mkdir -p proj/sub && printf 'kept\\n' > proj/a.txt && chmod 0640 proj/a.txt && " +
		"ln -s a.txt proj/link && ln proj/a.txt proj/hard && head -c 3000000 /dev/urandom > proj/sub/r.bin"
	if r := e.exec("keep", fill); r.ExitCode != 0 {
		t.Fatalf("fill the home: %+v", r)
	}
	const print = "cd $HOME && find proj | sort | xargs stat -c '%n %F %a %h %s' && sha256sum proj/a.txt proj/sub/r.bin && readlink proj/link"
	before := e.exec("keep", print)
	if before.ExitCode != 0 || before.Stdout == "" {
		t.Fatalf("list the home: %+v", before)
	}
	x := e.session(v.ID)
	var stopped supervisor.SessionView
	e.must("POST", "/v1/agents/keep/computer/stop", nil, http.StatusOK, &stopped)
	if stopped.State != store.StateStopped {
		t.Fatalf("stop: %+v, want stopped", stopped)
	}
	if e.exists(providers.LabelAttempt, x.AttemptID) {
		t.Errorf("the backend still holds the machine of a sleeping computer (%s=%s)", providers.LabelAttempt, x.AttemptID)
	}
	var st api.ComputerStatus
	e.must("GET", "/v1/agents/keep/computer", nil, http.StatusOK, &st)
	if st.State != api.StateSleeping || st.Archive == nil || st.Archive.Bytes < 3_000_000 {
		t.Fatalf("status after stop: state %q, archive %+v; want sleeping with the archive", st.State, st.Archive)
	}

	v2 := e.start("keep")
	if v2.ID == v.ID {
		t.Fatalf("the wake reused session %s", v.ID)
	}
	if after := e.exec("keep", print); after.Stdout != before.Stdout {
		t.Fatalf("home after the wake:\n%s\nbefore the sleep:\n%s", after.Stdout, before.Stdout)
	}

	e.must("POST", "/v1/agents/keep/computer/checkpoints", map[string]any{"name": "first"}, http.StatusOK, nil)
	if r := e.exec("keep", "printf 'changed\\n' > proj/a.txt"); r.ExitCode != 0 {
		t.Fatalf("change a file: %+v", r)
	}
	e.must("POST", "/v1/agents/keep/computer/stop", nil, http.StatusOK, nil)
	e.must("POST", "/v1/agents/keep/computer/start", map[string]any{"checkpoint": "first"}, http.StatusOK, nil)
	var rd supervisor.ReadResult
	e.must("POST", "/v1/agents/keep/computer/read_file", map[string]any{"path": "proj/a.txt"}, http.StatusOK, &rd)
	if rd.Content != "kept\n" {
		t.Errorf("after starting from the checkpoint proj/a.txt is %q, want the checkpoint's \"kept\\n\"", rd.Content)
	}
	e.must("POST", "/v1/agents/keep/computer/stop", nil, http.StatusOK, nil)
	e.must("DELETE", "/v1/agents/keep/computer", nil, http.StatusOK, nil)
}
