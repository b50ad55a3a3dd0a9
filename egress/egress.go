// Package egress is the egress proxy: the only way from a computer to the
// internet, and no way into anything private.
//
// It is an HTTP forward proxy for absolute-URI http:// requests and for
// CONNECT tunnels (https and everything else). Every request carries Basic
// Proxy-Authorization: the user is the computer's id, the password its
// egress token; Config.Authenticate decides. The proxy resolves every host
// name itself, refuses it when any of its addresses is private, loopback,
// link-local, shared (CGNAT), multicast, reserved or in an operator's extra
// range (IPv4 embedded in IPv4-mapped, NAT64, 6to4 and Teredo addresses is
// checked as IPv4), and then dials exactly one address it checked, the first
// the resolver gave, without resolving again, which defeats DNS rebinding.
// Numeric hosts are read the way inet_aton and browsers read them, so
// 2130706433, 0x7f000001, 017700000001, 127.1 and 0177.0.0.1 are all
// 127.0.0.1 and are never handed to the resolver as names.
//
// With Config.Abuse it also refuses outbound mail ports (25, 465, 587,
// 2525), the ports stratum mining pools commonly use (3333, 3334, 4444,
// 5555, 6666, 7777, 8888, 9999, 14433, 14444, 45560, 45700) and tunnels
// whose first client bytes are a stratum login, and reports each through
// Config.OnEvent.
//
// A refusal is answered with a status (407, 400, 403 or 502) and the header
// X-Berth-Egress-Refused naming a Verdict; no answer ever carries an address
// the proxy resolved. Every connection (a tunnel, or one plain request) is
// logged once when it ends, with the computer, host, port, bytes each way,
// duration and verdict, and counted in Stats.
package egress

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthdev/berth/internal/clock"
)

// HeaderRefused is the response header that names the Verdict of every
// answer the proxy makes itself instead of forwarding.
const HeaderRefused = "X-Berth-Egress-Refused"

// Defaults for the limits in Config.
const (
	DefaultMaxHeaderBytes    = 32 << 10
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultKeepAliveTimeout  = 60 * time.Second
	DefaultIdleTimeout       = 5 * time.Minute
	DefaultLookupTimeout     = 5 * time.Second
	DefaultDialTimeout       = 10 * time.Second
)

// Resolver looks up the addresses of a host name. *net.Resolver is one.
// The proxy asks with network "ip" and a fully qualified name (ending in a
// dot), so that no search domain applies.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Dialer opens outbound connections. *net.Dialer is one. The proxy only
// ever asks for network "tcp" and an address that is an IP and port it has
// checked.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Config is what a Proxy needs. Authenticate, Resolver and Dialer are
// required; zero limits take their defaults.
type Config struct {
	// Authenticate checks the Basic credentials of a request and returns
	// the id of the computer they belong to. It should compare secrets in
	// constant time.
	Authenticate func(user, pass string) (computerID string, ok bool)
	Resolver     Resolver
	Dialer       Dialer

	// BlockedCIDRs are refused on top of the built-in ranges
	// (EGRESS_BLOCKED_CIDRS, see ParseBlockedCIDRs).
	BlockedCIDRs []netip.Prefix
	// Abuse turns on the mail and mining checks (EGRESS_ABUSE=on).
	Abuse bool
	// OnEvent, when set, is told of each refusal by address or abuse
	// check. It is called synchronously and must not block.
	OnEvent func(Event)

	Logger *slog.Logger // default: discard
	Clock  clock.Clock  // default: the system clock

	// MaxHeaderBytes bounds the request header that Serve reads.
	MaxHeaderBytes int
	// ReadHeaderTimeout bounds the time Serve waits for a request header.
	ReadHeaderTimeout time.Duration
	// KeepAliveTimeout is how long Serve keeps an idle client connection
	// open between plain requests.
	KeepAliveTimeout time.Duration
	// IdleTimeout closes a tunnel after this long without a byte either
	// way. Bytes are also seen in the sockets' kernel counters, which
	// are read every quarter of the timeout, so a tunnel closes between
	// IdleTimeout and 1.25 times it after its last byte. A plain GET or
	// HEAD gives upstream as long to start its answer, and as long
	// between any two reads of it.
	IdleTimeout time.Duration
	// LookupTimeout bounds one name resolution.
	LookupTimeout time.Duration
	// DialTimeout bounds one outbound connection attempt.
	DialTimeout time.Duration
	// BlockHost refuses every address of this host's own interfaces too,
	// read again at most every 30 seconds. HostAddrs lists them (default:
	// the interfaces' addresses); tests replace it.
	BlockHost bool
	HostAddrs func() ([]netip.Addr, error)
	// MaxTunnelsPerComputer bounds the tunnels one computer holds open at
	// once (default DefaultMaxTunnelsPerComputer); MaxTunnels bounds them
	// in all (default DefaultMaxTunnels). A CONNECT past either is
	// refused with VerdictTooMany.
	MaxTunnelsPerComputer int
	MaxTunnels            int
}

