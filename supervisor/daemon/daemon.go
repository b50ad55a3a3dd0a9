// Package daemon assembles a running supervisor from its settings: the
// store, the sealing key, the token secrets, the configured providers, the
// service, the reaper and the HTTP server. `berth supervisor` and
// `berth dev` both run it.
package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berthdev/berth/egress"
	"github.com/berthdev/berth/internal/hostnet"
	"github.com/berthdev/berth/internal/secrets"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/lending"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/relay/relayserver"
	"github.com/berthdev/berth/relay/turnserver"
	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/apiserver"
	"github.com/berthdev/berth/supervisor/console"
	"github.com/berthdev/berth/supervisor/liveview"
	"github.com/berthdev/berth/supervisor/store"
	"github.com/berthdev/berth/supervisor/store/sqlstore"
)

// Options configure a supervisor. Zero values take the defaults noted.
type Options struct {
	// Listen is the API's address (default 127.0.0.1:8080).
	Listen string
	// Unguarded runs computers of providers with a host guard (docker) even
	// when the guard cannot be installed (--unguarded): they can then reach
	// every service this host listens on. Logged as an error at each start.
	Unguarded bool
	// TLSCert and TLSKey, both set, are the PEM certificate (chain) and
	// private key files the API is served with over HTTPS (TLS 1.2 or
	// later); both empty serves plain HTTP.
	TLSCert, TLSKey string
	// DataDir holds the SQLite database, the sealing key and generated
	// secrets (default ./berth-data).
	DataDir string
	// Store is a store URL: empty or "sqlite" for DataDir/berth.db,
	// sqlite:PATH, or a postgres:// URL.
	Store string
	// Token is SUPERVISOR_TOKEN; when empty one is generated, kept in
	// DataDir and Generated is set.
	Token string
	// ComputerTokenSecret is COMPUTER_TOKEN_SECRET; when empty one is
	// generated once and kept in DataDir.
	ComputerTokenSecret string
	// KeyFile holds the credentials sealing key (default DataDir/secret.key).
	KeyFile string
	// Providers to configure (default: DefaultProvider only).
	Providers []string
	// DefaultProvider is DEFAULT_PROVIDER (default docker).
	DefaultProvider string
	// Getenv reads provider settings (default os.Getenv).
	Getenv func(string) string
	Logger *slog.Logger
	// ReapInterval is how often expired sessions and cleanups are handled
	// (default 1 s).
	ReapInterval time.Duration

	// Egress configures the egress proxy, the only way out of a Docker
	// computer.
	Egress EgressOptions

	// Relay, when set, is how providers that run computers on lent
	// machines reach lenders (the relay in this process, for berth dev);
	// otherwise such a provider reads RELAY_URL and RELAY_TOKEN, and
	// RELAY_URL=lookup reaches each lender through the relay that reported
	// it (several relays).
	Relay providers.LenderRelay
	// RelayURL is the websocket URL lenders' agents connect to, given to
	// each agent when it pairs.
	RelayURL string
	// RelayToken (RELAY_TOKEN), when set, lets a relay running as its own
	// process check agents' tokens at relayserver.AuthenticatePath.
	RelayToken string

	// LiveView configures the TURN relay and viewer signalling; off
	// unless LiveView.Listen is set.
	LiveView LiveViewOptions
}

// EgressOptions configure the egress proxy.
type EgressOptions struct {
	// Listen is EGRESS_LISTEN: "off", HOST:PORT, or :PORT for the docker0
	// bridge's address (reachable from computers through their gateway, not
	// from other hosts); empty means :3128 when a configured provider's
	// computers use the proxy (providers.EgressUser), and off otherwise.
	Listen string
	// BlockedCIDRs is EGRESS_BLOCKED_CIDRS, parsed.
	BlockedCIDRs []netip.Prefix
	// Abuse is EGRESS_ABUSE=on.
	Abuse bool
	// Resolver and Dialer default to the system's; tests replace them.
	Resolver egress.Resolver
	Dialer   egress.Dialer
}

