// Package cloud uses another Berth supervisor as a provider ("cloud
// connect"): each computer is a computer of that supervisor, made through
// its REST API with the connection's key (its SUPERVISOR_TOKEN, or an
// agent key), so the time is billed to that supervisor's workspace.
//
// For every computer the provider creates an agent and a connection on the
// remote supervisor and starts it; the tools then go through the remote
// REST tools (exec, read_file, write_file), which the provider's transport
// speaks on behalf of the local supervisor's computerd api. Live view
// and terminals have no REST form and are refused with a clear message.
//
// The remote agent's id carries Berth's labels, so that a start whose
// reply was lost, and reconciliation, find it:
// b.<deployment>.<session>.<attempt>.
package cloud

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/internal/httpapi"
)

// ID is the provider id.
const ID = "cloud"

// Credentials a connection gives.
const (
	CredURL       = "url"
	CredAPIKey    = "apiKey"
	CredWorkspace = "workspace" // optional: the remote workspace billed
)

// agentPrefix starts the id of every remote agent the provider makes.
const agentPrefix = "b."

// NotSupported is the message for the computerd calls a remote computer
// cannot serve.
const NotSupported = "live view and terminals are not available on a cloud computer: the remote supervisor offers exec, read_file and write_file only"

var idPart = regexp.MustCompile(`^[A-Za-z0-9_-]{1,20}$`)

func init() {
	providers.Register(ID, func(cfg providers.Config) (providers.Provider, error) {
		return New(Options{Logger: cfg.Logger}), nil
	})
	providers.Describe(ID, (*Cloud)(nil))
}

// Options configure the provider.
type Options struct {
	// Transport reaches the remote supervisors (default
	// http.DefaultTransport).
	Transport http.RoundTripper
	Logger    *slog.Logger
}

// Cloud is the provider.
type Cloud struct {
	tr  http.RoundTripper
	log *slog.Logger
}

// New returns a provider.
func New(o Options) *Cloud {
	if o.Transport == nil {
		o.Transport = http.DefaultTransport
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Cloud{tr: o.Transport, log: o.Logger.With("component", ID)}
}

// Describe implements providers.Describer.
func (*Cloud) Describe() providers.Description {
	return providers.Description{
		Summary: "another Berth supervisor; its time is billed to that workspace; no live view or terminals",
		Credentials: []providers.Setting{
			{Name: CredURL, Required: true, Help: "the remote supervisor's URL"},
			{Name: CredAPIKey, Required: true, Secret: true, Help: "its SUPERVISOR_TOKEN or an agent key"},
			{Name: CredWorkspace, Default: "default", Help: "the remote workspace the time is billed to"},
		},
	}
}

// CheckCredentials requires url (http or https) and apiKey.
func (c *Cloud) CheckCredentials(cr map[string]string) error {
	_, _, _, err := credentials(cr)
	return err
}

var wsRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

func credentials(c map[string]string) (base, key, workspace string, err error) {
	for k := range c {
		if k != CredURL && k != CredAPIKey && k != CredWorkspace {
			return "", "", "", fmt.Errorf("%q is not a cloud credential: want %q, %q and optionally %q", k, CredURL, CredAPIKey, CredWorkspace)
		}
	}
	u, perr := url.Parse(strings.TrimSpace(c[CredURL]))
	if c[CredURL] == "" {
		return "", "", "", fmt.Errorf("%s is missing: want the remote supervisor's URL", CredURL)
	}
	if perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" {
		return "", "", "", fmt.Errorf("%s %q is not an http(s) URL", CredURL, c[CredURL])
	}
	key = c[CredAPIKey]
	if strings.TrimSpace(key) == "" {
		return "", "", "", fmt.Errorf("%s is missing: want the remote SUPERVISOR_TOKEN or an agent key", CredAPIKey)
	}
	workspace = c[CredWorkspace]
	if workspace != "" && !wsRE.MatchString(workspace) {
		return "", "", "", fmt.Errorf("%s %q must be 1 to 64 letters, digits, '.', '_' or '-'", CredWorkspace, workspace)
	}
	return strings.TrimRight(u.String(), "/"), key, workspace, nil
}