// Verdict is the outcome of one connection, and the value of HeaderRefused
// when it is not VerdictAllowed.
type Verdict string

// The verdicts. The comment gives the status each is answered with.
const (
	VerdictAllowed         Verdict = "allowed"          // forwarded
	VerdictAuth            Verdict = "auth-required"    // 407: credentials missing or wrong
	VerdictBadRequest      Verdict = "bad-request"      // 400: not an http:// or CONNECT proxy request
	VerdictInvalidHost     Verdict = "invalid-host"     // 400: neither a host name nor an address
	VerdictBlockedAddress  Verdict = "blocked-address"  // 403: the host is or resolves to a blocked address
	VerdictAbuseMail       Verdict = "abuse-mail"       // 403: outbound mail port, with Abuse
	VerdictAbuseMining     Verdict = "abuse-mining"     // 403: mining port, or tunnel closed on a stratum login, with Abuse
	VerdictDNSFailure      Verdict = "dns-failure"      // 502: the name did not resolve
	VerdictUpstreamFailure Verdict = "upstream-failure" // 502: the checked address could not be reached
	VerdictTooMany         Verdict = "too-many-tunnels" // 429: the computer, or the proxy, holds its most tunnels
)

func (v Verdict) status() int {
	switch v {
	case VerdictAuth:
		return http.StatusProxyAuthRequired
	case VerdictBadRequest, VerdictInvalidHost:
		return http.StatusBadRequest
	case VerdictDNSFailure, VerdictUpstreamFailure:
		return http.StatusBadGateway
	case VerdictTooMany:
		return http.StatusTooManyRequests
	}
	return http.StatusForbidden
}

// message is the body of a refusal. It never names an address.
func (v Verdict) message() string {
	switch v {
	case VerdictAuth:
		return "egress proxy: authentication required (user: computer id, password: its egress token)"
	case VerdictBadRequest:
		return "egress proxy: send absolute http:// requests, or CONNECT host:port for anything else"
	case VerdictInvalidHost:
		return "egress proxy: the host is neither a valid name nor an address"
	case VerdictBlockedAddress:
		return "egress proxy: the host is, or resolves to, an address computers may not reach"
	case VerdictAbuseMail:
		return "egress proxy: outbound mail ports are closed"
	case VerdictAbuseMining:
		return "egress proxy: crypto-mining traffic is refused"
	case VerdictDNSFailure:
		return "egress proxy: the host name did not resolve"
	case VerdictUpstreamFailure:
		return "egress proxy: the host could not be reached"
	case VerdictTooMany:
		return "egress proxy: too many open tunnels; close some first"
	}
	return "egress proxy: refused"
}

// EventType says what an Event reports.
type EventType string

// The event types.
const (
	EventRefused EventType = "egress.refused" // a host refused by the address checks
	EventAbuse   EventType = "egress.abuse"   // a connection refused by the abuse checks
)

// Event reports one refusal. Host is the host as the computer named it; the
// address it resolved to is never part of an event.
type Event struct {
	Type       EventType
	Time       time.Time
	ComputerID string
	Host       string
	Port       uint16
	Verdict    Verdict
}

