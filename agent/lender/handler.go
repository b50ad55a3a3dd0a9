package lender

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/internal/httpjson"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/lending"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/docker"
	"github.com/berthdev/berth/relay"
	"github.com/berthdev/berth/relay/relayclient"
)

// supervisorAPI is the lending protocol's server side: what the supervisor
// asks of this machine over the relay link (create, list, remove and each
// computer's computerd), and the link itself (Serve).
type supervisorAPI struct{ *core }

// maxCreateBody bounds a create request.
const maxCreateBody = 1 << 20

// Handler returns the API the supervisor reaches over the relay link.
func (l *supervisorAPI) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+lending.PathComputers, l.handleCreate)
	mux.HandleFunc("GET "+lending.PathComputers, func(w http.ResponseWriter, r *http.Request) {
		httpjson.Write(w, http.StatusOK, l.Computers())
	})
	mux.HandleFunc("DELETE "+lending.PathComputer, func(w http.ResponseWriter, r *http.Request) {
		if err := l.Destroy(r.Context(), r.PathValue("id")); err != nil {
			writeError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc(lending.PathComputer+lending.ComputerdPrefix+"/{rest...}", l.handleComputerd)
	mux.HandleFunc("GET "+lending.PathState, func(w http.ResponseWriter, r *http.Request) {
		httpjson.Write(w, http.StatusOK, l.State())
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errorf(http.StatusNotFound, lending.CodeNotFound, "no route %s %s", r.Method, r.URL.Path))
	})
	return mux
}

func (l *supervisorAPI) handleCreate(w http.ResponseWriter, r *http.Request) {
	var req lending.CreateRequest
	// Unknown fields are ignored, so that a newer supervisor can still
	// start computers on an older agent.
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxCreateBody))
	if err := dec.Decode(&req); err != nil {
		writeError(w, badRequest("body: %v", err))
		return
	}
	c, err := l.Create(r.Context(), req)
	if err != nil {
		writeError(w, err)
		return
	}
	httpjson.Write(w, http.StatusCreated, c)
}

// handleComputerd proxies a request to the computer's computerd. The
// supervisor's bearer token for the computer passes through untouched; when
// it matches the computer's token hash the agent keeps it in memory, to
// take screenshots for the owner. A proxied call runs to its end even when
// the relay link drops mid-call, so that a command is never cut half-way
// by the link; its answer is then lost and the supervisor reports it as
// uncertain.
func (l *supervisorAPI) handleComputerd(w http.ResponseWriter, r *http.Request) {
	c, err := l.lookup(r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	target, err := url.Parse(c.endpoint)
	if err != nil || c.endpoint == "" {
		writeError(w, errorf(http.StatusServiceUnavailable, lending.CodeUnavailable, "computer %s has no address", c.s.ComputerID))
		return
	}
	if tok := relay.BearerToken(r.Header.Get("Authorization")); tok != "" && c.s.TokenHash != "" && token.Check(tok, c.s.TokenHash) {
		c.mu.Lock()
		c.token = tok
		c.mu.Unlock()
	}
	rest := "/" + r.PathValue("rest")
	upgrade := r.Header.Get("Upgrade") != ""
	if !upgrade {
		r = r.WithContext(context.WithoutCancel(r.Context()))
	}
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.URL.Path = strings.TrimSuffix(target.Path, "/") + rest
			pr.Out.URL.RawPath = ""
			pr.Out.Host = target.Host
		},
		Transport:     l.transport,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			// The supervisor polls /healthz until a new computer answers;
			// a failed poll is expected then, and the poll reports its end.
			level := slog.LevelWarn
			if rest == "/healthz" {
				level = slog.LevelDebug
			}
			l.log.Log(r.Context(), level, "computerd unreachable", "computer", c.s.ComputerID, "path", rest, "err", err)
			writeError(w, errorf(http.StatusBadGateway, lending.CodeUnavailable, "computer %s did not answer", c.s.ComputerID))
		},
	}
	p.ServeHTTP(w, r)
}

func writeError(w http.ResponseWriter, err error) {
	if errors.Is(err, ErrClosed) {
		err = errorf(http.StatusServiceUnavailable, lending.CodeUnavailable, "the agent is shutting down")
	}
	e := AsError(err)
	httpjson.WriteError(w, e.Status, e.Code, e.Message)
}

var (
	idRE        = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)
	tokenHashRE = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

