// Package tunnel is the provider for a computer that someone runs on their
// own machine with `berth agent tunnel` and reaches by URL. The runner owns
// the computer and its lifetime; this provider claims the runner's computer
// for a session (one at a time), hands its URL and connection token to the
// supervisor, and has the runner reset it when the session ends, so that
// the next session starts on a fresh computer (the runner API, runner.go).
package tunnel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/berthdev/berth/internal/httpjson"
	"github.com/berthdev/berth/providers"
)

// ID is the provider id the package registers under.
const ID = "tunnel"

// The connection credentials the provider takes.
const (
	// CredURL is the runner's public URL (https://....trycloudflare.com, a
	// named tunnel's URL, or http://host:port).
	CredURL = "url"
	// CredAPIKey is the connection token from the runner's connection file.
	CredAPIKey = "apiKey"
)

// Deadlines of the calls to a runner.
const (
	checkTimeout = 30 * time.Second // the runner's health, and its state
	// claimTimeout bounds a claim: the runner may start a fresh computer
	// for it and wait for its computerd.
	claimTimeout = 2 * time.Minute
	// resetTimeout bounds a reset: the runner destroys the computer and
	// starts the next one.
	resetTimeout = 3 * time.Minute
)

func init() {
	providers.Register(ID, func(cfg providers.Config) (providers.Provider, error) {
		return New(Options{Logger: cfg.Logger}), nil
	})
}

// Options configure a Tunnel provider.
type Options struct {
	// Transport sends requests to the runners; nil means
	// http.DefaultTransport.
	Transport http.RoundTripper
	// Logger receives the provider's logs; nil discards them.
	Logger *slog.Logger
}

// Tunnel is a provider whose computers are already running behind a
// `berth agent tunnel` runner.
//
// It ignores Spec.Env and Spec.TokenHash: the remote computerd was started
// by the runner with a token of its own, the connection's apiKey, so the
// supervisor's derived token cannot work there. Transport, which gets the
// connection's credentials on every call, puts the apiKey on each request
// in place of the Authorization header the supervisor's computerd client
// sets; the key is never kept with the machine.
type Tunnel struct {
	base http.RoundTripper
	log  *slog.Logger
}

// New returns a tunnel provider.
func New(opts Options) *Tunnel {
	t := &Tunnel{base: opts.Transport, log: opts.Logger}
	if t.base == nil {
		t.base = http.DefaultTransport
	}
	if t.log == nil {
		t.log = slog.New(slog.DiscardHandler)
	}
	t.log = t.log.With("component", "tunnel")
	return t
}

// CheckCredentials requires url (http or https, with a host) and a
// non-empty apiKey, and nothing else.
func (t *Tunnel) CheckCredentials(c map[string]string) error {
	_, _, err := credentials(c)
	return err
}

func credentials(c map[string]string) (base, key string, err error) {
	for k := range c {
		if k != CredURL && k != CredAPIKey {
			return "", "", fmt.Errorf("%q is not a tunnel credential: want %q and %q", k, CredURL, CredAPIKey)
		}
	}
	raw := strings.TrimSpace(c[CredURL])
	if raw == "" {
		return "", "", fmt.Errorf("%s is missing: want the runner's URL, as in its connection file", CredURL)
	}
	u, perr := url.Parse(raw)
	if perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", "", fmt.Errorf("%s %q is not an http(s) URL: want https://HOST[:PORT][/PATH], as in the runner's connection file", CredURL, raw)
	}
	key = c[CredAPIKey]
	if strings.TrimSpace(key) == "" {
		return "", "", fmt.Errorf("%s is missing: want the token from the runner's connection file", CredAPIKey)
	}
	if strings.ContainsAny(key, " \t\r\n") {
		return "", "", fmt.Errorf("%s has white space: want the token exactly as in the runner's connection file", CredAPIKey)
	}
	return strings.TrimRight(u.String(), "/"), key, nil
}