// Daemon is an assembled supervisor.
type Daemon struct {
	Service   *supervisor.Service
	Handler   http.Handler
	Store     store.Store
	Providers map[string]providers.Provider
	Token     string
	// TokenGenerated is set when Token was made (and saved) by New.
	TokenGenerated bool

	// Egress is the egress proxy, nil when it is off.
	Egress *egress.Proxy

	opts     Options
	log      *slog.Logger
	tls      *tls.Config // the API's, nil for plain HTTP
	egressLn net.Listener
	// guards are the providers that keep computers from reaching the
	// host, in id order; guarded is the egress port they opened, 0 if
	// none.
	guards  []providers.HostGuard
	guarded int

	// TURN is the live-view relay and LiveView its signalling, nil when
	// live view is off.
	TURN        *turnserver.Server
	LiveView    *liveview.Manager
	turnSecret  []byte
	viewerTURN  []string
	turnRelay   string // the TURN relay's public host:port, "" when off
	turnGuarded int    // the TURN port the guards opened
}

// New assembles a supervisor without starting it.
func New(ctx context.Context, o Options) (*Daemon, error) {
	if o.Listen == "" {
		o.Listen = "127.0.0.1:8080"
	}
	if o.DataDir == "" {
		o.DataDir = "berth-data"
	}
	if o.DefaultProvider == "" {
		o.DefaultProvider = "docker"
	}
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.ReapInterval <= 0 {
		o.ReapInterval = time.Second
	}
	if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data folder: %w", err)
	}
	d := &Daemon{opts: o, log: o.Logger}
	// The API's certificate before anything else, so that a file that
	// does not load stops the supervisor at once.
	if o.TLSCert != "" || o.TLSKey != "" {
		var err error
		if d.tls, err = loadAPITLS(o.TLSCert, o.TLSKey); err != nil {
			return nil, err
		}
	}

	// Providers first: a DEFAULT_PROVIDER that is not configured stops the
	// supervisor before it touches anything.
	ids := o.Providers
	if len(ids) == 0 {
		ids = []string{o.DefaultProvider}
	}
	found := false
	for _, id := range ids {
		found = found || id == o.DefaultProvider
	}
	if !found {
		return nil, fmt.Errorf("DEFAULT_PROVIDER %q is not among the configured providers %v", o.DefaultProvider, ids)
	}
	if o.Relay == nil && o.Getenv("RELAY_URL") == relayserver.Lookup {
		r, err := relayserver.NewRouter(relayLinks{d}, o.RelayToken, nil)
		if err != nil {
			return nil, fmt.Errorf("RELAY_URL=%s: %w", relayserver.Lookup, err)
		}
		o.Relay, d.opts.Relay = r, r
		o.Logger.Info("lenders are reached through the relay that holds each, as relays report them")
	}
	d.Providers = map[string]providers.Provider{}
	for _, id := range ids {
		pcfg := providers.Config{Getenv: o.Getenv, Logger: o.Logger.With("provider", id), Relay: o.Relay}
		p, err := providers.New(id, pcfg)
		if err != nil {
			setting := "PROVIDERS"
			if id == o.DefaultProvider {
				setting = "DEFAULT_PROVIDER"
			}
			return nil, fmt.Errorf("%s names %q, which cannot be configured: %w", setting, id, err)
		}
		d.Providers[id] = p
	}
	// Providers that settle how they run from what their backend has (the
	// docker provider's sandbox runtime) do so now, and log it once.
	for _, id := range slices.Sorted(maps.Keys(d.Providers)) {
		if pr, ok := d.Providers[id].(providers.Preparer); ok {
			if err := pr.Prepare(ctx); err != nil {
				d.closeProviders()
				return nil, fmt.Errorf("provider %s: %w", id, err)
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(d.Providers)) {
		if g, ok := d.Providers[id].(providers.HostGuard); ok {
			d.guards = append(d.guards, g)
		}
	}

	var err error
	if d.Store, err = openStore(ctx, o); err != nil {
		return nil, err
	}
	st := d.Store
	for _, p := range d.Providers {
		if wu, ok := p.(providers.WorkspaceUser); ok {
			wu.SetWorkspaceLookup(func(ctx context.Context, agent string) (string, error) {
				a, err := st.GetAgent(ctx, agent)
				return a.Workspace, err
			})
		}
	}
	fail := func(err error) (*Daemon, error) {
		if d.egressLn != nil {
			d.egressLn.Close()
		}
		d.closeTURN()
		d.Store.Close()
		return nil, err
	}

	keyFile := o.KeyFile
	if keyFile == "" {
		keyFile = filepath.Join(o.DataDir, "secret.key")
	}
	key, err := secrets.LoadOrCreateKeyFile(keyFile)
	if err != nil {
		return fail(err)
	}
	box, err := secrets.NewBox(key)
	if err != nil {
		return fail(err)
	}
	cts := o.ComputerTokenSecret
	if cts == "" {
		if cts, err = secrets.LoadOrCreateSecretFile(filepath.Join(o.DataDir, "computer-token.secret"), 32); err != nil {
			return fail(err)
		}
	}
	tokens, err := token.NewDeriver([]byte(cts))
	if err != nil {
		return fail(fmt.Errorf("COMPUTER_TOKEN_SECRET: %w", err))
	}
	d.Token = o.Token
	if d.Token == "" {
		p := filepath.Join(o.DataDir, "supervisor.token")
		_, statErr := os.Stat(p)
		if d.Token, err = secrets.LoadOrCreateSecretFile(p, 24); err != nil {
			return fail(err)
		}
		d.TokenGenerated = errors.Is(statErr, os.ErrNotExist)
	}
	if len(d.Token) < 16 {
		return fail(errors.New("SUPERVISOR_TOKEN: must be at least 16 characters"))
	}

	egressAddr, err := d.listenEgress(ctx)
	if err != nil {
		return fail(err)
	}
	computerEnv, err := d.startTURN(ctx)
	if err != nil {
		return fail(err)
	}
	objects, maxArchive, err := d.objectStore(ctx, box)
	if err != nil {
		return fail(err)
	}
	previewDomain, err := supervisor.CheckPreviewDomain(o.Getenv("PREVIEW_DOMAIN"), o.LiveView.PublicURL)
	if err != nil {
		return fail(err)
	}
	d.Service, err = supervisor.New(supervisor.Config{
		Store: d.Store, Providers: d.Providers, DefaultProvider: o.DefaultProvider,
		Box: box, Tokens: tokens, Logger: o.Logger, EgressAddr: egressAddr, RelayURL: o.RelayURL,
		ComputerEnv: computerEnv, Objects: objects, MaxArchiveBytes: maxArchive,
		PreviewDomain: previewDomain,
	})
	if err != nil {
		return fail(err)
	}
	if d.egressLn != nil {
		resolver, dialer := o.Egress.Resolver, o.Egress.Dialer
		if resolver == nil {
			resolver = net.DefaultResolver
		}
		if dialer == nil {
			dialer = &net.Dialer{}
		}
		d.Egress, err = egress.New(egress.Config{
			Authenticate: d.Service.EgressAuth,
			Resolver:     resolver,
			Dialer:       dialer,
			BlockedCIDRs: o.Egress.BlockedCIDRs,
			Abuse:        o.Egress.Abuse,
			BlockHost:    true,
			Logger:       o.Logger.With("component", "egress"),
			OnEvent: func(ev egress.Event) {
				o.Logger.Warn("egress refused", "event", ev.Type, "computer", ev.ComputerID, "host", ev.Host, "port", ev.Port, "verdict", ev.Verdict)
			},
		})
		if err != nil {
			d.egressLn.Close()
			return fail(err)
		}
	}
	h := apiserver.New(d.Service, d.Token, o.Logger)
	h.Ready = func(ctx context.Context) error {
		_, err := d.Store.GetAgent(ctx, "-healthz-probe")
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		return err
	}
	h.RelayToken = o.RelayToken
	h.RelayReport = d.recordRelayReport
	h.PublicURL = o.LiveView.PublicURL
	rate, burst, err := apiserver.RateFromEnv(o.Getenv)
	if err != nil {
		return fail(err)
	}
	h.SetRateLimit(rate, burst)
	if d.Egress != nil {
		h.Egress = d.Egress
	}
	if ll := d.lenderLister(); ll != nil {
		h.Lenders = d.lenders(ll)
	}
	if err := d.startLiveView(h, tokens); err != nil {
		return fail(err)
	}
	cons, err := console.New(console.Options{
		Service: d.Service, Store: d.Store, Token: d.Token, Providers: d.Providers, DefaultProvider: o.DefaultProvider,
		Getenv: o.Getenv, Logger: o.Logger, Link: h.Link, PublicURL: o.LiveView.PublicURL,
	})
	if err != nil {
		return fail(err)
	}
	if ll := d.lenderLister(); ll != nil {
		cons.SetLenders(d.consoleLenders(h.Lenders))
	}
	h.Console = cons
	d.Handler = h
	return d, nil
}

// lenderLister returns the first configured provider (by id) that runs
// computers on lent machines, or nil.
func (d *Daemon) lenderLister() providers.LenderLister {
	for _, id := range slices.Sorted(maps.Keys(d.Providers)) {
		if ll, ok := d.Providers[id].(providers.LenderLister); ok {
			return ll
		}
	}
	return nil
}

// guardHost closes this host to the computers of every provider with a
// host guard, but for the egress proxy's port (0: none). A guard that
// cannot be installed stops the supervisor, unless Options.Unguarded.
func (d *Daemon) guardHost(ctx context.Context, port int) error {
	for _, g := range d.guards {
		if err := g.GuardHost(ctx, port); err != nil {
			if !d.opts.Unguarded {
				return fmt.Errorf("cannot close this host to computers (%v): computers would reach every service it listens on. "+
					"Run the supervisor as root with iptables and ip6tables installed, or pass --unguarded to run them anyway", err)
			}
			d.log.Error("UNGUARDED: computers can reach every service this host listens on (--unguarded)", "err", err)
			continue
		}
		d.guarded = port
		// A supervisor killed before Close left its opening behind.
		if closed, err := g.RemoveStaleOpenings(ctx); err != nil {
			d.log.Warn("could not remove stale egress openings from the host firewall", "err", err)
		} else if len(closed) > 0 {
			d.log.Info("removed stale egress openings from the host firewall", "ports", closed)
		}
	}
	return nil
}

// egressUsed reports whether a configured provider's computers use the
// supervisor's egress proxy.
func (d *Daemon) egressUsed() bool {
	for _, p := range d.Providers {
		if providers.UsesSupervisorEgress(p) {
			return true
		}
	}
	return false
}

// listenEgress opens the egress proxy's listener and, with a provider
// whose computers run on this host (a providers.HostGuard), closes every
// other way from a computer to the host. It returns
// the address computers use, or "" when egress is off.
func (d *Daemon) listenEgress(ctx context.Context) (string, error) {
	o := d.opts.Egress
	if o.Listen == "" && !d.egressUsed() {
		// A supervisor of hosted providers, lenders or other supervisors
		// only: their computers have their own way out, and this host may
		// have no Docker and no docker0 at all.
		d.log.Info("egress proxy not started: no configured provider's computers use it (set EGRESS_LISTEN to start it)")
		return "", d.guardHost(ctx, 0)
	}
	if o.Listen == "off" {
		d.log.Warn("egress proxy off: Docker computers have no way out")
		return "", d.guardHost(ctx, 0)
	}
	addr := o.Listen
	if addr == "" {
		addr = ":3128"
	}
	if host, port, err := net.SplitHostPort(addr); err != nil {
		return "", fmt.Errorf("EGRESS_LISTEN=%q: want HOST:PORT, :PORT or off", addr)
	} else if host == "" {
		ip, err := hostnet.BridgeIPv4()
		if err != nil {
			return "", fmt.Errorf("EGRESS_LISTEN: no docker0 address to listen on (%v); set EGRESS_LISTEN=HOST:PORT or off", err)
		}
		addr = net.JoinHostPort(ip.String(), port)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("EGRESS_LISTEN %s: %w", addr, err)
	}
	d.egressLn = ln
	if err := d.guardHost(ctx, ln.Addr().(*net.TCPAddr).Port); err != nil {
		return "", err
	}
	return ln.Addr().String(), nil
}

// lenders lists for GET /v1/lenders every lender the relay has seen, with
// its presence and the name it was paired with.
func (d *Daemon) lenders(ll providers.LenderLister) func(context.Context) ([]apiserver.Lender, error) {
	return func(ctx context.Context) ([]apiserver.Lender, error) {
		ps, err := ll.Lenders(ctx)
		if err != nil {
			return nil, err
		}
		out := make([]apiserver.Lender, 0, len(ps))
		for _, p := range ps {
			l := apiserver.Lender{ID: p.LenderID, Online: p.Online, ConnectedAt: p.ConnectedAt, LastSeen: p.LastSeen, Version: p.Version}
			if c, err := d.Store.GetCompanion(ctx, p.LenderID); err == nil {
				l.Name = c.Name
			}
			out = append(out, l)
		}
		return out, nil
	}
}

// consoleLenders lists the lent machines for the console: the relay's
// presence with the computers each runs now.
func (d *Daemon) consoleLenders(list func(context.Context) ([]apiserver.Lender, error)) func(context.Context) ([]console.Lender, error) {
	return func(ctx context.Context) ([]console.Lender, error) {
		ls, err := list(ctx)
		if err != nil {
			return nil, err
		}
		live, err := d.Store.SessionsByState(ctx, store.StateStarting, store.StateRunning)
		if err != nil {
			return nil, err
		}
		running := map[string]int{}
		for _, x := range live {
			if lp, ok := d.Providers[x.Provider].(supervisor.LendingProvider); ok && x.MachineID != "" {
				if id, ok := lp.LenderOf(x.MachineID); ok {
					running[id]++
				}
			}
		}
		out := make([]console.Lender, len(ls))
		var lp supervisor.LendingProvider
		for _, p := range d.Providers {
			if x, ok := p.(supervisor.LendingProvider); ok {
				lp = x
				break
			}
		}
		// The owners' limits, asked of the online lenders a few at a time;
		// one that does not answer in time shows none.
		var wg sync.WaitGroup
		sem := make(chan struct{}, 8)
		for i, l := range ls {
			out[i] = console.Lender{ID: l.ID, Name: l.Name, Online: l.Online, ConnectedAt: l.ConnectedAt,
				LastSeen: l.LastSeen, Version: l.Version, Computers: running[l.ID]}
			if !l.Online || lp == nil {
				continue
			}
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				st, err := lp.LenderState(ctx, l.ID)
				if err != nil {
					d.log.Debug("lender state", "lender", l.ID, "err", err)
					return
				}
				out[i].Limits = limitsText(st.Limits)
			})
		}
		wg.Wait()
		return out, nil
	}
}