func checkCreate(r *lending.CreateRequest) error {
	switch {
	case !idRE.MatchString(r.ComputerID):
		return badRequest("computerId: %q must be 1 to 128 letters, digits, '_', '.' or '-'", r.ComputerID)
	case !tokenHashRE.MatchString(r.TokenHash):
		return badRequest("tokenHash: want the hex SHA-256 of the computer's token (64 lowercase hex digits)")
	case r.LeaseSeconds < 60 || r.LeaseSeconds > MaxDailySeconds:
		return badRequest("leaseSeconds: %d is outside 60..%d", r.LeaseSeconds, MaxDailySeconds)
	case r.CPUs < 0 || r.MemoryMB < 0:
		return badRequest("cpus and memoryMB: must not be negative")
	case len(r.Agent) > 128 || len(r.Workspace) > 128 || len(r.SessionID) > 128 || len(r.AttemptID) > 128 || len(r.Deployment) > 128:
		return badRequest("agent, workspace, sessionId, attemptId and deployment: at most 128 characters each")
	}
	switch r.Image {
	case "":
		r.Image = providers.ImageHeadless
	case providers.ImageHeadless, providers.ImageDesktop:
	default:
		return badRequest("image: %q must be %q or %q", r.Image, providers.ImageHeadless, providers.ImageDesktop)
	}
	return nil
}

// Create starts a computer, after checking the owner's limits and, in
// approval mode, waiting for the owner. A retry of the same attempt
// returns the computer it made.
func (l *supervisorAPI) Create(ctx context.Context, r lending.CreateRequest) (lending.Computer, error) {
	if err := checkCreate(&r); err != nil {
		return lending.Computer{}, err
	}
	lease := time.Duration(r.LeaseSeconds) * time.Second
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return lending.Computer{}, ErrClosed
	}
	if c := l.running[r.ComputerID]; c != nil {
		l.mu.Unlock()
		if c.s.AttemptID == r.AttemptID {
			return l.view(c), nil
		}
		return lending.Computer{}, errorf(http.StatusConflict, lending.CodeConflict, "computer %s already runs here (attempt %s)", r.ComputerID, c.s.AttemptID)
	}
	if _, ok := l.starting[r.ComputerID]; ok {
		l.mu.Unlock()
		return lending.Computer{}, errorf(http.StatusConflict, lending.CodeConflict, "computer %s is already starting", r.ComputerID)
	}
	now := l.clk.Now()
	s := l.settings
	day, err := l.checkLimits(ctx, r, s, now)
	if err != nil {
		l.mu.Unlock()
		l.log.Info("start refused", "computer", r.ComputerID, "agent", r.Agent, "workspace", r.Workspace, "reason", err)
		return lending.Computer{}, err
	}
	l.starting[r.ComputerID] = reservation{lease: lease, day: day}
	l.mu.Unlock()
	release := func() {
		l.mu.Lock()
		delete(l.starting, r.ComputerID)
		l.mu.Unlock()
	}

	if s.Approval {
		if err := l.await(ctx, r, time.Duration(s.ApprovalTimeoutSeconds)*time.Second); err != nil {
			release()
			l.log.Info("start refused", "computer", r.ComputerID, "agent", r.Agent, "reason", err)
			return lending.Computer{}, err
		}
		now = l.clk.Now()
	}
	c, err := l.launch(ctx, r, day, now, lease)
	if err != nil {
		release()
		return lending.Computer{}, err
	}
	l.mu.Lock()
	delete(l.starting, r.ComputerID)
	if l.closed {
		l.mu.Unlock()
		return l.view(c), nil
	}
	l.running[r.ComputerID] = c
	l.watch(c)
	l.mu.Unlock()
	return l.view(c), nil
}

// checkLimits refuses a start that breaks one of the owner's limits, each
// with its own code. It runs with l.mu held and returns the owner's local
// day the session counts on.
func (l *supervisorAPI) checkLimits(ctx context.Context, r lending.CreateRequest, s control.Settings, now time.Time) (string, error) {
	loc, err := location(s.TimeZone)
	if err != nil {
		loc = time.Local
	}
	local := now.In(loc)
	day := local.Format(time.DateOnly)
	if !s.Lending {
		return "", errorf(http.StatusServiceUnavailable, lending.CodePaused, "lending is paused by the machine's owner")
	}
	if !allowedAt(s.Hours, local) {
		days := "every day"
		if len(s.Hours.Days) > 0 {
			days = strings.Join(s.Hours.Days, ", ")
		}
		return "", limitf(lending.CodeHours, "the owner lends this machine from %s to %s (%s, %s); it is %s there now",
			s.Hours.From, s.Hours.To, days, loc, local.Format("Mon 15:04"))
	}
	if r.Image == providers.ImageDesktop && !s.Desktop {
		return "", limitf(lending.CodeDesktop, "the owner allows no desktop computers on this machine; ask for the headless image")
	}
	if r.CPUs > s.CPUs {
		return "", limitf(lending.CodeCPU, "cpus: %g asked, the owner allows at most %g per computer", r.CPUs, s.CPUs)
	}
	if r.MemoryMB > s.MemoryMB {
		return "", limitf(lending.CodeMemory, "memoryMB: %d asked, the owner allows at most %d MB per computer", r.MemoryMB, s.MemoryMB)
	}
	if n := len(l.running) + len(l.starting); n >= s.MaxComputers {
		return "", limitf(lending.CodeTooMany, "the owner allows at most %d computers at once on this machine; %d are running or starting", s.MaxComputers, n)
	}
	used, err := l.cfg.Ledger.DaySeconds(ctx, day, now)
	if err != nil {
		return "", err
	}
	var reserved int64
	for _, c := range l.running {
		if c.s.Day == day && c.s.ExpiresAt.After(now) {
			reserved += int64(c.s.ExpiresAt.Sub(now).Seconds())
		}
	}
	for _, p := range l.starting {
		if p.day == day {
			reserved += int64(p.lease.Seconds())
		}
	}
	if left := s.DailySeconds - used - reserved; left < int64(r.LeaseSeconds) {
		return "", limitf(lending.CodeBudget, "daily lending budget: %d s of %d s left today (%s), this session needs %d s; it resets at midnight %s",
			max(left, 0), s.DailySeconds, day, r.LeaseSeconds, loc)
	}
	return day, nil
}

