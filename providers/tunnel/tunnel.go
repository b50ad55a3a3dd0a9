// Package tunnel is the provider for a computer that someone runs on their
// own machine with `berth agent tunnel` and reaches by URL. The runner owns
// the computer and its lifetime; this provider only checks that the remote
// computerd answers and hands its URL and connection token to the
// supervisor.
package tunnel

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/berthdev/berth/computerd"
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

// checkTimeout bounds Create's health and token checks.
const checkTimeout = 30 * time.Second

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

// MachineID returns the machine id of the runner at url.
func MachineID(url string) string {
	h := sha256.Sum256([]byte(strings.TrimRight(url, "/")))
	return "tunnel-" + hex.EncodeToString(h[:6])
}

// Create checks that the runner at the connection's url answers (GET
// /healthz) and accepts its apiKey (GET /v1/processes), and returns the
// machine: the runner's URL with the apiKey in its Authorization header. An
// unreachable runner is providers.ErrUnavailable, a refused apiKey
// providers.ErrBadCredentials.
func (t *Tunnel) Create(ctx context.Context, spec providers.Spec) (providers.Machine, error) {
	base, key, err := credentials(spec.Credentials)
	if err != nil {
		return providers.Machine{}, fmt.Errorf("create computer %s: %w: %v", spec.ComputerID, providers.ErrBadCredentials, err)
	}
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	c := computerd.NewClient(base, key, computerd.WithTransport(t.base))
	if _, err := c.Health(ctx); err != nil {
		return providers.Machine{}, fmt.Errorf("create computer %s: runner at %s: %w: %v", spec.ComputerID, base, providers.ErrUnavailable, err)
	}
	if _, err := c.Processes(ctx); err != nil {
		var ae *computerd.APIError
		if errors.As(err, &ae) && (ae.Status == http.StatusUnauthorized || ae.Status == http.StatusForbidden) {
			return providers.Machine{}, fmt.Errorf("create computer %s: runner at %s refused the apiKey: %w", spec.ComputerID, base, providers.ErrBadCredentials)
		}
		return providers.Machine{}, fmt.Errorf("create computer %s: runner at %s: %w: %v", spec.ComputerID, base, providers.ErrUnavailable, err)
	}
	m := providers.Machine{
		ID:       MachineID(base),
		Endpoint: base,
		Labels:   spec.Labels(),
	}
	t.log.Info("computer reached", "computer", spec.ComputerID, "machine", m.ID, "endpoint", base)
	return m, nil
}

// Destroy does nothing and returns nil: the runner owns the computer and
// ends it when its lifetime ends or it is stopped.
func (t *Tunnel) Destroy(ctx context.Context, machineID string) error { return nil }

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
	_ providers.Transporter = (*Tunnel)(nil)
)
