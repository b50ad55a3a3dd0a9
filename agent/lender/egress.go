package lender

import (
	"context"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/egress"
	"github.com/berthdev/berth/internal/secrets"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/providers/docker"
)

// A lent computer's network is internal: its only way out is the agent's
// own egress proxy, the same supervisor/egress code the supervisor runs,
// listening on this machine's docker0 address. Each computer gets
// HTTP_PROXY and HTTPS_PROXY with its own credentials (the user is its
// computer id, the password an HMAC of the agent's egress secret), so the
// proxy knows which computer every connection is for. The secret is made on
// the first run and kept in the data folder (0600); it never leaves this
// machine, and a computer only ever sees its own password. The proxy's
// address checks refuse this machine's addresses, its LAN, loopback and the
// metadata address, so a borrower cannot reach into the lender's network.

// EgressSecretFile holds the agent's egress secret in its data folder.
const EgressSecretFile = "egress.secret"

// DefaultEgressPort is the port of the agent's egress proxy on the docker0
// address. It stays the same across restarts, so that the computers an
// agent adopts keep their proxy.
const DefaultEgressPort = 3129

// EgressOptions configure the agent's egress proxy.
type EgressOptions struct {
	// Listen is HOST:PORT, :PORT (on the docker0 address), or "off" for no
	// proxy at all; empty is the docker0 address on DefaultEgressPort.
	Listen string
	// Resolver and Dialer reach the internet; nil are the system's.
	Resolver egress.Resolver
	Dialer   egress.Dialer
	// BlockedCIDRs are refused on top of the built-in ranges and this
	// machine's own addresses.
	BlockedCIDRs []netip.Prefix
	// Abuse turns on the mail and mining checks.
	Abuse bool
}

// Egress is where a lender's computers reach its egress proxy and what
// their credentials are derived from (Config.Egress).
type Egress struct {
	// Addr is the proxy's address as computers reach it (host:port).
	Addr string
	// Tokens derives each computer's proxy password.
	Tokens *token.Deriver
	// Firewall, when set, opens and closes the proxy's port to computers
	// in the host firewall as the owner turns egress on and off.
	Firewall bool
	// OnChange, when set, is told when the owner turns egress on or off:
	// the engine guard starts or removes its proxy container.
	OnChange func(ctx context.Context, on bool) error
	// Serving, when set, reports whether a proxy that runs elsewhere (the
	// engine guard's container) serves; the status shows it.
	Serving func() bool

	mu    sync.Mutex
	proxy *egress.Proxy
}

// port is the proxy's TCP port.
func (e *Egress) port() int {
	_, p, _ := net.SplitHostPort(e.Addr)
	n, _ := strconv.Atoi(p)
	return n
}

func (e *Egress) setProxy(p *egress.Proxy) {
	e.mu.Lock()
	e.proxy = p
	e.mu.Unlock()
}

func (e *Egress) stats() (egress.Stats, bool) {
	e.mu.Lock()
	p := e.proxy
	e.mu.Unlock()
	if p == nil {
		return egress.Stats{}, false
	}
	return p.Stats(), true
}

// egressSide is the lender's side of the agent's egress proxy: the proxy
// settings each new computer gets, the proxy's check of a computer's
// credentials, what the owner sees of the proxy, and the host firewall's
// opening for it.
type egressSide struct {
	e   *Egress // nil: computers get no proxy
	log *slog.Logger
	// admits reports whether egress is on and computerID runs or starts on
	// this machine.
	admits func(computerID string) bool
}

// env is a new computer's environment: the supervisor's variables, with
// the proxy variables (egress.ProxyVars) replaced by the agent's proxy and
// the computer's own credentials, or removed when egress is off.
func (s *egressSide) env(computerID string, in map[string]string, on bool) map[string]string {
	e := s.e
	if !on || e == nil {
		return egress.WithoutProxyEnv(in)
	}
	return egress.ProxyEnv(in, e.Addr, computerID, e.Tokens.Derive(token.Egress, computerID))
}

// auth checks egress proxy credentials: the user is the id of a computer
// this agent runs, the password its egress token. With egress off, nobody
// passes.
func (s *egressSide) auth(user, pass string) (string, bool) {
	e := s.e
	if e == nil || user == "" {
		return "", false
	}
	want := e.Tokens.Derive(token.Egress, user)
	ok := subtle.ConstantTimeCompare([]byte(pass), []byte(want)) == 1
	return user, ok && s.admits(user)
}

// status is the proxy as the owner sees it.
func (s *egressSide) status(on bool) control.EgressStatus {
	st := control.EgressStatus{On: on}
	e := s.e
	if e == nil {
		return st
	}
	if e.Serving != nil && e.Serving() {
		st.Listening, st.Address = true, e.Addr
	}
	if ps, ok := e.stats(); ok {
		st.Listening, st.Address = true, e.Addr
		for v, n := range ps.Verdicts {
			if v == egress.VerdictAllowed {
				st.Allowed += n
			} else {
				st.Refused += n
			}
		}
	}
	return st
}

// apply follows the owner's egress setting: the proxy container of the
// engine guard (Egress.OnChange) and the host firewall's opening.
func (s *egressSide) apply(ctx context.Context, on bool) {
	if e := s.e; e != nil && e.OnChange != nil {
		if err := e.OnChange(ctx, on); err != nil {
			s.log.Error("could not follow the egress setting; computers have no way out", "egress", on, "err", err)
		}
	}
	s.applyFirewall(ctx, on)
}