// Stats is a snapshot of the proxy's counters.
type Stats struct {
	// Verdicts counts ended connections (tunnels and plain requests) by
	// verdict. A tunnel closed on a stratum login counts as
	// VerdictAbuseMining.
	Verdicts map[Verdict]uint64
	// Active is the number of connections open now.
	Active int64
	// BytesUp and BytesDown count bytes sent to and received from
	// upstream: tunnel payload, and the bodies of plain requests.
	BytesUp, BytesDown uint64
	// Buffered is the memory, in bytes, that tunnels and plain requests
	// of every proxy in this process hold in copy buffers now.
	Buffered int64
}

// Proxy is the egress proxy. It is an http.Handler; Serve runs it on a
// listener with the configured header limits and ends its tunnels when its
// context ends. Mounted in another server instead, its tunnels end when
// either side closes, when they go idle, or when the request's context
// ends.
type Proxy struct {
	cfg       Config
	block     blocklist
	log       *slog.Logger
	errLog    *log.Logger
	clock     clock.Clock
	transport *http.Transport // plain requests but forwardPlain's
	upstreams upstreamPool    // forwardPlain's idle connections

	slots tunnelSlots
	host  *hostAddrs // nil unless Config.BlockHost

	mu       sync.Mutex
	verdicts map[Verdict]uint64
	active   atomic.Int64
	up, down atomic.Uint64
}

