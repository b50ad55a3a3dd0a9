package tunnel

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/berthdev/berth/egress"
	"github.com/berthdev/berth/internal/httpjson"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/docker"
	ptunnel "github.com/berthdev/berth/providers/tunnel"
)

// The runner keeps one computer at a time. A supervisor's tunnel provider
// claims it for a session (ptunnel.ClaimPath) and resets it when the
// session ends (ptunnel.ResetPath): the runner destroys that computer and
// starts a fresh one with the same token, so that the next session starts
// empty and the connection file stays valid. A claim whose environment
// differs from the one the waiting computer was started with gets a fresh
// computer started with it.

// Codes of the runner API's errors (besides ptunnel.CodeInUse).
const (
	codeUnauthorized = "unauthorized"
	codeBadRequest   = "bad_request"
	codeUnavailable  = "unavailable"
	codeNotFound     = "not_found"
)

// computer is a computer the runner started.
type computer struct {
	id      string // the computer id the runner gave it
	machine string // the Docker provider's machine id (the container name)
	// endpoint is computerd on the Docker network.
	endpoint string
	// env is the environment it was started with, without the proxy
	// variables.
	env   map[string]string
	proxy http.Handler
}

// runner owns the computers of one run and serves the runner API.
type runner struct {
	d     *docker.Docker
	tok   string
	image string
	end   time.Time // when the run's lifetime ends
	log   *slog.Logger
	// proxyEnv returns a computer's environment with the proxy variables
	// (egress.ProxyVars) set for the runner's egress proxy, or removed.
	proxyEnv func(computerID string, env map[string]string) map[string]string
	egress   *egressRun // nil: no egress proxy
	turn     *turnRun   // nil: no live view

	ctx    context.Context // ends when the run ends
	cancel context.CancelFunc
	wg     sync.WaitGroup

	op sync.Mutex // one claim, reset or start at a time

	mu    sync.Mutex
	cur   *computer         // nil while none runs
	claim map[string]string // the labels of the session that holds cur; nil when free
}

func newRunner(ctx context.Context, d *docker.Docker, tok, image string, end time.Time, log *slog.Logger) *runner {
	r := &runner{d: d, tok: tok, image: image, end: end, log: log,
		proxyEnv: func(_ string, env map[string]string) map[string]string { return egress.WithoutProxyEnv(env) }}
	r.ctx, r.cancel = context.WithCancel(context.WithoutCancel(ctx))
	return r
}

// current returns the running computer and the labels of the session that
// holds it.
func (r *runner) current() (*computer, map[string]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur, r.claim
}

func (r *runner) set(c *computer, claim map[string]string) {
	r.mu.Lock()
	r.cur, r.claim = c, claim
	r.mu.Unlock()
}

// start starts a computer with env (without proxy variables) and waits for
// its computerd to accept the token. The caller holds r.op.
func (r *runner) start(ctx context.Context, env map[string]string) (*computer, error) {
	id := "tunnel-" + randomHex(8)
	lease := time.Until(r.end) + cleanupTimeout
	if lease < MinLifetime {
		lease = MinLifetime
	}
	spec := providers.Spec{
		ComputerID: id,
		SessionID:  id,
		AttemptID:  "a-" + id,
		Deployment: "tunnel",
		AgentID:    "tunnel",
		Image:      r.image,
		TokenHash:  token.Hash(r.tok),
		Env:        r.turn.env(r.proxyEnv(id, env)),
		Lease:      lease,
	}
	m, err := r.d.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	if err := waitHealthy(ctx, m.Endpoint, r.tok); err != nil {
		if derr := r.destroy(ctx, m.ID); derr != nil {
			r.log.Error("destroy computer", "machine", m.ID, "err", derr)
		}
		return nil, err
	}
	target, err := url.Parse(m.Endpoint)
	if err != nil {
		r.destroy(ctx, m.ID)
		return nil, fmt.Errorf("computer endpoint %q: %w", m.Endpoint, err)
	}
	r.log.Info("computer started", "machine", m.ID)
	return &computer{id: id, machine: m.ID, endpoint: m.Endpoint, env: maps.Clone(env), proxy: newProxy(target, r.log)}, nil
}

// destroy removes a computer, within cleanupTimeout even when ctx has
// ended.
func (r *runner) destroy(ctx context.Context, machine string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	return r.d.Destroy(ctx, machine)
}

// close stops the runner's background work and destroys its computer.
func (r *runner) close() (machine string, err error) {
	r.op.Lock()
	r.cancel() // under op: no reset starts background work after this
	r.op.Unlock()
	r.wg.Wait()
	defer r.stopEgress()
	defer r.turn.close(r.log)
	r.op.Lock()
	defer r.op.Unlock()
	c, _ := r.current()
	if c == nil {
		return "", nil
	}
	r.set(nil, nil)
	return c.machine, r.destroy(context.Background(), c.machine)
}

// ServeHTTP serves the runner API under ptunnel.RunnerPath and forwards
// everything else to the current computer's computerd.
func (r *runner) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	switch p := req.URL.Path; {
	case p == ptunnel.RunnerPath || len(p) > len(ptunnel.RunnerPath) && p[:len(ptunnel.RunnerPath)+1] == ptunnel.RunnerPath+"/":
		r.serveAPI(w, req)
	default:
		c, _ := r.current()
		if c == nil {
			httpjson.WriteError(w, http.StatusServiceUnavailable, codeUnavailable, "the runner is starting a fresh computer; retry shortly")
			return
		}
		c.proxy.ServeHTTP(w, req)
	}
}