// limitsText says a lender's owner limits in a line, or "" for none.
func limitsText(l *lending.Limits) string {
	if l == nil {
		return ""
	}
	s := fmt.Sprintf("up to %d computers at once, %g CPUs and %d MB each, %d s a day", l.MaxComputers, l.CPUs, l.MemoryMB, l.DailySeconds)
	if l.Hours != "" {
		s += ", " + l.Hours
	}
	if l.Desktop {
		s += ", desktops allowed"
	}
	return s
}

func openStore(ctx context.Context, o Options) (store.Store, error) {
	switch {
	case o.Store == "" || o.Store == "sqlite":
		return sqlstore.OpenSQLite(ctx, filepath.Join(o.DataDir, "berth.db"))
	case strings.HasPrefix(o.Store, "sqlite:"):
		return sqlstore.OpenSQLite(ctx, strings.TrimPrefix(o.Store, "sqlite:"))
	case strings.HasPrefix(o.Store, "postgres://"), strings.HasPrefix(o.Store, "postgresql://"):
		return sqlstore.OpenPostgres(ctx, o.Store)
	}
	return nil, errors.New("--store: want sqlite, sqlite:PATH or postgres://USER@HOST/DB")
}

// loadAPITLS loads the API's certificate and key; its errors name the file.
func loadAPITLS(certFile, keyFile string) (*tls.Config, error) {
	switch {
	case certFile == "":
		return nil, errors.New("TLS: a key is given but no certificate (--tls-cert)")
	case keyFile == "":
		return nil, errors.New("TLS: a certificate is given but no key (--tls-key)")
	}
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate: %w", err) // err names the file
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS key: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate %s with key %s: %w", certFile, keyFile, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// Serve listens on the configured address and serves until ctx ends, then
// shuts down gracefully within grace. ready, if set, gets the URL once the
// listener is open.
func (d *Daemon) Serve(ctx context.Context, grace time.Duration, ready func(url string)) error {
	ln, err := net.Listen("tcp", d.opts.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", d.opts.Listen, err)
	}
	return d.ServeListener(ctx, ln, grace, ready)
}

// ServeListener is Serve on a listener the caller opened (a plain TCP one;
// TLS, when configured, is added here).
func (d *Daemon) ServeListener(ctx context.Context, ln net.Listener, grace time.Duration, ready func(url string)) error {
	// Providers that make things ahead of time (the docker provider's
	// network pool) start now.
	for _, p := range d.Providers {
		if w, ok := p.(providers.Warmer); ok {
			w.Warm(ctx)
		}
	}
	// Heartbeat first, so this instance counts as alive, then match what
	// the providers run to the sessions before taking calls.
	if err := d.Store.Heartbeat(ctx, d.Service.Instance(), time.Now()); err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	rep, err := d.Service.Reconcile(ctx)
	if err != nil {
		// A lender not yet connected, or a hosted API that failed:
		// RetryReconcile tries those providers again, and warns if they
		// keep failing.
		d.log.Info("reconcile at start: some providers did not finish; trying them again", "providers", rep.Unfinished, "err", err)
	}
	srv := &http.Server{Handler: d.Handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, TLSConfig: d.tls}
	reapCtx, stopReaper := context.WithCancel(context.WithoutCancel(ctx))
	reaped := make(chan struct{})
	go func() {
		defer close(reaped)
		var wg sync.WaitGroup
		wg.Go(func() { d.Service.RetryReconcile(reapCtx, rep.Unfinished) })
		// What any Berth process left on the providers past its time.
		for _, p := range d.Providers {
			if gc, ok := p.(providers.GarbageCollector); ok {
				wg.Go(func() { gc.RunGarbageCollector(reapCtx) })
			}
		}
		d.Service.RunReaper(reapCtx, d.opts.ReapInterval)
		wg.Wait()
	}()
	// The warm pools fill behind the reaper; at shutdown the computers
	// still waiting are removed (drainPool).
	pooled := make(chan struct{})
	go func() {
		defer close(pooled)
		d.Service.RunPool(reapCtx)
	}()
	drainPool := func() {
		<-pooled
		dctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		d.Service.DrainPool(dctx)
	}
	egressDone := make(chan struct{})
	if d.Egress != nil {
		go func() {
			defer close(egressDone)
			if err := d.Egress.Serve(reapCtx, d.egressLn); err != nil {
				d.log.Warn("egress proxy stopped", "err", err)
			}
		}()
		d.log.Info("egress proxy listening", "addr", d.egressLn.Addr().String())
	} else {
		close(egressDone)
	}
	errc := make(chan error, 1)
	scheme := "http"
	if d.tls != nil {
		scheme = "https"
		// ServeTLS takes the certificate from srv.TLSConfig.
		go func() { errc <- srv.ServeTLS(ln, "", "") }()
	} else {
		go func() { errc <- srv.Serve(ln) }()
	}
	url := scheme + "://" + ln.Addr().String()
	dep, _ := d.Service.Deployment(ctx)
	d.log.Info("supervisor listening", "url", url, "instance", d.Service.Instance(), "deployment", dep)
	if ready != nil {
		ready(url)
	}
	select {
	case err := <-errc:
		stopReaper()
		<-reaped
		<-egressDone
		drainPool()
		return err
	case <-ctx.Done():
	}
	d.log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err = srv.Shutdown(sctx)
	stopReaper()
	<-reaped
	<-egressDone
	drainPool()
	if errors.Is(err, context.DeadlineExceeded) {
		srv.Close()
	}
	return nil
}

// Close releases the store, the egress listener and the firewall opening.
func (d *Daemon) Close() error {
	d.closeTURN()
	if d.egressLn != nil {
		d.egressLn.Close()
	}
	if d.guarded != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, g := range d.guards {
			if err := g.UnguardPort(ctx, d.guarded); err != nil {
				d.log.Warn("close the egress port in the host firewall", "err", err)
			}
		}
	}
	d.closeProviders()
	d.Service.CloseIdleConnections()
	return d.Store.Close()
}

// closeProviders closes the providers that hold resources (clients of
// their backends).
func (d *Daemon) closeProviders() {
	for _, p := range d.Providers {
		if c, ok := p.(io.Closer); ok {
			c.Close()
		}
	}
}

// EgressAddr returns the egress proxy's address as computers reach it, or
// "" when it is off.
func (d *Daemon) EgressAddr() string {
	if d.egressLn == nil {
		return ""
	}
	return d.egressLn.Addr().String()
}