// New returns a Proxy for cfg.
func New(cfg Config) (*Proxy, error) {
	switch {
	case cfg.Authenticate == nil:
		return nil, fmt.Errorf("%w: Authenticate is nil", ErrConfig)
	case cfg.Resolver == nil:
		return nil, fmt.Errorf("%w: Resolver is nil", ErrConfig)
	case cfg.Dialer == nil:
		return nil, fmt.Errorf("%w: Dialer is nil", ErrConfig)
	}
	for _, p := range cfg.BlockedCIDRs {
		if !p.IsValid() {
			return nil, fmt.Errorf("%w: BlockedCIDRs holds an invalid prefix", ErrConfig)
		}
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{
		{&cfg.ReadHeaderTimeout, DefaultReadHeaderTimeout},
		{&cfg.KeepAliveTimeout, DefaultKeepAliveTimeout},
		{&cfg.IdleTimeout, DefaultIdleTimeout},
		{&cfg.LookupTimeout, DefaultLookupTimeout},
		{&cfg.DialTimeout, DefaultDialTimeout},
	} {
		if *d.v < 0 {
			return nil, fmt.Errorf("%w: negative timeout %v", ErrConfig, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if cfg.MaxHeaderBytes < 0 || cfg.MaxTunnelsPerComputer < 0 || cfg.MaxTunnels < 0 {
		return nil, fmt.Errorf("%w: negative MaxHeaderBytes, MaxTunnelsPerComputer or MaxTunnels", ErrConfig)
	}
	cfg.MaxTunnelsPerComputer = cmp.Or(cfg.MaxTunnelsPerComputer, DefaultMaxTunnelsPerComputer)
	cfg.MaxTunnels = cmp.Or(cfg.MaxTunnels, DefaultMaxTunnels)
	if cfg.MaxHeaderBytes == 0 {
		cfg.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	p := &Proxy{
		cfg:      cfg,
		block:    newBlocklist(cfg.BlockedCIDRs),
		log:      cfg.Logger.With("component", "egress"),
		clock:    cfg.Clock,
		verdicts: map[Verdict]uint64{},
		slots:    tunnelSlots{perComputer: cfg.MaxTunnelsPerComputer, total: cfg.MaxTunnels},
	}
	if cfg.BlockHost {
		p.host = &hostAddrs{list: cfg.HostAddrs, clock: cfg.Clock}
		if p.host.list == nil {
			p.host.list = HostAddrs
		}
	}
	p.errLog = slog.NewLogLogger(p.log.Handler(), slog.LevelDebug)
	p.transport = &http.Transport{
		DialContext:            p.dialChecked,
		MaxIdleConns:           256,
		MaxIdleConnsPerHost:    16,
		IdleConnTimeout:        90 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
		DisableCompression:     true, // pass bodies through as they are
	}
	return p, nil
}

// blocked reports whether the proxy refuses to dial a.
func (p *Proxy) blocked(a netip.Addr) bool {
	return p.block.blocked(a) || (p.host != nil && p.host.has(a))
}

// Serve answers proxy requests on ln until ctx ends, then closes ln and
// every connection it accepted, tunnels included, and returns nil once
// they are all closed and their handlers have returned. It returns an
// error if ln fails.
func (p *Proxy) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	back := newHandBack(ln.Addr())
	g := &group{back: back}
	base := context.WithValue(ctx, groupKey{}, g)
	g.ctx = base
	srv := &http.Server{
		Handler:           p,
		ReadHeaderTimeout: p.cfg.ReadHeaderTimeout,
		IdleTimeout:       p.cfg.KeepAliveTimeout,
		MaxHeaderBytes:    p.cfg.MaxHeaderBytes,
		ErrorLog:          p.errLog,
		BaseContext:       func(net.Listener) context.Context { return base },
		ConnState: func(_ net.Conn, s http.ConnState) {
			switch s {
			case http.StateNew:
				g.add()
			case http.StateHijacked, http.StateClosed:
				g.done()
			}
		},
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	backDone := make(chan struct{})
	go func() {
		defer close(backDone)
		srv.Serve(back)
	}()
	var err error
	select {
	case <-ctx.Done():
		srv.Close()
		<-errc
	case err = <-errc:
		cancel()
		srv.Close()
	}
	back.Close()
	<-backDone
	g.wait()
	p.closeIdle()
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("egress: serve: %w", err)
	}
	return nil
}

// closeIdle closes the idle upstream connections of plain requests.
func (p *Proxy) closeIdle() {
	p.transport.CloseIdleConnections()
	p.upstreams.closeIdle()
}

// Stats returns a snapshot of the counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	v := make(map[Verdict]uint64, len(p.verdicts))
	for k, n := range p.verdicts {
		v[k] = n
	}
	p.mu.Unlock()
	return Stats{Verdicts: v, Active: p.active.Load(), BytesUp: p.up.Load(), BytesDown: p.down.Load(), Buffered: lentBytes.Load()}
}

// record is what is known of one connection; it is logged when it ends.
type record struct {
	p        *Proxy
	start    time.Time
	method   string
	computer string
	host     string
	port     uint16
	addr     netip.Addr // resolved: dialled, or the one refused
	verdict  Verdict
	closed   string // why a tunnel was closed by the proxy
	err      error
	up, down atomic.Int64
	// then runs after the connection is logged, in its handler's
	// goroutine: keptConn serves the client's next requests there.
	then func()
}

func (r *record) addUp(n int) {
	r.up.Add(int64(n))
	r.p.up.Add(uint64(n))
}

func (r *record) addDown(n int) {
	r.down.Add(int64(n))
	r.p.down.Add(uint64(n))
}

// ServeHTTP handles one proxy request: a CONNECT or an absolute http://
// request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if g, ok := r.Context().Value(groupKey{}).(*group); ok {
		g.add()
		defer g.done()
	}
	p.active.Add(1)
	rec := &record{p: p, start: p.clock.Now(), method: r.Method}
	defer func() {
		p.finish(rec)
		if rec.then != nil {
			rec.then()
		}
	}()

	// Nothing of the request is looked at before the credentials.
	user, pass, _ := proxyAuth(r.Header.Get("Proxy-Authorization"))
	id, ok := "", false
	if user != "" {
		id, ok = p.cfg.Authenticate(user, pass)
	}
	if !ok {
		p.refuse(w, r, rec, VerdictAuth)
		return
	}
	rec.computer = id

	host, portStr, authority, ok := requestTarget(r)
	if !ok {
		p.refuse(w, r, rec, VerdictBadRequest)
		return
	}
	rec.host = host
	port, ok := parsePort(portStr)
	if !ok {
		p.refuse(w, r, rec, VerdictBadRequest)
		return
	}
	rec.port = port
	if p.cfg.Abuse {
		if v := portVerdict(port); v != VerdictAllowed {
			p.refuse(w, r, rec, v)
			return
		}
	}
	t, ok := parseHost(host)
	if !ok {
		p.refuse(w, r, rec, VerdictInvalidHost)
		return
	}
	addr, v, err := p.resolve(r.Context(), t)
	rec.addr, rec.err = addr, err
	if v != VerdictAllowed {
		p.refuse(w, r, rec, v)
		return
	}
	target := netip.AddrPortFrom(addr, port)
	if r.Method == http.MethodConnect {
		if !p.slots.take(id) {
			p.refuse(w, r, rec, VerdictTooMany)
			return
		}
		defer p.slots.give(id)
		p.tunnel(w, r, rec, target)
		return
	}
	p.forward(w, r, rec, target, authority)
}

// requestTarget returns the host and port a proxy request is for, and the
// authority to send upstream.
func requestTarget(r *http.Request) (host, port, authority string, ok bool) {
	if r.Method == http.MethodConnect {
		authority = r.URL.Host
		if authority == "" || r.URL.Path != "" {
			return "", "", "", false
		}
		host, port, err := net.SplitHostPort(authority)
		if err != nil {
			return "", "", "", false
		}
		return host, port, authority, true
	}
	if r.URL.Scheme != "http" || r.URL.Host == "" {
		return "", "", "", false
	}
	port = r.URL.Port()
	if port == "" {
		port = "80"
	}
	return r.URL.Hostname(), port, r.URL.Host, true
}

func parsePort(s string) (uint16, bool) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, false
	}
	return uint16(n), true
}