// agentID returns the remote agent id of spec, or an error when its ids
// do not fit.
func agentID(spec providers.Spec) (string, error) {
	for _, p := range []string{spec.Deployment, spec.SessionID, spec.AttemptID} {
		if !idPart.MatchString(p) {
			return "", fmt.Errorf("id %q cannot be carried in a remote agent id (1 to 20 letters, digits, '_' or '-')", p)
		}
	}
	return agentPrefix + spec.Deployment + "." + spec.SessionID + "." + spec.AttemptID, nil
}

// labelsOf reads Berth's labels back from a remote agent id.
func labelsOf(agent string) (map[string]string, bool) {
	rest, ok := strings.CutPrefix(agent, agentPrefix)
	if !ok {
		return nil, false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 {
		return nil, false
	}
	l := map[string]string{
		providers.LabelManaged:    "true",
		providers.LabelDeployment: parts[0],
		providers.LabelSession:    parts[1],
		providers.LabelAttempt:    parts[2],
	}
	if s, ok := strings.CutPrefix(parts[1], "s_"); ok {
		l[providers.LabelComputer] = s
	}
	return l, true
}

func (c *Cloud) client(base, key string) (*api.Client, error) {
	return api.New(base, key, api.WithHTTPClient(&http.Client{Transport: c.tr, Timeout: 3 * time.Minute}),
		api.WithUserAgent("berth-cloud-provider"))
}

// mapErr maps the remote supervisor's answers. A request it refused for
// sure (400, 409 other than an existing agent or connection, 422: a
// lender's limits, a bad argument) is refused here too, with its reason,
// so that nothing is taken for a machine that may exist.
func mapErr(err error) error {
	var ae *api.APIError
	if !errors.As(err, &ae) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		return fmt.Errorf("%w: the remote supervisor: %v", providers.ErrUnavailable, err)
	}
	var kind error
	switch {
	case ae.Status == http.StatusUnauthorized || ae.Status == http.StatusForbidden:
		kind = providers.ErrBadCredentials
	case ae.Code == "budget_exhausted", ae.Status == http.StatusTooManyRequests,
		ae.Status == http.StatusServiceUnavailable && strings.Contains(ae.Message, "capacity"):
		kind = providers.ErrCapacity
	case ae.Status == http.StatusNotFound:
		kind = providers.ErrNotFound
	case ae.Status == http.StatusBadRequest, ae.Status == http.StatusConflict, ae.Status == http.StatusUnprocessableEntity:
		code := ae.Code
		if code == "" {
			code = httpapi.CodeRefused
		}
		return &providers.RefusedError{Status: http.StatusUnprocessableEntity, Code: code,
			Message: "the remote supervisor refused: " + ae.Message}
	default:
		kind = providers.ErrUnavailable
	}
	return fmt.Errorf("%w: the remote supervisor answered %d %s: %s", kind, ae.Status, ae.Code, ae.Message)
}

func isConflict(err error) bool {
	var ae *api.APIError
	return errors.As(err, &ae) && ae.Status == http.StatusConflict && ae.Code == "conflict"
}

// Create makes the remote agent and connection and starts the computer.
// The start carries the attempt as its idempotency key, so a retried start
// never makes a second computer.
func (c *Cloud) Create(ctx context.Context, spec providers.Spec) (providers.Machine, error) {
	base, key, workspace, err := credentials(spec.Credentials)
	if err != nil {
		return providers.Machine{}, fmt.Errorf("create computer %s: %w: %v", spec.ComputerID, providers.ErrBadCredentials, err)
	}
	agent, err := agentID(spec)
	if err != nil {
		return providers.Machine{}, fmt.Errorf("create computer %s: %w: %v", spec.ComputerID, providers.ErrBadImage, err)
	}
	cl, err := c.client(base, key)
	if err != nil {
		return providers.Machine{}, fmt.Errorf("create computer %s: %w: %v", spec.ComputerID, providers.ErrBadCredentials, err)
	}
	if _, err := cl.CreateAgent(ctx, api.CreateAgentRequest{ID: agent, Name: "berth agent " + spec.AgentID, Workspace: workspace}); err != nil && !isConflict(err) {
		return providers.Machine{}, fmt.Errorf("create computer %s: remote agent: %w", spec.ComputerID, mapErr(err))
	}
	lease := int(spec.Lease / time.Second)
	lease = min(max(lease, 60), 900)
	image := spec.Image
	if image == "" {
		image = providers.ImageHeadless
	}
	if _, err := cl.Connect(ctx, api.ConnectRequest{Agent: agent, LeaseSeconds: lease, DailySeconds: max(lease, 3600), Image: image}); err != nil && !isConflict(err) {
		return providers.Machine{}, fmt.Errorf("create computer %s: remote connection: %w", spec.ComputerID, mapErr(err))
	}
	sctx := api.WithIdempotencyKey(ctx, "berth-start-"+spec.AttemptID)
	s, err := cl.Start(sctx, agent)
	if err != nil {
		err = mapErr(err)
		if errors.Is(err, providers.ErrCapacity) || errors.Is(err, providers.ErrBadCredentials) || errors.Is(err, providers.ErrRefused) {
			// Nothing runs there: remove the connection again.
			cl.Disconnect(context.WithoutCancel(ctx), agent)
		}
		return providers.Machine{}, fmt.Errorf("create computer %s: remote start: %w", spec.ComputerID, err)
	}
	if s == nil || s.State != api.StateRunning {
		return providers.Machine{}, fmt.Errorf("create computer %s: %w: the remote session is not running", spec.ComputerID, providers.ErrUnavailable)
	}
	c.log.Info("remote computer started", "computer", spec.ComputerID, "remote", base, "agent", agent, "session", s.ID)
	return providers.Machine{ID: agent, Endpoint: base + "/v1/agents/" + agent, Labels: spec.Labels()}, nil
}

