// Package local is the provider for lent machines: it runs each computer
// on a lender's machine, someone else's computer and not the supervisor's
// host, through the relay that the lender's agent (`berth agent run`)
// connects out to, and reaches the computer's computerd through the same
// link. "Local" is meant from the lender's side: the computer runs locally
// on the lender's own machine. The lender's agent checks its owner's
// limits before every start; its refusals come back as clear errors.
package local

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/berthdev/berth/internal/httpjson"
	"github.com/berthdev/berth/lending"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/relay"
	"github.com/berthdev/berth/relay/relayserver"
)

// ID is the provider id the package registers under: computers local to a
// lender's machine (not to the supervisor's host).
const ID = "local"

// CredLender is the connection credential naming the lender: the
// companion agent id that pairing gave the lender's machine. It may be left
// out while only one lender is connected to the relay.
const CredLender = "lender"

// Settings the provider reads.
const (
	// SettingRelayURL is the relay's internal API (`berth relay`), such as
	// http://relay.internal:8081; SettingRelayToken the shared token that
	// guards it.
	SettingRelayURL   = "RELAY_URL"
	SettingRelayToken = "RELAY_TOKEN"
	// SettingCPUs and SettingMemoryMB, when set, are the size asked for
	// each lent computer; unset takes the owner's setting.
	SettingCPUs     = "LOCAL_COMPUTER_CPUS"
	SettingMemoryMB = "LOCAL_COMPUTER_MEMORY_MB"
)

// Error codes of the refusals the provider itself makes; the lender's own
// (lender.Code*) pass through.
const (
	CodeLenderOffline = "agent_offline"  // 503
	CodeNoLender      = "no_lender"      // 503: no lender connected
	CodeWhichLender   = "lender_unnamed" // 422: several connected, none named
)

// Relay reaches lenders' agents: the relay in the same process
// (InProcess) or a `berth relay` through its internal API
// (relayserver.Remote). It is providers.LenderRelay, which the supervisor
// passes in providers.Config.Relay.
type Relay = providers.LenderRelay

// InProcess adapts a relay server running in this process.
func InProcess(s *relayserver.Server) Relay { return inProcess{s} }

type inProcess struct{ s *relayserver.Server }

func (r inProcess) Presence(_ context.Context, id string) (relayserver.Presence, bool, error) {
	p, ok := r.s.Presence(id)
	return p, ok, nil
}
func (r inProcess) Lenders(context.Context) ([]relayserver.Presence, error) {
	return r.s.Lenders(), nil
}
func (r inProcess) Transport(id string) http.RoundTripper           { return r.s.Transport(id) }
func (r inProcess) Drop(_ context.Context, id string) (bool, error) { return r.s.Drop(id), nil }

func init() {
	providers.Register(ID, func(cfg providers.Config) (providers.Provider, error) {
		if cfg.Relay != nil {
			return FromConfig(cfg, cfg.Relay)
		}
		base, tok := cfg.Get(SettingRelayURL, ""), cfg.Get(SettingRelayToken, "")
		if base == relayserver.Lookup {
			return nil, fmt.Errorf("%s=%s: only the supervisor (berth supervisor) looks lenders' relays up, in its store", SettingRelayURL, relayserver.Lookup)
		}
		if base == "" || tok == "" {
			return nil, fmt.Errorf("the local provider reaches lenders through a relay: set %s (the relay's internal API) and %s (berth dev runs a relay of its own)", SettingRelayURL, SettingRelayToken)
		}
		r, err := relayserver.NewRemote(base, tok, nil)
		if err != nil {
			return nil, err
		}
		return FromConfig(cfg, r)
	})
}

// FromConfig builds the provider with relay r and the size settings in cfg.
func FromConfig(cfg providers.Config, r Relay) (*Local, error) {
	o := Options{Relay: r, Logger: cfg.Logger}
	if v := cfg.Get(SettingCPUs, ""); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f >= lending.MinCPUs && f <= lending.MaxCPUs) {
			return nil, fmt.Errorf("%s=%q: want %g to %d CPUs", SettingCPUs, v, lending.MinCPUs, lending.MaxCPUs)
		}
		o.CPUs = f
	}
	if v := cfg.Get(SettingMemoryMB, ""); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < lending.MinMemoryMB || n > lending.MaxMemoryMB {
			return nil, fmt.Errorf("%s=%q: want %d to %d megabytes", SettingMemoryMB, v, lending.MinMemoryMB, lending.MaxMemoryMB)
		}
		o.MemoryMB = n
	}
	return New(o)
}