// proxyAuth reads Basic credentials from a Proxy-Authorization value.
func proxyAuth(h string) (user, pass string, ok bool) {
	scheme, cred, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return "", "", false
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		return "", "", false
	}
	return strings.Cut(string(b), ":")
}

// resolve returns the one address to dial for t, or the verdict that
// refuses it (with the offending address, for the log only).
func (p *Proxy) resolve(ctx context.Context, t target) (netip.Addr, Verdict, error) {
	if t.addr.IsValid() {
		if p.blocked(t.addr) {
			return t.addr, VerdictBlockedAddress, nil
		}
		return t.addr.Unmap(), VerdictAllowed, nil
	}
	if localName(t.name) {
		return netip.Addr{}, VerdictBlockedAddress, nil
	}
	ctx, cancel := p.withTimeout(ctx, p.cfg.LookupTimeout)
	defer cancel()
	addrs, err := p.cfg.Resolver.LookupNetIP(ctx, "ip", t.name+".")
	if err != nil {
		if context.Cause(ctx) == errTimeout {
			err = errTimeout
		}
		return netip.Addr{}, VerdictDNSFailure, fmt.Errorf("resolve %s: %w", t.name, err)
	}
	if len(addrs) == 0 {
		return netip.Addr{}, VerdictDNSFailure, fmt.Errorf("resolve %s: no addresses", t.name)
	}
	for _, a := range addrs {
		if p.blocked(a) {
			return a, VerdictBlockedAddress, nil
		}
	}
	return addrs[0].Unmap(), VerdictAllowed, nil
}

var errTimeout = errors.New("timed out")

// withTimeout is context.WithTimeout on the proxy's clock, with errTimeout
// as the cause. On the system clock it is context.WithTimeoutCause itself,
// which needs no goroutine to wait for the time.
func (p *Proxy) withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := p.clock.(clock.Real); ok {
		return context.WithTimeoutCause(ctx, d, errTimeout)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	fire := p.clock.After(d)
	stop := make(chan struct{})
	go func() {
		select {
		case <-fire:
			cancel(errTimeout)
		case <-stop:
		}
	}()
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			close(stop)
			cancel(context.Canceled)
		})
	}
}

// dial connects to a checked address within the dial timeout.
func (p *Proxy) dial(ctx context.Context, ap netip.AddrPort) (net.Conn, error) {
	ctx, cancel := p.withTimeout(ctx, p.cfg.DialTimeout)
	defer cancel()
	c, err := p.cfg.Dialer.DialContext(ctx, "tcp", ap.String())
	if err != nil {
		if context.Cause(ctx) == errTimeout {
			err = errTimeout
		}
		return nil, fmt.Errorf("dial %s: %w", ap, err)
	}
	return c, nil
}