// Destroy disconnects the remote agent, which stops its computer first.
// A remote cleanup still pending is an error, so that it is retried.
func (c *Cloud) Destroy(ctx context.Context, machineID string) error {
	base, key, _, err := credentials(providers.CredentialsFrom(ctx))
	if err != nil {
		return fmt.Errorf("destroy %s: %w: %v", machineID, providers.ErrBadCredentials, err)
	}
	cl, err := c.client(base, key)
	if err != nil {
		return err
	}
	if err := cl.Disconnect(ctx, machineID); err != nil {
		err = mapErr(err)
		if errors.Is(err, providers.ErrNotFound) {
			return nil
		}
		return fmt.Errorf("destroy %s: %w", machineID, err)
	}
	c.log.Info("remote computer stopped", "agent", machineID)
	return nil
}

// List returns the remote connections the provider made; those whose
// session runs come with their endpoint.
func (c *Cloud) List(ctx context.Context) ([]providers.Machine, error) {
	base, key, _, err := credentials(providers.CredentialsFrom(ctx))
	if err != nil {
		return nil, nil
	}
	cl, err := c.client(base, key)
	if err != nil {
		return nil, err
	}
	cs, err := cl.Computers(ctx)
	if err != nil {
		return nil, fmt.Errorf("list remote computers: %w", mapErr(err))
	}
	var out []providers.Machine
	for _, rc := range cs {
		labels, ok := labelsOf(rc.Agent)
		if !ok {
			continue
		}
		m := providers.Machine{ID: rc.Agent, Labels: labels}
		if rc.Session != nil && rc.Session.State == api.StateRunning {
			m.Endpoint = base + "/v1/agents/" + rc.Agent
		}
		out = append(out, m)
	}
	return out, nil
}

// Transport returns a RoundTripper that answers the supervisor's
// computerd calls for m with the remote REST tools.
func (c *Cloud) Transport(m providers.Machine, credentials map[string]string) http.RoundTripper {
	return &remote{c: c, agent: m.ID, creds: credentials}
}

type remote struct {
	c     *Cloud
	agent string
	creds map[string]string
}

