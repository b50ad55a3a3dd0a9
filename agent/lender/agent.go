package lender

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/agent/ledger"
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/providers/docker"
	"github.com/berthdev/berth/relay/relayclient"
)

// AgentOptions configure a whole lending agent (RunAgent): the lender, its
// ledger and control socket, and the relay link.
type AgentOptions struct {
	// LenderID and Token are this lending daemon's own id (its companion
	// id) and token from pairing.
	LenderID string
	Token    string
	// RelayURL is the relay's websocket endpoint (from pairing).
	RelayURL string
	// Insecure allows a plain ws:// RelayURL to a host that is not
	// loopback (relayclient.Config.Insecure; --insecure).
	Insecure bool
	// SupervisorURL is shown in the status; live view of lent desktops
	// goes to its host's TURN relay unless TURNRelay names one.
	SupervisorURL string
	// Unguarded lends even when the host firewall cannot close this machine
	// to lent computers (--unguarded): they can then reach every service it
	// listens on. Logged as an error at each start.
	Unguarded bool
	// Guard is how computers are kept from this machine: GuardAuto (""),
	// GuardHost or GuardEngine (--guard; see guard.go).
	Guard string
	// EgressImage is the image of the engine guard's egress proxy
	// container; empty is DefaultEgressImage.
	EgressImage string
	// TURNRelay is the supervisor's TURN relay, host:port (--turn-relay),
	// for a supervisor whose host is private or whose relay is elsewhere.
	TURNRelay string
	// DataDir holds the ledger, the settings and the control socket.
	DataDir string
	// Socket is the control socket's path; empty is DataDir/agent.sock,
	// "off" serves none.
	Socket string
	// Docker holds the engine address and images; CPUs and memory come
	// from the owner's settings. Networks are made per computer (no pool),
	// so that each computer's network carries its labels.
	Docker docker.Options
	// Egress configures the agent's egress proxy, lent computers' only way
	// out; the zero value listens on the docker0 address.
	Egress EgressOptions
	// HTTPClient dials the relay; nil is the default client.
	HTTPClient *http.Client
	// Backoff spaces reconnects; nil is relayclient's default.
	Backoff *relayclient.Backoff
	Clock   clock.Clock
	Logger  *slog.Logger
	Version string
	// Ready, if set, is called with the lender once it serves.
	Ready func(*Lender)
}