// Create checks that the runner at the connection's url answers its
// state (GET RunnerPath) with the apiKey and claims its computer for the
// session (POST ClaimPath), and returns the machine: the runner's computer
// at the runner's URL. Before the claim nothing can have been made, so a
// runner that cannot be reached then, or whose computer another session
// holds (409 CodeInUse), is a *providers.RefusedError, and a refused apiKey
// providers.ErrBadCredentials; a claim whose answer is lost is
// providers.ErrUnavailable, and the supervisor finds it with List.
func (t *Tunnel) Create(ctx context.Context, spec providers.Spec) (providers.Machine, error) {
	base, key, err := credentials(spec.Credentials)
	if err != nil {
		return providers.Machine{}, fmt.Errorf("create computer %s: %w: %v", spec.ComputerID, providers.ErrBadCredentials, err)
	}
	ctx, cancel := context.WithTimeout(ctx, claimTimeout)
	defer cancel()
	hctx, hcancel := context.WithTimeout(ctx, checkTimeout)
	defer hcancel()
	var st RunnerState
	if err := t.call(hctx, base, key, http.MethodGet, RunnerPath, nil, &st); err != nil {
		if errors.Is(err, providers.ErrBadCredentials) || errors.Is(err, providers.ErrRefused) {
			return providers.Machine{}, fmt.Errorf("create computer %s: runner at %s: %w", spec.ComputerID, base, err)
		}
		return providers.Machine{}, fmt.Errorf("create computer %s: %w", spec.ComputerID, &providers.RefusedError{
			Status: http.StatusServiceUnavailable, Code: codeUnavailable,
			Message: fmt.Sprintf("the tunnel runner at %s cannot be used (%v); is `berth agent tunnel` still running there?", base, err)})
	}
	if st.Claimed && st.Labels[providers.LabelAttempt] != spec.AttemptID {
		return providers.Machine{}, fmt.Errorf("create computer %s: %w", spec.ComputerID, errInUse(""))
	}
	var res ClaimResult
	err = t.call(ctx, base, key, http.MethodPost, ClaimPath, ClaimRequest{Labels: spec.Labels(), Env: spec.Env}, &res)
	if err != nil {
		return providers.Machine{}, fmt.Errorf("create computer %s: runner at %s: %w", spec.ComputerID, base, err)
	}
	if res.Machine == "" {
		return providers.Machine{}, fmt.Errorf("create computer %s: runner at %s: %w: its claim named no machine", spec.ComputerID, base, providers.ErrUnavailable)
	}
	m := providers.Machine{
		ID:       res.Machine,
		Endpoint: base,
		Labels:   spec.Labels(),
	}
	t.log.Info("computer claimed", "computer", spec.ComputerID, "machine", m.ID, "endpoint", base)
	return m, nil
}

// Destroy asks the runner named by the connection's credentials
// (providers.CredentialsFrom) to reset: it destroys the machine and starts
// a fresh computer for the next session. A machine that is no longer the
// runner's computer is gone already. A runner that cannot be reached, or
// that refuses the apiKey, may still hold the machine: that is an error,
// and the supervisor retries.
func (t *Tunnel) Destroy(ctx context.Context, machineID string) error {
	base, key, err := credentials(providers.CredentialsFrom(ctx))
	if err != nil {
		return fmt.Errorf("destroy %s: %w: the connection's credentials are not at hand: %v", machineID, providers.ErrUnavailable, err)
	}
	ctx, cancel := context.WithTimeout(ctx, resetTimeout)
	defer cancel()
	var res ResetResult
	if err := t.call(ctx, base, key, http.MethodPost, ResetPath, ResetRequest{Machine: machineID}, &res); err != nil {
		return fmt.Errorf("destroy %s: runner at %s: %w", machineID, base, err)
	}
	t.log.Info("computer destroyed", "machine", machineID, "endpoint", base, "gone", res.Gone)
	return nil
}