func (r *remote) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		defer req.Body.Close()
	}
	base, key, _, err := credentials(r.creds)
	if err != nil {
		return answer(req, http.StatusUnauthorized, computerd.CodeUnauthorized, "the connection's cloud credentials are not usable")
	}
	cl, err := r.c.client(base, key)
	if err != nil {
		return nil, err
	}
	ctx := req.Context()
	path := req.URL.Path
	_, tail, _ := strings.Cut(path, "/v1/agents/"+r.agent)
	switch {
	case req.Method == http.MethodGet && tail == "/healthz":
		st, err := cl.Status(ctx, r.agent)
		if err != nil {
			return nil, mapErr(err)
		}
		if st.Session == nil || st.Session.State != api.StateRunning {
			return answer(req, http.StatusServiceUnavailable, computerd.CodeInternal, "the remote computer is not running")
		}
		return answer(req, http.StatusOK, "", computerd.Health{Status: "ok", Version: "cloud"})
	case req.Method == http.MethodPost && tail == "/v1/exec":
		var in computerd.ExecRequest
		if err := json.NewDecoder(io.LimitReader(req.Body, 8<<20)).Decode(&in); err != nil {
			return answer(req, http.StatusBadRequest, computerd.CodeBadRequest, "bad exec request")
		}
		if in.Stdin != "" || in.Cwd != "" || len(in.Env) > 0 {
			return answer(req, http.StatusBadRequest, computerd.CodeBadRequest, "a cloud computer runs commands without stdin, cwd or env")
		}
		secs := int((in.TimeoutMs + 999) / 1000)
		res, err := cl.Exec(ctx, r.agent, api.ExecRequest{Command: in.Command, TimeoutSeconds: min(max(secs, 1), 120)})
		if err != nil {
			return remoteError(req, err)
		}
		if res.Uncertain {
			// The remote lost the outcome: so is it lost here.
			return nil, errors.New("the remote supervisor reports the command's outcome as uncertain")
		}
		return answer(req, http.StatusOK, "", computerd.ExecResult{
			ExitCode: res.ExitCode, Stdout: res.Stdout, Stderr: res.Stderr, TimedOut: res.TimedOut,
			StdoutTruncated: res.Truncated, StdoutBytes: int64(len(res.Stdout)), StderrBytes: int64(len(res.Stderr)),
		})
	case req.Method == http.MethodGet && tail == "/v1/files/read":
		q := req.URL.Query()
		off, _ := strconv.ParseInt(q.Get("offset"), 10, 64)
		res, err := cl.ReadFile(ctx, r.agent, api.ReadFileRequest{Path: q.Get("path"), Offset: off})
		if err != nil {
			return remoteError(req, err)
		}
		return answer(req, http.StatusOK, "", computerd.ReadResult{Path: q.Get("path"), Content: res.Content, Offset: off, NextOffset: res.NextOffset, Truncated: res.Truncated})
	case req.Method == http.MethodPut && tail == "/v1/files/write":
		var in computerd.WriteRequest
		if err := json.NewDecoder(io.LimitReader(req.Body, 8<<20)).Decode(&in); err != nil {
			return answer(req, http.StatusBadRequest, computerd.CodeBadRequest, "bad write request")
		}
		res, err := cl.WriteFile(ctx, r.agent, api.WriteFileRequest{Path: in.Path, Content: in.Content})
		if err != nil {
			return remoteError(req, err)
		}
		return answer(req, http.StatusOK, "", computerd.WriteResult{Path: in.Path, Bytes: res.Bytes, SHA256: res.SHA256})
	}
	return answer(req, http.StatusNotImplemented, "not_supported", NotSupported)
}

// remoteError turns a remote tool's error answer into computerd's.
func remoteError(req *http.Request, err error) (*http.Response, error) {
	var ae *api.APIError
	if !errors.As(err, &ae) {
		return nil, err
	}
	code := computerd.CodeInternal
	switch ae.Code {
	case "not_found":
		code = computerd.CodeNotFound
	case "not_utf8":
		code = computerd.CodeNotUTF8
	case "limit_exceeded":
		code = computerd.CodeTooLarge
	case "permission_denied":
		code = computerd.CodePermission
	case "bad_request":
		code = computerd.CodeBadRequest
	}
	return answer(req, ae.Status, code, ae.Message)
}

// answer builds a computerd answer: v as JSON, or an error envelope when
// code is set.
func answer(req *http.Request, status int, code string, v any) (*http.Response, error) {
	if code != "" {
		v = computerd.ErrorBody{Error: &computerd.Error{Code: code, Message: fmt.Sprint(v)}}
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return &http.Response{
		Status: fmt.Sprintf("%d %s", status, http.StatusText(status)), StatusCode: status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/json"}},
		Body:          io.NopCloser(strings.NewReader(string(raw))),
		ContentLength: int64(len(raw)), Request: req,
	}, nil
}

var (
	_ providers.Provider          = (*Cloud)(nil)
	_ providers.Lister            = (*Cloud)(nil)
	_ providers.Transporter       = (*Cloud)(nil)
	_ providers.CredentialChecker = (*Cloud)(nil)
	_ providers.Describer         = (*Cloud)(nil)
)