// RunAgent runs a lending agent until ctx ends: it matches the engine to
// the ledger (adopting or offering to clean up), serves the control socket
// and keeps the relay link up. Computers keep running after it returns.
func RunAgent(ctx context.Context, o AgentOptions) error {
	if o.LenderID == "" || o.Token == "" {
		return errors.New("agent: not paired (run berth agent pair CODE --supervisor URL)")
	}
	if o.RelayURL == "" {
		return errors.New("agent: no relay URL: the supervisor named none at pairing; give --relay")
	}
	guard, err := ResolveGuard(o.Guard, runtime.GOOS)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
		return fmt.Errorf("agent: data folder: %w", err)
	}
	led, err := ledger.OpenFile(ctx, filepath.Join(o.DataDir, ledger.FileName))
	if err != nil {
		return err
	}
	defer led.Close()
	base := o.Docker
	base.NetworkPool = 0
	base.Logger = log
	engineEgress := guard.Mode == GuardEngine && o.Egress.Listen != "off"
	if engineEgress {
		base.EgressContainer = egressContainerName(o.LenderID)
	}
	probe, err := docker.New(base) // checks the engine address and images
	if err != nil {
		return err
	}
	// The sandbox runtime (runsc when the engine has it): one the engine
	// lacks stops the agent now rather than at the first computer.
	if err := probe.Prepare(ctx); err != nil {
		probe.Close()
		return fmt.Errorf("agent: %w", err)
	}
	host := probe.Options().Host
	probe.Close()
	eng, err := NewDockerEngine(host)
	if err != nil {
		return err
	}
	defer eng.Close()
	elog := log.With("component", "egress")
	var (
		er     *egressRun   // GuardHost: the proxy on the docker0 address
		eg     *Egress      // what computers are given
		proxyC *engineGuard // GuardEngine: the proxy container
	)
	switch {
	case engineEgress:
		secret, tokens, err := loadEgressSecret(o.DataDir)
		if err != nil {
			return fmt.Errorf("agent: %w", err)
		}
		image := o.EgressImage
		if image == "" {
			image = DefaultEgressImage
		}
		blocked := append(hostPrefixes(elog), o.Egress.BlockedCIDRs...)
		if proxyC, err = newEngineGuard(host, o.LenderID, image, secret, blocked, o.Egress.Abuse, elog); err != nil {
			return fmt.Errorf("agent: %w", err)
		}
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := proxyC.close(cctx); err != nil {
				elog.Warn("could not remove the egress proxy container", "err", err)
			}
		}()
		eg = &Egress{Addr: proxyC.addr(), Tokens: tokens, OnChange: proxyC.set, Serving: proxyC.isRunning}
	case guard.Mode == GuardEngine:
		elog.Warn("egress proxy off: lent computers have no way out")
	default:
		if er, err = listenEgress(o.Egress, o.DataDir, elog); err != nil {
			return fmt.Errorf("agent: %w", err)
		}
		if er != nil {
			defer er.ln.Close()
			eg = er.e
			eg.Firewall = true
		}
	}
	openTURN, closeTURN := docker.OpenTURN, docker.UnguardTURN
	if !guard.Firewall {
		openTURN, closeTURN = nil, nil // no host firewall to open (Docker Desktop)
	}
	l, err := New(Config{
		LenderID: o.LenderID, DataDir: o.DataDir, Engine: eng, Ledger: led, Clock: o.Clock, Logger: log,
		Version: o.Version, RelayURL: o.RelayURL, Egress: eg,
		OpenTURN: openTURN, CloseTURN: closeTURN, TURNRelay: o.TURNRelay,
		Pairing: control.Pairing{Paired: true, URL: o.SupervisorURL, LenderID: o.LenderID},
		Docker: func(cpus float64, memoryMB int64) (Docker, error) {
			opts := base
			opts.CPUs, opts.MemoryMB = cpus, memoryMB
			return docker.New(opts)
		},
	})
	if err != nil {
		return err
	}
	defer l.Close()
	if _, err := l.Start(ctx); err != nil {
		return fmt.Errorf("agent: %w", err)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // before the wait
	if !guard.Firewall {
		log.Info("guarding this machine from lent computers by the Docker engine alone: internal networks and the egress proxy container (--guard engine)")
	} else if err := docker.GuardHost(ctx); err != nil {
		if !o.Unguarded {
			return fmt.Errorf("agent: cannot close this machine to lent computers (%v): they would reach every service it listens on. "+
				"Run the agent as root with iptables and ip6tables installed (berth agent service install), or pass --unguarded to lend anyway", err)
		}
		log.Error("UNGUARDED: lent computers can reach every service this machine listens on (--unguarded)", "err", err)
	}
	if proxyC != nil && l.Settings().Egress {
		if err := proxyC.start(ctx); err != nil {
			return fmt.Errorf("agent: lent computers would have no way out and no guard of their own, so this machine does not lend: egress proxy container: %w", err)
		}
	}
	if er != nil {
		if err := er.start(ctx, l, o.Egress, elog, &wg); err != nil {
			return fmt.Errorf("agent: egress proxy: %w", err)
		}
		l.egress.applyFirewall(ctx, l.Settings().Egress)
		if closed, err := docker.RemoveStaleOpenings(ctx); err == nil && len(closed) > 0 {
			log.Info("removed stale egress openings from the host firewall", "ports", closed)
		}
		defer func() {
			fctx, fcancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer fcancel()
			if err := docker.UnguardPort(fctx, eg.port()); err != nil {
				log.Warn("could not close the egress proxy's port in the host firewall", "err", err)
			}
		}()
	}
	// What Berth processes on this engine left past their time.
	if gcd, err := docker.New(base); err == nil {
		wg.Go(func() { gcd.RunGarbageCollector(ctx); gcd.Close() })
	}
	if o.Socket != "off" {
		path := o.Socket
		if path == "" {
			path = filepath.Join(o.DataDir, control.SocketName)
		}
		ln, err := control.Listen(path)
		if err != nil {
			return err
		}
		log.Info("control socket listening", "path", path)
		wg.Go(func() {
			if err := control.Serve(ctx, ln, l, log); err != nil {
				log.Warn("control socket stopped", "err", err)
			}
			os.Remove(path)
		})
	}
	if o.Ready != nil {
		o.Ready(l)
	}
	err = l.Serve(ctx, relayclient.Config{
		URL: o.RelayURL, Token: o.Token, HTTPClient: o.HTTPClient, Logger: log,
		Clock: o.Clock, Version: o.Version, Backoff: o.Backoff, Insecure: o.Insecure,
	})
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