// applyFirewall closes the host to computers, opening only the proxy's
// port while egress is on.
func (s *egressSide) applyFirewall(ctx context.Context, on bool) {
	e := s.e
	if e == nil || !e.Firewall {
		return
	}
	var err error
	if on {
		err = docker.GuardHost(ctx, e.port())
	} else if err = docker.UnguardPort(ctx, e.port()); err == nil {
		err = docker.GuardHost(ctx)
	}
	if err != nil {
		s.log.Warn("could not set the host firewall for computers", "egress", on, "err", err)
	}
}

// egressAdmits reports whether egress is on and computerID runs or starts
// here: the egress side's view of the computers.
func (l *core) egressAdmits(computerID string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, running := l.running[computerID]
	_, starting := l.starting[computerID]
	return l.settings.Egress && (running || starting)
}

// EgressAuth checks egress proxy credentials: the user is the id of a
// computer this agent runs, the password its egress token. With egress
// off, nobody passes.
func (l *Lender) EgressAuth(user, pass string) (string, bool) { return l.egress.auth(user, pass) }

// egressRun is the agent's running egress proxy.
type egressRun struct {
	e     *Egress
	proxy *egress.Proxy
	ln    net.Listener
}

// listenEgress opens the proxy's listener and loads (or makes) the egress
// secret. It returns nil when o.Listen is "off".
func listenEgress(o EgressOptions, dataDir string, log *slog.Logger) (*egressRun, error) {
	if o.Listen == "off" {
		log.Warn("egress proxy off: lent computers have no way out")
		return nil, nil
	}
	addr, byDefault := o.Listen, o.Listen == ""
	if byDefault {
		addr = ":" + strconv.Itoa(DefaultEgressPort)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("egress listen %q: want HOST:PORT, :PORT or off", addr)
	}
	if host == "" {
		ip, err := docker.BridgeIPv4()
		if err != nil && byDefault {
			log.Warn("egress proxy off: no docker0 address to listen on; lent computers have no way out", "err", err)
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("egress: no docker0 address to listen on (%v); give HOST:PORT or off", err)
		}
		addr = net.JoinHostPort(ip.String(), port)
	}
	_, tokens, err := loadEgressSecret(dataDir)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil && byDefault {
		// Another agent on this machine holds the port: take any other.
		log.Warn("egress proxy: default port taken; listening on another", "addr", addr, "err", err)
		host, _, _ := net.SplitHostPort(addr)
		ln, err = net.Listen("tcp", net.JoinHostPort(host, "0"))
	}
	if err != nil {
		return nil, fmt.Errorf("egress listen %s: %w", addr, err)
	}
	return &egressRun{e: &Egress{Addr: ln.Addr().String(), Tokens: tokens}, ln: ln}, nil
}

// loadEgressSecret loads (or makes) the agent's egress secret in dataDir.
func loadEgressSecret(dataDir string) (string, *token.Deriver, error) {
	secret, err := secrets.LoadOrCreateSecretFile(filepath.Join(dataDir, EgressSecretFile), 32)
	if err != nil {
		return "", nil, fmt.Errorf("egress secret: %w", err)
	}
	tokens, err := token.NewDeriver([]byte(secret))
	if err != nil {
		return "", nil, fmt.Errorf("egress secret %s: %w", filepath.Join(dataDir, EgressSecretFile), err)
	}
	return secret, tokens, nil
}

// start makes the proxy for l and serves it until ctx ends.
func (r *egressRun) start(ctx context.Context, l *Lender, o EgressOptions, log *slog.Logger, wg *sync.WaitGroup) error {
	resolver, dialer := o.Resolver, o.Dialer
	if resolver == nil {
		resolver = net.DefaultResolver
	}
	if dialer == nil {
		dialer = &net.Dialer{}
	}
	blocked := append(hostPrefixes(log), o.BlockedCIDRs...)
	p, err := egress.New(egress.Config{
		Authenticate: l.EgressAuth, Resolver: resolver, Dialer: dialer,
		BlockedCIDRs: blocked, Abuse: o.Abuse, Logger: log,
		OnEvent: func(ev egress.Event) {
			log.Warn("egress refused", "event", ev.Type, "computer", ev.ComputerID, "host", ev.Host, "port", ev.Port, "verdict", ev.Verdict)
		},
	})
	if err != nil {
		return err
	}
	r.proxy = p
	r.e.setProxy(p)
	log.Info("egress proxy listening", "addr", r.e.Addr)
	wg.Go(func() {
		if err := p.Serve(ctx, r.ln); err != nil {
			log.Warn("egress proxy stopped", "err", err)
		}
	})
	return nil
}

// hostPrefixes are this machine's own addresses, each a single-address
// prefix: a public address on the host is as private to a borrower as its
// LAN.
func hostPrefixes(log *slog.Logger) []netip.Prefix {
	as, err := egress.HostAddrs()
	if err != nil {
		log.Warn("could not list this machine's addresses for the egress proxy to refuse", "err", err)
		return nil
	}
	out := make([]netip.Prefix, 0, len(as))
	for _, ip := range as {
		out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
	}
	return out
}
