package incus

// fakeIncus is a local Incus server for the provider's tests, following
// the Incus REST API as documented at
// https://linuxcontainers.org/incus/docs/main/rest-api/ and its OpenAPI
// spec (https://linuxcontainers.org/incus/docs/main/rest-api-spec/):
// every answer is the {type, status, status_code, operation, error_code,
// error, metadata} envelope; POST /1.0/instances, PUT
// /1.0/instances/{name}/state and DELETE /1.0/instances/{name} answer 202
// with an async operation that GET /1.0/operations/{id}/wait follows;
// instances take ?project=; an OCI source is {type: image, protocol: oci,
// server, alias}; config keys environment.* and user.* carry the
// environment and free-form metadata; GET /1.0/instances/{name}/state
// lists the addresses. It serves on a unix socket, as a local Incus does.
//
// Each running container is a real in-process computerd on a loopback
// address of its own at port 7070, bound to the token hash and
// environment of the instance's config. Bad days: 403 for every call while
// the client is untrusted, 503 on the next create, a create whose reply
// is lost after the instance was made, and deletes that fail with 500.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/computerd/server"
	"github.com/berthdev/berth/conformance/hostedtest"
)

type fakeIncus struct {
	t      testing.TB
	Socket string
	srv    *http.Server

	hostedtest.Faults
	instances   map[string]*fakeInstance
	ops         map[string]string // id -> error ("" success)
	failCreates int
	creates     int
}

type fakeInstance struct {
	Name    string            `json:"name"`
	Status  string            `json:"status"`
	Config  map[string]string `json:"config"`
	Project string            `json:"project"`
	ip      string
	srv     *http.Server
}

// state is the instance's /state answer.
func (in *fakeInstance) state() map[string]any {
	net := map[string]any{"eth0": map[string]any{"addresses": []map[string]string{
		{"family": "inet6", "address": "fe80::1", "scope": "link"},
		{"family": "inet", "address": in.ip, "scope": "global"}}}}
	return map[string]any{"status": in.Status, "network": net}
}

func newFakeIncus(t testing.TB) *fakeIncus {
	f := &fakeIncus{t: t, instances: map[string]*fakeInstance{}, ops: map[string]string{}}
	dir, err := osMkdirTempShort()
	if err != nil {
		t.Fatal(err)
	}
	f.Socket = filepath.Join(dir, "unix.socket")
	ln, err := net.Listen("unix", f.Socket)
	if err != nil {
		t.Fatal(err)
	}
	f.srv = &http.Server{Handler: f, ReadHeaderTimeout: 5 * time.Second}
	go f.srv.Serve(ln)
	t.Cleanup(func() {
		f.srv.Close()
		f.Mu.Lock()
		for _, in := range f.instances {
			if in.srv != nil {
				in.srv.Close()
			}
		}
		f.Mu.Unlock()
		removeAll(dir)
	})
	return f
}

func (f *fakeIncus) reply(w http.ResponseWriter, status int, body map[string]any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(body)
}

func (f *fakeIncus) fail(w http.ResponseWriter, code int, msg string) {
	f.reply(w, code, map[string]any{"type": "error", "error": msg, "error_code": code})
}

func (f *fakeIncus) sync(w http.ResponseWriter, meta any) {
	f.reply(w, 200, map[string]any{"type": "sync", "status": "Success", "status_code": 200, "metadata": meta})
}

// async records an operation that has already ended with errMsg.
func (f *fakeIncus) async(w http.ResponseWriter, errMsg string) {
	id := rand.Text()
	f.ops[id] = errMsg
	f.reply(w, 202, map[string]any{"type": "async", "status": "Operation created", "status_code": 100,
		"operation": "/1.0/operations/" + id, "metadata": map[string]any{"id": id, "class": "task", "status": "Running", "status_code": 103}})
}