// List returns the runner's computer when a session holds it, with that
// session's labels. The runner is the one the connection's credentials
// name (providers.CredentialsFrom); without them there is nothing to list.
func (t *Tunnel) List(ctx context.Context) ([]providers.Machine, error) {
	c := providers.CredentialsFrom(ctx)
	if c == nil {
		return nil, nil
	}
	base, key, err := credentials(c)
	if err != nil {
		return nil, fmt.Errorf("list: %w: %v", providers.ErrBadCredentials, err)
	}
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	var st RunnerState
	if err := t.call(ctx, base, key, http.MethodGet, RunnerPath, nil, &st); err != nil {
		return nil, fmt.Errorf("list: runner at %s: %w", base, err)
	}
	if !st.Claimed || st.Machine == "" {
		return nil, nil
	}
	return []providers.Machine{{ID: st.Machine, Endpoint: base, Labels: st.Labels}}, nil
}

// codeUnavailable is the supervisor's code for a provider it cannot reach
// (503).
const codeUnavailable = "provider_unavailable"

// errInUse is the refusal of a claim while another session holds the
// runner's computer; msg is the runner's, if it said one.
func errInUse(msg string) *providers.RefusedError {
	if msg == "" {
		msg = "the tunnel runner's computer is in use by another session: a runner serves one session at a time, and is free again once that session stops"
	}
	return &providers.RefusedError{Status: http.StatusConflict, Code: CodeInUse, Message: msg}
}

// call sends a runner API request and reads its answer into out, both
// through MaxRunnerBytes. Errors wrap the provider's kinds: a refused
// apiKey is providers.ErrBadCredentials, a claim while the computer is in
// use a *providers.RefusedError, anything else providers.ErrUnavailable.
func (t *Tunnel) call(ctx context.Context, base, key, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, body)
	if err != nil {
		return fmt.Errorf("%w: %v", providers.ErrUnavailable, err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return fmt.Errorf("%w: %v", providers.ErrUnavailable, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		e, _ := httpjson.ReadError(resp, MaxRunnerBytes)
		switch {
		case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
			return fmt.Errorf("the runner refused the apiKey: %w", providers.ErrBadCredentials)
		case resp.StatusCode == http.StatusConflict && e.Code == CodeInUse:
			return errInUse(e.Message)
		case resp.StatusCode == http.StatusNotFound && e.Code != "":
			return fmt.Errorf("%w: the runner has no %s (%d %s): it is older than this supervisor; run a newer berth agent tunnel",
				providers.ErrUnavailable, path, e.Status, e.Code)
		default:
			return fmt.Errorf("%w: %s %s: %d %s %s", providers.ErrUnavailable, method, path, e.Status, e.Code, e.Message)
		}
	}
	dec := json.NewDecoder(io.LimitReader(resp.Body, MaxRunnerBytes))
	if err := dec.Decode(out); err != nil {
		return fmt.Errorf("%w: %s %s: read the answer: %v", providers.ErrUnavailable, method, path, err)
	}
	return nil
}

// Transport returns a RoundTripper that sends requests for m with m's
// Authorization header (the connection's apiKey), replacing the one the
// caller set.
func (t *Tunnel) Transport(m providers.Machine, credentials map[string]string) http.RoundTripper {
	return &keyTransport{base: t.base, auth: "Bearer " + credentials[CredAPIKey]}
}

type keyTransport struct {
	base http.RoundTripper
	auth string
}

func (k *keyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if k.auth == "" {
		return k.base.RoundTrip(r)
	}
	r2 := r.Clone(r.Context())
	r2.Header.Set("Authorization", k.auth)
	return k.base.RoundTrip(r2)
}

var (
	_ providers.Provider    = (*Tunnel)(nil)
	_ providers.Lister      = (*Tunnel)(nil)
	_ providers.Transporter = (*Tunnel)(nil)
)