// Options configure a Local provider.
type Options struct {
	Relay Relay // required
	// Workspace returns an agent's workspace, sent to the lender for its
	// ledger; nil sends none.
	Workspace providers.WorkspaceLookup
	// CPUs and MemoryMB are the size asked for; zero takes the owner's.
	CPUs     float64
	MemoryMB int64
	Logger   *slog.Logger
}

// Local is the provider for lent machines.
type Local struct {
	o   Options
	log *slog.Logger
}

// New returns a Local provider.
func New(o Options) (*Local, error) {
	if o.Relay == nil {
		return nil, errors.New("local provider: a relay is required")
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Local{o: o, log: log.With("component", "local")}, nil
}

// SetWorkspaceLookup implements providers.WorkspaceUser: it sets
// Options.Workspace once the supervisor's store is open. Call it before the
// first Create.
func (l *Local) SetWorkspaceLookup(f providers.WorkspaceLookup) {
	l.o.Workspace = f
}

var lenderID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// CheckCredentials accepts no credentials, or only lender with a companion
// agent id.
func (l *Local) CheckCredentials(c map[string]string) error {
	for k, v := range c {
		if k != CredLender {
			return fmt.Errorf("%q is not a local credential: the only one is %q, the lender's companion agent id (optional with one lender)", k, CredLender)
		}
		if !lenderID.MatchString(v) {
			return fmt.Errorf("%s: %q is not a companion agent id (as `berth agent pair` printed it, e.g. cp_...)", CredLender, v)
		}
	}
	return nil
}

// refused is a definite refusal the supervisor passes on as it is.
func refused(status int, code, format string, args ...any) error {
	return &providers.RefusedError{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// lenderFor picks the lender of a connection: the one its credentials
// name, or the only one the relay has seen.
func (l *Local) lenderFor(ctx context.Context, creds map[string]string) (string, error) {
	if id := creds[CredLender]; id != "" {
		return id, nil
	}
	lenders, err := l.o.Relay.Lenders(ctx)
	if err != nil {
		return "", fmt.Errorf("%w: relay: %v", providers.ErrUnavailable, err)
	}
	switch len(lenders) {
	case 0:
		return "", refused(http.StatusServiceUnavailable, CodeNoLender,
			"no lender's agent has connected to the relay: pair a machine (berth agent pair CODE --supervisor URL) and run berth agent run on it")
	case 1:
		return lenders[0].LenderID, nil
	}
	ids := make([]string, 0, len(lenders))
	for _, a := range lenders {
		ids = append(ids, a.LenderID)
	}
	slices.Sort(ids)
	return "", refused(http.StatusUnprocessableEntity, CodeWhichLender,
		"credentials.%s: %d lenders have connected to the relay (%s); name one in the connection's credentials", CredLender, len(ids), strings.Join(ids, ", "))
}

// offline checks that the lender is connected.
func (l *Local) offline(ctx context.Context, id string) error {
	p, seen, err := l.o.Relay.Presence(ctx, id)
	if err != nil {
		return fmt.Errorf("%w: relay: %v", providers.ErrUnavailable, err)
	}
	if p.Online {
		return nil
	}
	if !seen || p.LastSeen.IsZero() {
		return refused(http.StatusServiceUnavailable, CodeLenderOffline, "lender %s is offline: its agent has not connected to the relay since the relay started (is berth agent run running there?)", id)
	}
	return refused(http.StatusServiceUnavailable, CodeLenderOffline, "lender %s is offline: its link to the relay dropped; last seen %s", id, p.LastSeen.UTC().Format(time.RFC3339))
}

// createTimeout bounds a create, approval wait included.
const createTimeout = 10 * time.Minute

// maxErrorAnswer bounds what is read of a lender's error answer.
const maxErrorAnswer = 64 << 10

// Create asks the lender's agent for a computer. Its refusals (lending
// paused, the owner's limits, approval denied or timed out) and an agent
// that is offline are *providers.RefusedError: nothing was created.
func (l *Local) Create(ctx context.Context, spec providers.Spec) (providers.Machine, error) {
	id, err := l.lenderFor(ctx, spec.Credentials)
	if err != nil {
		return providers.Machine{}, err
	}
	if err := l.offline(ctx, id); err != nil {
		return providers.Machine{}, err
	}
	req := lending.CreateRequest{
		ComputerID: spec.ComputerID, SessionID: spec.SessionID, AttemptID: spec.AttemptID,
		Deployment: spec.Deployment, Agent: spec.AgentID, Image: spec.Image, TokenHash: spec.TokenHash,
		Env: spec.Env, LeaseSeconds: int(spec.Lease / time.Second), CPUs: l.o.CPUs, MemoryMB: l.o.MemoryMB,
	}
	if l.o.Workspace != nil {
		if ws, err := l.o.Workspace(ctx, spec.AgentID); err == nil {
			req.Workspace = ws
		}
	}
	body, err := json.Marshal(req)
	if err != nil {
		return providers.Machine{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, createTimeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://lender"+lending.PathComputers, bytes.NewReader(body))
	if err != nil {
		return providers.Machine{}, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := l.o.Relay.Transport(id).RoundTrip(hreq)
	if err != nil {
		if oe := new(relayserver.OfflineError); errors.As(err, &oe) {
			return providers.Machine{}, l.offline(ctx, id)
		}
		// The request may have reached the lender: not definite.
		return providers.Machine{}, fmt.Errorf("create computer %s on lender %s: %w: %v", spec.ComputerID, id, providers.ErrUnavailable, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return providers.Machine{}, l.lenderError(id, spec.ComputerID, resp)
	}
	var c lending.Computer
	if err := json.NewDecoder(io.LimitReader(resp.Body, lending.MaxAnswerBytes)).Decode(&c); err != nil {
		return providers.Machine{}, fmt.Errorf("create computer %s on lender %s: %w: answer: %v", spec.ComputerID, id, providers.ErrUnavailable, err)
	}
	m := providers.Machine{
		ID:       MachineID(id, c.MachineID),
		Endpoint: "http://lender" + lending.EndpointPath(c.ComputerID),
		Labels:   c.Labels,
	}
	l.log.Info("computer started on a lent machine", "computer", spec.ComputerID, "lender", id, "machine", m.ID)
	return m, nil
}

// lenderError turns an error answer of the lender into the provider's.
func (l *Local) lenderError(id, computerID string, resp *http.Response) error {
	e, _ := httpjson.ReadError(resp, maxErrorAnswer)
	if e.Code == "" {
		return fmt.Errorf("create computer %s on lender %s: %w: answer %d", computerID, id, providers.ErrUnavailable, resp.StatusCode)
	}
	switch e.Code {
	case lending.CodeBadImage:
		return fmt.Errorf("lender %s: %w: %s", id, providers.ErrBadImage, e.Message)
	case lending.CodeConflict, lending.CodeInternal:
		return fmt.Errorf("lender %s: %w: %s", id, providers.ErrUnavailable, e.Message)
	}
	status := e.Status
	if status < 400 || status == http.StatusInternalServerError {
		status = http.StatusBadGateway
	}
	return refused(status, e.Code, "lender %s: %s", id, e.Message)
}

// MachineID is the supervisor's id of a lent machine: the lender's
// companion id and the container's name.
func MachineID(lenderID, container string) string { return lenderID + "/" + container }

func splitMachine(machineID string) (lenderID, container string, err error) {
	lid, c, ok := strings.Cut(machineID, "/")
	if !ok || lid == "" || c == "" {
		return "", "", fmt.Errorf("machine id %q: want LENDER/CONTAINER", machineID)
	}
	return lid, c, nil
}

// Destroy asks the lender to remove the computer. An offline lender is
// providers.ErrUnavailable (the supervisor retries; the lender removes the
// computer by itself when its lease is over).
func (l *Local) Destroy(ctx context.Context, machineID string) error {
	id, container, err := splitMachine(machineID)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, "http://lender"+lending.PathComputers+"/"+container, nil)
	if err != nil {
		return err
	}
	resp, err := l.o.Relay.Transport(id).RoundTrip(req)
	if err != nil {
		return fmt.Errorf("destroy %s: %w: %v", machineID, providers.ErrUnavailable, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		e, _ := httpjson.ReadError(resp, maxErrorAnswer)
		return fmt.Errorf("destroy %s: %w: lender answered %d: %s", machineID, providers.ErrUnavailable, resp.StatusCode, e.Message)
	}
	return nil
}

// List returns the computers that the connection's lender runs (the
// lender named by the credentials in ctx, see providers.WithCredentials,
// or the only one the relay has seen). A lender that is offline is an
// error, never an empty list, so that reconciliation does not take its
// computers for gone.
func (l *Local) List(ctx context.Context) ([]providers.Machine, error) {
	id, err := l.lenderFor(ctx, providers.CredentialsFrom(ctx))
	if err != nil {
		return nil, err
	}
	if err := l.offline(ctx, id); err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://lender"+lending.PathComputers, nil)
	if err != nil {
		return nil, err
	}
	resp, err := l.o.Relay.Transport(id).RoundTrip(req)
	if err != nil {
		return nil, fmt.Errorf("list lender %s: %w: %v", id, providers.ErrUnavailable, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		e, _ := httpjson.ReadError(resp, maxErrorAnswer)
		return nil, fmt.Errorf("list lender %s: %w: answer %d: %s", id, providers.ErrUnavailable, resp.StatusCode, e.Message)
	}
	var cs []lending.Computer
	if err := json.NewDecoder(io.LimitReader(resp.Body, lending.MaxListBytes)).Decode(&cs); err != nil {
		return nil, fmt.Errorf("list lender %s: %w: %v", id, providers.ErrUnavailable, err)
	}
	out := make([]providers.Machine, 0, len(cs))
	for _, c := range cs {
		out = append(out, providers.Machine{
			ID:       MachineID(id, c.MachineID),
			Endpoint: "http://lender" + lending.EndpointPath(c.ComputerID),
			Labels:   c.Labels,
		})
	}
	return out, nil
}

// lenderStateTimeout bounds a lender's answer to a state request.
const lenderStateTimeout = 5 * time.Second

// LenderState asks an online lender for its state (lending.PathState):
// its computers and its owner's limits. The answer is read through
// lending.MaxListBytes within lenderStateTimeout.
func (l *Local) LenderState(ctx context.Context, lenderID string) (lending.State, error) {
	ctx, cancel := context.WithTimeout(ctx, lenderStateTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://lender"+lending.PathState, nil)
	if err != nil {
		return lending.State{}, err
	}
	resp, err := l.o.Relay.Transport(lenderID).RoundTrip(req)
	if err != nil {
		return lending.State{}, fmt.Errorf("state of lender %s: %w: %v", lenderID, providers.ErrUnavailable, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		e, _ := httpjson.ReadError(resp, maxErrorAnswer)
		return lending.State{}, fmt.Errorf("state of lender %s: %w: answer %d: %s", lenderID, providers.ErrUnavailable, resp.StatusCode, e.Message)
	}
	var st lending.State
	if err := json.NewDecoder(io.LimitReader(resp.Body, lending.MaxListBytes)).Decode(&st); err != nil {
		return lending.State{}, fmt.Errorf("state of lender %s: %w: %v", lenderID, providers.ErrUnavailable, err)
	}
	return st, nil
}

// Lenders implements providers.LenderLister: the presence of every
// lender's agent the relay has seen.
func (l *Local) Lenders(ctx context.Context) ([]relay.Presence, error) {
	return l.o.Relay.Lenders(ctx)
}

// Transport sends the supervisor's computerd requests for m through the
// relay to its lender.
func (l *Local) Transport(m providers.Machine, _ map[string]string) http.RoundTripper {
	id, _, err := splitMachine(m.ID)
	if err != nil {
		return failing{err}
	}
	return l.o.Relay.Transport(id)
}

type failing struct{ err error }

func (f failing) RoundTrip(*http.Request) (*http.Response, error) { return nil, f.err }

var (
	_ providers.Provider      = (*Local)(nil)
	_ providers.Transporter   = (*Local)(nil)
	_ providers.Lister        = (*Local)(nil)
	_ providers.WorkspaceUser = (*Local)(nil)
	_ providers.LenderLister  = (*Local)(nil)
)

// LenderOf returns the lender of a machine of this provider.
func (l *Local) LenderOf(machineID string) (string, bool) {
	lid, _, err := splitMachine(machineID)
	return lid, err == nil
}

// DropLender closes the lender's relay link, over the relay's internal API
// when the relay runs as its own process.
func (l *Local) DropLender(ctx context.Context, lenderID string) error {
	d, ok := l.o.Relay.(interface {
		Drop(ctx context.Context, lenderID string) (bool, error)
	})
	if !ok {
		return nil
	}
	_, err := d.Drop(ctx, lenderID)
	return err
}