func (f *fakeIncus) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if f.Refuse {
		f.fail(w, 403, "not authorized")
		return
	}
	path := r.URL.Path
	project := r.URL.Query().Get("project")
	switch {
	case path == "/1.0" && r.Method == "GET":
		f.sync(w, map[string]any{"api_version": "1.0", "auth": "trusted"})
	case strings.HasPrefix(path, "/1.0/operations/") && strings.HasSuffix(path, "/wait"):
		id := strings.TrimSuffix(strings.TrimPrefix(path, "/1.0/operations/"), "/wait")
		msg, ok := f.ops[id]
		if !ok {
			f.fail(w, 404, "Operation not found")
			return
		}
		st, code := "Success", 200
		if msg != "" {
			st, code = "Failure", 400
		}
		f.sync(w, map[string]any{"id": id, "status": st, "status_code": code, "err": msg})
	case path == "/1.0/instances" && r.Method == "POST":
		f.create(w, r, project)
	case path == "/1.0/instances" && r.Method == "GET":
		if r.URL.Query().Get("recursion") != "2" {
			f.fail(w, 400, "the fake serves recursion=2 only")
			return
		}
		out := []map[string]any{}
		for _, in := range f.instances {
			if in.Project == project {
				out = append(out, map[string]any{"name": in.Name, "status": in.Status, "config": in.Config, "project": in.Project, "state": in.state()})
			}
		}
		f.sync(w, out)
	case strings.HasPrefix(path, "/1.0/instances/"):
		rest := strings.TrimPrefix(path, "/1.0/instances/")
		name, sub, _ := strings.Cut(rest, "/")
		in := f.instances[name]
		if in == nil || in.Project != project {
			f.fail(w, 404, "Instance not found")
			return
		}
		switch {
		case sub == "" && r.Method == "GET":
			f.sync(w, in)
		case sub == "state" && r.Method == "GET":
			f.sync(w, in.state())
		case sub == "state" && r.Method == "PUT":
			var body struct {
				Action string `json:"action"`
			}
			json.NewDecoder(r.Body).Decode(&body)
			if body.Action != "stop" {
				f.fail(w, 400, "the fake stops only")
				return
			}
			if in.Status == "Stopped" {
				f.async(w, "The instance is already stopped")
				return
			}
			if in.srv != nil {
				in.srv.Close()
				in.srv = nil
			}
			in.Status = "Stopped"
			f.async(w, "")
		case sub == "" && r.Method == "DELETE":
			if hostedtest.Take(&f.FailDeletes) {
				f.fail(w, 500, "Failed deleting instance: storage busy")
				return
			}
			if in.Status == "Running" {
				f.async(w, "Instance is running")
				return
			}
			delete(f.instances, name)
			f.async(w, "")
		default:
			f.fail(w, 404, "not found")
		}
	default:
		f.fail(w, 404, "not found")
	}
}

func (f *fakeIncus) create(w http.ResponseWriter, r *http.Request, project string) {
	var body struct {
		Name   string            `json:"name"`
		Type   string            `json:"type"`
		Start  bool              `json:"start"`
		Config map[string]string `json:"config"`
		Source struct {
			Type, Protocol, Server, Alias string
		} `json:"source"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		f.fail(w, 400, "bad body")
		return
	}
	f.creates++
	if f.failCreates > 0 {
		f.failCreates--
		f.fail(w, 503, "Service unavailable")
		return
	}
	if body.Source.Type != "image" || body.Source.Protocol != "oci" || body.Source.Server == "" || body.Source.Alias == "" || body.Type != "container" {
		f.fail(w, 400, fmt.Sprintf("want an OCI image source and a container, got %+v", body))
		return
	}
	if _, dup := f.instances[body.Name]; dup {
		f.fail(w, 409, "Instance "+body.Name+" already exists")
		return
	}
	if body.Source.Alias == "missing:latest" {
		f.async(w, "Failed getting remote image info: manifest unknown")
		return
	}
	in := &fakeInstance{Name: body.Name, Status: "Stopped", Config: body.Config, Project: project}
	if body.Start {
		if err := f.start(in); err != nil {
			f.fail(w, 500, err.Error())
			return
		}
	}
	f.instances[body.Name] = in
	if hostedtest.Take(&f.LoseReplies) {
		hostedtest.HangUp(w)
		return
	}
	f.async(w, "")
}

// start runs the instance's computerd on a loopback address of its own.
func (f *fakeIncus) start(in *fakeInstance) error {
	env := map[string]string{}
	for k, v := range in.Config {
		if name, ok := strings.CutPrefix(k, "environment."); ok && name != computerd.EnvTokenHash && name != computerd.EnvComputerID {
			env[name] = v
		}
	}
	bind := rand.Text()
	sum := sha256.Sum256([]byte(bind))
	h := server.New(server.Config{BindHash: hex.EncodeToString(sum[:]), Home: f.t.TempDir(), Version: "fake-incus"})
	var ln net.Listener
	for range 20 {
		n, _ := rand.Int(rand.Reader, big.NewInt(1<<22))
		v := n.Int64()
		ip := fmt.Sprintf("127.%d.%d.%d", 10+v>>16%200, (v>>8)&255, 1+(v&255)%254)
		if l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(computerd.Port))); err == nil {
			ln, in.ip = l, ip
			break
		}
	}
	if ln == nil {
		return errors.New("no free loopback address")
	}
	in.srv = &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go in.srv.Serve(ln)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := computerd.NewClient("http://"+ln.Addr().String(), bind).Bind(ctx, computerd.BindRequest{TokenHash: in.Config["environment."+computerd.EnvTokenHash], Env: env}); err != nil {
		in.srv.Close()
		return err
	}
	in.Status = "Running"
	return nil
}

func (f *fakeIncus) exists(ctx context.Context, label, value string) (bool, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	for _, in := range f.instances {
		if in.Config[configKey(label)] == value {
			return true, nil
		}
	}
	return false, nil
}