func (r *runner) serveAPI(w http.ResponseWriter, req *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if subtle.ConstantTimeCompare([]byte(req.Header.Get("Authorization")), []byte("Bearer "+r.tok)) != 1 {
		httpjson.WriteError(w, http.StatusUnauthorized, codeUnauthorized, "missing or wrong bearer token: want the connection file's token")
		return
	}
	method := map[string]string{ptunnel.RunnerPath: http.MethodGet, ptunnel.ClaimPath: http.MethodPost, ptunnel.ResetPath: http.MethodPost}[req.URL.Path]
	switch {
	case method == "":
		httpjson.WriteError(w, http.StatusNotFound, codeNotFound, "no route "+req.Method+" "+req.URL.Path)
		return
	case req.Method != method:
		w.Header().Set("Allow", method)
		httpjson.WriteError(w, http.StatusMethodNotAllowed, codeBadRequest, fmt.Sprintf("%s %s: use %s", req.Method, req.URL.Path, method))
		return
	}
	switch req.URL.Path {
	case ptunnel.RunnerPath:
		c, claim := r.current()
		st := ptunnel.RunnerState{Claimed: claim != nil, Labels: claim}
		if c != nil {
			st.Machine = c.machine
		}
		httpjson.Write(w, http.StatusOK, st)
	case ptunnel.ClaimPath:
		var in ptunnel.ClaimRequest
		if !decode(w, req, &in) {
			return
		}
		r.serveClaim(w, req.Context(), in)
	case ptunnel.ResetPath:
		var in ptunnel.ResetRequest
		if !decode(w, req, &in) {
			return
		}
		r.serveReset(w, req.Context(), in)
	}
}

func decode(w http.ResponseWriter, req *http.Request, v any) bool {
	err := httpjson.Decode(w, req, ptunnel.MaxRunnerBytes, v)
	var de *httpjson.DecodeError
	if errors.As(err, &de) {
		httpjson.WriteError(w, de.Status(), codeBadRequest, de.Message)
		return false
	}
	return true
}

// serveClaim gives the computer to the session that in names, starting a
// fresh one when the waiting one was started with another environment.
// The same session's claim again answers the same computer.
func (r *runner) serveClaim(w http.ResponseWriter, ctx context.Context, in ptunnel.ClaimRequest) {
	attempt := in.Labels[providers.LabelAttempt]
	if attempt == "" {
		httpjson.WriteError(w, http.StatusBadRequest, codeBadRequest, "labels: the "+providers.LabelAttempt+" label is required")
		return
	}
	// A start is not left half done when the caller goes away.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), healthTimeout+cleanupTimeout)
	defer cancel()
	r.op.Lock()
	defer r.op.Unlock()
	c, claim := r.current()
	if claim != nil {
		if c != nil && claim[providers.LabelAttempt] == attempt {
			httpjson.Write(w, http.StatusOK, ptunnel.ClaimResult{Machine: c.machine})
			return
		}
		httpjson.WriteError(w, http.StatusConflict, ptunnel.CodeInUse,
			"the runner's computer is in use by another session: a tunnel runner serves one session at a time, and is free again once that session stops")
		return
	}
	env := withoutTURNEnv(egress.WithoutProxyEnv(in.Env))
	if c == nil || !maps.Equal(c.env, env) {
		if c != nil {
			if err := r.destroy(ctx, c.machine); err != nil {
				r.log.Error("destroy computer", "machine", c.machine, "err", err)
				httpjson.WriteError(w, http.StatusServiceUnavailable, codeUnavailable, "could not replace the waiting computer: "+err.Error())
				return
			}
			r.set(nil, nil)
		}
		var err error
		if c, err = r.start(ctx, env); err != nil {
			r.log.Error("start computer", "err", err)
			httpjson.WriteError(w, http.StatusServiceUnavailable, codeUnavailable, "could not start a computer: "+err.Error())
			return
		}
	}
	r.set(c, maps.Clone(in.Labels))
	r.log.Info("computer claimed", "machine", c.machine, "session", in.Labels[providers.LabelSession], "agent", in.Labels[providers.LabelAgent])
	httpjson.Write(w, http.StatusOK, ptunnel.ClaimResult{Machine: c.machine})
}

// serveReset destroys the computer in names and starts the next one in
// the background, with the same environment. A machine that is not the
// current computer is gone already.
func (r *runner) serveReset(w http.ResponseWriter, ctx context.Context, in ptunnel.ResetRequest) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	r.op.Lock()
	defer r.op.Unlock()
	c, _ := r.current()
	if c == nil || in.Machine == "" || c.machine != in.Machine {
		httpjson.Write(w, http.StatusOK, ptunnel.ResetResult{Gone: true})
		return
	}
	if err := r.destroy(ctx, c.machine); err != nil {
		// Possibly still there: keep it, and its claim, for the retry.
		r.log.Error("destroy computer", "machine", c.machine, "err", err)
		httpjson.WriteError(w, http.StatusServiceUnavailable, codeUnavailable, "could not destroy the computer: "+err.Error())
		return
	}
	r.set(nil, nil)
	r.log.Info("computer reset", "machine", c.machine)
	httpjson.Write(w, http.StatusOK, ptunnel.ResetResult{})
	if r.ctx.Err() != nil {
		return // the run is ending
	}
	r.wg.Go(func() {
		r.op.Lock()
		defer r.op.Unlock()
		if cur, _ := r.current(); cur != nil || r.ctx.Err() != nil {
			return
		}
		ctx, cancel := context.WithTimeout(r.ctx, healthTimeout+cleanupTimeout)
		defer cancel()
		// The next session most likely brings the same environment.
		next, err := r.start(ctx, c.env)
		if err != nil {
			r.log.Error("start the next computer", "err", err)
			return
		}
		r.set(next, nil)
	})
}