// await waits for the owner to approve the start, refusing it on a denial
// or once timeout has passed.
func (l *supervisorAPI) await(ctx context.Context, r lending.CreateRequest, timeout time.Duration) error {
	now := l.clk.Now()
	a := &approval{
		info: control.Approval{
			ID: "ap_" + r.ComputerID, Agent: r.Agent, Workspace: r.Workspace, Image: r.Image,
			Requested: now, Deadline: now.Add(timeout), State: control.ApprovalPending,
		},
		decided: make(chan bool, 1),
	}
	expired := l.clk.After(timeout) // before the approval shows, so a moved clock always finds it
	l.mu.Lock()
	l.approvals[a.info.ID] = a
	l.mu.Unlock()
	l.log.Info("session waits for the owner's approval", "approval", a.info.ID, "agent", r.Agent, "deadline", a.info.Deadline)
	var reason error
	select {
	case ok := <-a.decided:
		if ok {
			return nil
		}
		return errorf(http.StatusForbidden, lending.CodeDenied, "the machine's owner denied the session")
	case <-expired:
		reason = errorf(http.StatusServiceUnavailable, lending.CodeApprovalTimeout, "the machine's owner did not approve the session within %d s", int(timeout.Seconds()))
	case <-ctx.Done():
		reason = errorf(http.StatusServiceUnavailable, lending.CodeApprovalTimeout, "the request ended while waiting for the owner's approval")
	case <-l.done:
		reason = ErrClosed
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if a.info.State != control.ApprovalPending { // decided at the last moment
		if <-a.decided {
			return nil
		}
		return errorf(http.StatusForbidden, lending.CodeDenied, "the machine's owner denied the session")
	}
	a.info.State = control.ApprovalTimedOut
	delete(l.approvals, a.info.ID)
	return reason
}

// Destroy removes a computer by its computer id or machine id. A computer
// that is gone is not an error.
func (l *supervisorAPI) Destroy(ctx context.Context, id string) error {
	id = strings.TrimPrefix(id, docker.ContainerPrefix)
	if !idRE.MatchString(id) {
		return badRequest("id: %q is not a computer id", id)
	}
	return l.end(ctx, l.computerOf(id), "stopped")
}

// State returns what the lender runs.
func (l *supervisorAPI) State() lending.State {
	l.mu.Lock()
	s := l.settings
	l.mu.Unlock()
	lim := &lending.Limits{MaxComputers: s.MaxComputers, CPUs: s.CPUs, MemoryMB: s.MemoryMB, DailySeconds: s.DailySeconds, Desktop: s.Desktop}
	if s.Hours.From != "" {
		lim.Hours = s.Hours.From + "-" + s.Hours.To
		if s.TimeZone != "" {
			lim.Hours += " " + s.TimeZone
		}
	}
	return lending.State{AgentID: l.cfg.LenderID, Version: l.cfg.Version, Lending: s.Lending, Computers: l.Computers(), Limits: lim}
}

// Serve connects to the relay with rc (its URL and token) and serves the
// lender's API on the link until ctx ends, reconnecting with relayclient's
// backoff. Computers keep running while the link is down; each time it
// comes back the running computers are checked against the engine.
func (l *supervisorAPI) Serve(ctx context.Context, rc relayclient.Config) error {
	rc.Handler = l.Handler()
	if rc.Logger == nil {
		rc.Logger = l.log
	}
	if rc.Version == "" {
		rc.Version = l.cfg.Version
	}
	l.mu.Lock()
	l.relay.URL = rc.URL
	l.mu.Unlock()
	onConnect, onDisconnect := rc.OnConnect, rc.OnDisconnect
	rc.OnConnect = func() {
		l.setRelay(true, nil)
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := l.Resync(rctx); err != nil {
			l.log.Warn("resync after reconnect", "err", err)
		}
		cancel()
		if onConnect != nil {
			onConnect()
		}
	}
	rc.OnDisconnect = func(err error) {
		l.setRelay(false, err)
		if onDisconnect != nil {
			onDisconnect(err)
		}
	}
	return relayclient.Run(ctx, rc)
}

// setRelay records the relay link's state.
func (l *supervisorAPI) setRelay(online bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.relay.Online = online
	l.relay.Since = l.clk.Now()
	l.relay.LastError = ""
	if err != nil {
		l.relay.LastError = err.Error()
	}
}
