package tunnel

import (
	"context"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net"
	"strconv"

	"github.com/berthdev/berth/egress"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/providers/docker"
)

// The runner's computer network is internal: its only way out is the
// runner's own egress proxy, the same egress code the supervisor and the
// lending agent run, listening on this machine's docker0 address, the one
// port of this host the firewall opens to computers. Each computer gets
// HTTP_PROXY and HTTPS_PROXY (egress.ProxyEnv) with its own credentials:
// the user is its computer id, the password an HMAC of a secret that lives
// in the runner's memory for the run. The proxy lets only the current
// computer through, and its address checks refuse this machine's own
// addresses, its LAN, loopback and the metadata address.

// EgressOptions configure the computers' egress proxy.
type EgressOptions struct {
	// Listen is HOST:PORT, :PORT (on the docker0 address), or "off" for no
	// proxy (the computer then has no way out); empty is any free port on
	// the docker0 address.
	Listen string
	// Resolver and Dialer reach the internet; nil are the system's.
	Resolver egress.Resolver
	Dialer   egress.Dialer
}

// egressRun is the runner's egress listener and the secret its computers'
// passwords derive from; a nil *egressRun is no proxy.
type egressRun struct {
	ln      net.Listener
	addr    string // as computers reach it
	tokens  *token.Deriver
	unguard func(context.Context) error // closes the firewall's opening; nil: none made
	done    chan struct{}               // closed when Serve has returned
}

// listenEgress opens the proxy's listener and makes the run's secret. It
// returns nil when o.Listen is "off".
func listenEgress(o EgressOptions, log *slog.Logger) (*egressRun, error) {
	if o.Listen == "off" {
		log.Warn("egress proxy off: the computer has no way out")
		return nil, nil
	}
	addr := o.Listen
	if addr == "" {
		addr = ":0"
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("egress listen %q: want HOST:PORT, :PORT or off", addr)
	}
	if host == "" {
		ip, err := docker.BridgeIPv4()
		if err != nil {
			return nil, fmt.Errorf("egress: no docker0 address to listen on (%v); give HOST:PORT, or off for a computer with no way out", err)
		}
		addr = net.JoinHostPort(ip.String(), port)
	}
	secret, err := token.NewSecret(32)
	if err != nil {
		return nil, err
	}
	tokens, err := token.NewDeriver([]byte(secret))
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("egress listen %s: %w", addr, err)
	}
	return &egressRun{ln: ln, addr: ln.Addr().String(), tokens: tokens}, nil
}

// port is the proxy's TCP port, 0 without a proxy.
func (e *egressRun) port() int {
	if e == nil {
		return 0
	}
	_, p, _ := net.SplitHostPort(e.addr)
	n, _ := strconv.Atoi(p)
	return n
}

// close closes a listener that serves nothing yet.
func (e *egressRun) close() {
	if e != nil {
		e.ln.Close()
	}
}

// serveEgress makes the proxy on e and serves it until the run ends, and
// gives the runner's computers its address and their own credentials.
// With e nil they get no proxy variables at all.
func (r *runner) serveEgress(e *egressRun, o EgressOptions) error {
	if e == nil {
		return nil
	}
	resolver, dialer := o.Resolver, o.Dialer
	if resolver == nil {
		resolver = net.DefaultResolver
	}
	if dialer == nil {
		dialer = &net.Dialer{}
	}
	log := r.log.With("component", "egress")
	p, err := egress.New(egress.Config{
		Authenticate: func(user, pass string) (string, bool) {
			c, _ := r.current()
			if c == nil || user != c.id {
				return "", false
			}
			want := e.tokens.Derive(token.Egress, user)
			return user, subtle.ConstantTimeCompare([]byte(pass), []byte(want)) == 1
		},
		Resolver:  resolver,
		Dialer:    dialer,
		BlockHost: true,
		Logger:    log,
		OnEvent: func(ev egress.Event) {
			log.Warn("egress refused", "event", ev.Type, "computer", ev.ComputerID, "host", ev.Host, "port", ev.Port, "verdict", ev.Verdict)
		},
	})
	if err != nil {
		e.close()
		return err
	}
	r.egress = e
	r.proxyEnv = func(computerID string, env map[string]string) map[string]string {
		return egress.ProxyEnv(env, e.addr, computerID, e.tokens.Derive(token.Egress, computerID))
	}
	e.done = make(chan struct{})
	go func() {
		defer close(e.done)
		if err := p.Serve(r.ctx, e.ln); err != nil && r.ctx.Err() == nil {
			log.Warn("egress proxy stopped", "err", err)
		}
	}()
	log.Info("egress proxy listening", "addr", e.addr)
	return nil
}

// stopEgress waits for the proxy to end (the run's context has ended) and
// closes the firewall's opening for it.
func (r *runner) stopEgress() {
	e := r.egress
	if e == nil {
		return
	}
	if e.done != nil {
		<-e.done
	} else {
		e.close()
	}
	if e.unguard != nil {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if err := e.unguard(ctx); err != nil {
			r.log.Warn("could not close the egress proxy's port in the host firewall", "port", e.port(), "err", err)
		}
	}
}
