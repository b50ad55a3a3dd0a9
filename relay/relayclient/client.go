// Package relayclient is the agent's side of the relay link: it connects
// out to a relay, serves the agent's HTTP API on the streams the relay
// opens, and reconnects with jittered exponential backoff.
package relayclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/coder/websocket"
	"github.com/hashicorp/yamux"

	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/relay"
)

// Config configures Run.
type Config struct {
	// URL is the relay's websocket endpoint, e.g.
	// wss://relay.example.com/v1/agents/connect. For Run it may name
	// several relays separated by commas: Run connects to one, and moves
	// to the next when it cannot be reached or its link drops.
	URL string
	// Token is the agent token issued at pairing.
	Token string
	// Handler serves the agent's API on streams opened by the relay.
	Handler http.Handler
	// HTTPClient performs the websocket handshake; nil uses
	// http.DefaultClient. Its transport decides how the relay is dialled.
	HTTPClient *http.Client
	// Logger receives logs; nil discards them.
	Logger *slog.Logger
	// Clock drives backoff and pings; nil is the system clock.
	Clock clock.Clock
	// Version is reported to the relay.
	Version string
	// Backoff spaces reconnect attempts; nil uses NewBackoff(Clock).
	Backoff *Backoff
	// PingInterval and PingTimeout detect a dead link; zero uses the
	// relay package defaults.
	PingInterval time.Duration
	PingTimeout  time.Duration
	// OnConnect, if set, is called each time a connection is established
	// (for resyncing state after a reconnect).
	OnConnect func()
	// OnDisconnect, if set, is called with the reason each time the link
	// is lost or an attempt to connect fails.
	OnDisconnect func(error)
	// Insecure allows a plain ws:// URL to a host that is not loopback,
	// where the token travels unencrypted (berth agent run --insecure).
	// Without it, such a URL is refused; wss:// and loopback need none.
	Insecure bool
}

// ErrUnauthorized is returned by Connect when the relay refuses the token.
var ErrUnauthorized = errors.New("relay refused agent token")

// ErrInsecureURL is returned by Run, Connect and CheckURL for a plain
// ws:// URL to a host that is not loopback, without Config.Insecure.
var ErrInsecureURL = errors.New("unencrypted link to a host that is not loopback")

// Run connects to the relay and serves cfg.Handler until ctx ends,
// reconnecting whenever the link drops. It returns ctx's error, or at
// once an error for a URL that CheckURL refuses.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Handler == nil {
		return errors.New("relayclient: Config.Handler is required")
	}
	if err := CheckURL(cfg.URL, cfg.Insecure); err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "relay-link")
	if cfg.Insecure {
		log.Warn("INSECURE: --insecure allows a plain ws:// relay link to a host that is not loopback, where the agent token travels unencrypted",
			"url", cfg.URL, "unencrypted", plaintext(cfg.URL))
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	b := cfg.Backoff
	if b == nil {
		b = NewBackoff(cfg.Clock)
	}
	urls := URLs(cfg.URL)
	for i := 0; ; i = (i + 1) % len(urls) {
		one := cfg
		one.URL = urls[i]
		sess, err := Connect(ctx, one)
		if err == nil {
			b.Connected()
			log.Info("connected to relay", "relay", one.URL)
			if cfg.OnConnect != nil {
				cfg.OnConnect()
			}
			err = serve(ctx, cfg, sess)
			log.Info("relay link lost", "relay", one.URL, "err", err)
		} else if ctx.Err() == nil {
			log.Warn("connect to relay failed", "relay", one.URL, "err", err)
		}
		if cfg.OnDisconnect != nil && ctx.Err() == nil {
			cfg.OnDisconnect(err)
		}
		if err := b.Wait(ctx); err != nil {
			return err
		}
	}
}

// Connect dials the relay once and returns the multiplexed session, on
// which the relay opens streams. Most callers want Run.
func Connect(ctx context.Context, cfg Config) (*yamux.Session, error) {
	if err := checkOne(cfg.URL, cfg.Insecure); err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	h := http.Header{}
	h.Set("Authorization", "Bearer "+cfg.Token)
	if cfg.Version != "" {
		h.Set(relay.VersionHeader, cfg.Version)
	}
	hc, lastConn, coalesce := coalescingClient(cfg.HTTPClient)
	if coalesce {
		defer hc.Transport.(*http.Transport).CloseIdleConnections()
	}
	ws, resp, err := websocket.Dial(ctx, cfg.URL, &websocket.DialOptions{
		HTTPClient:      hc,
		HTTPHeader:      h,
		Subprotocols:    []string{relay.Subprotocol},
		CompressionMode: websocket.CompressionDisabled,
	})
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusUnauthorized {
			return nil, ErrUnauthorized
		}
		return nil, fmt.Errorf("dial relay: %w", err)
	}
	// The link lives until the session closes, not until ctx ends;
	// serve closes the session when ctx ends.
	conn := websocket.NetConn(context.WithoutCancel(ctx), ws, websocket.MessageBinary)
	if coalesce {
		if raw := lastConn(); raw != nil {
			conn = &linkConn{Conn: conn, raw: raw}
		}
	}
	sess, err := yamux.Server(conn, relay.MuxConfig(cfg.PingTimeout))
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("start session: %w", err)
	}
	return sess, nil
}

// serve runs the agent's API on sess until the session ends or ctx ends.
func serve(ctx context.Context, cfg Config, sess *yamux.Session) error {
	srv := &http.Server{
		Handler:           cfg.Handler,
		ReadHeaderTimeout: 30 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          nil,
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		relay.Heartbeat(ctx, sess, cfg.Clock, cfg.PingInterval, nil)
	}()
	err := srv.Serve(sess)
	sess.Close()
	srv.Close()
	<-done
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, yamux.ErrSessionShutdown) || errors.Is(err, http.ErrServerClosed) {
		return errors.New("session closed")
	}
	return err
}