// dialChecked is the plain-request transport's dialer. The transport is
// only ever given checked addresses; this checks again so that nothing
// else can be dialled through it.
func (p *Proxy) dialChecked(ctx context.Context, _, addr string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, errUnchecked
	}
	return p.dialUpstream(ctx, ap)
}

var errUnchecked = errors.New("egress: refusing to dial an unchecked address")

// dialUpstream connects to target for a plain request. Plain requests
// only ever go to checked addresses; this checks again so that nothing
// else can be dialled for them.
func (p *Proxy) dialUpstream(ctx context.Context, target netip.AddrPort) (net.Conn, error) {
	if p.blocked(target.Addr()) {
		return nil, errUnchecked
	}
	return p.dial(ctx, target)
}

// refuse answers r with the status and header of v, records it, and
// reports refusals by the address and abuse checks.
func (p *Proxy) refuse(w http.ResponseWriter, r *http.Request, rec *record, v Verdict) {
	rec.verdict = v
	p.report(rec)
	h := w.Header()
	h.Set(HeaderRefused, string(v))
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	if v == VerdictAuth {
		h.Set("Proxy-Authenticate", `Basic realm="berth egress"`)
	}
	if r.Method == http.MethodConnect {
		// The client would send its tunnel bytes next.
		h.Set("Connection", "close")
	}
	w.WriteHeader(v.status())
	io.WriteString(w, v.message()+"\n")
}

// report sends the event for rec's verdict, if it is one that is reported.
func (p *Proxy) report(rec *record) {
	var typ EventType
	switch rec.verdict {
	case VerdictBlockedAddress:
		typ = EventRefused
	case VerdictAbuseMail, VerdictAbuseMining:
		typ = EventAbuse
	default:
		return
	}
	if p.cfg.OnEvent == nil {
		return
	}
	p.cfg.OnEvent(Event{
		Type:       typ,
		Time:       p.clock.Now(),
		ComputerID: rec.computer,
		Host:       rec.host,
		Port:       rec.port,
		Verdict:    rec.verdict,
	})
}

// finish counts and logs a connection that has ended.
func (p *Proxy) finish(rec *record) {
	defer p.active.Add(-1)
	if rec.verdict == "" {
		rec.verdict = VerdictUpstreamFailure
	}
	p.mu.Lock()
	p.verdicts[rec.verdict]++
	p.mu.Unlock()

	attrs := []slog.Attr{
		slog.String("computer", rec.computer),
		slog.String("method", rec.method),
		slog.String("host", rec.host),
		slog.Int("port", int(rec.port)),
		slog.Int64("up", rec.up.Load()),
		slog.Int64("down", rec.down.Load()),
		slog.Duration("duration", p.clock.Now().Sub(rec.start)),
		slog.String("verdict", string(rec.verdict)),
	}
	if rec.addr.IsValid() {
		attrs = append(attrs, slog.String("addr", rec.addr.String()))
	}
	if rec.closed != "" {
		attrs = append(attrs, slog.String("closed", rec.closed))
	}
	if rec.err != nil {
		attrs = append(attrs, slog.String("error", rec.err.Error()))
	}
	level := slog.LevelInfo
	if rec.verdict == VerdictAbuseMail || rec.verdict == VerdictAbuseMining {
		level = slog.LevelWarn
	}
	p.log.LogAttrs(context.Background(), level, "egress connection", attrs...)
}

// group counts the connections and handlers of one Serve, so that it can
// wait for them. ctx ends with Serve; back takes the connections that
// keptConn gives back to Serve's server.
type group struct {
	ctx  context.Context
	back *handBack

	mu   sync.Mutex
	n    int
	zero chan struct{}
}

type groupKey struct{}

func (g *group) add() {
	g.mu.Lock()
	g.n++
	g.mu.Unlock()
}

func (g *group) done() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n--
	if g.n == 0 && g.zero != nil {
		close(g.zero)
		g.zero = nil
	}
}

// wait returns once no handler is running.
func (g *group) wait() {
	g.mu.Lock()
	if g.n == 0 {
		g.mu.Unlock()
		return
	}
	if g.zero == nil {
		g.zero = make(chan struct{})
	}
	ch := g.zero
	g.mu.Unlock()
	<-ch
}

var _ http.Handler = (*Proxy)(nil)
