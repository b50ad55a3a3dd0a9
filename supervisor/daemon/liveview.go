package daemon

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"time"

	"github.com/berthdev/berth/computerd/desktop"
	"github.com/berthdev/berth/internal/hostnet"
	"github.com/berthdev/berth/internal/secrets"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/relay/turnserver"
	"github.com/berthdev/berth/supervisor/apiserver"
	"github.com/berthdev/berth/supervisor/liveview"
)

// LiveViewOptions configure live view: the TURN relay and the viewer
// signalling. Live view is off unless Listen is set.
type LiveViewOptions struct {
	// Listen is TURN_LISTEN: HOST:PORT for TURN over UDP and TCP, :PORT for
	// the docker0 bridge's address (which computers and this host reach),
	// or empty/"off".
	Listen string
	// TLSListen, with TLSCert and TLSKey files, adds TURN over TLS
	// (TURN_TLS_LISTEN, TURN_TLS_CERT, TURN_TLS_KEY).
	TLSListen, TLSCert, TLSKey string
	// Secret is TURN_SECRET; when empty one is generated once and kept in
	// the data folder.
	Secret string
	// PublicHost is TURN_PUBLIC_HOST: the relay's address as viewers and
	// computers reach it (default: the address TURN listens on).
	PublicHost string
	// DesktopUsers is DESKTOP_USERS (default liveview.DefaultDesktopUsers).
	DesktopUsers int
	// IdleStopMS is STREAM_IDLE_STOP_MS, passed to computers (0: theirs).
	IdleStopMS int
	// PublicURL is the supervisor's URL in viewer links (BERTH_PUBLIC_URL);
	// empty means the URL the link was asked on.
	PublicURL string
}

// startTURN opens the TURN relay's listeners and starts it, and returns
// the environment computers need to reach it. It does nothing when live
// view is off.
func (d *Daemon) startTURN(ctx context.Context) (map[string]string, error) {
	o := d.opts.LiveView
	if o.Listen == "" || o.Listen == "off" {
		return nil, nil
	}
	host, port, err := net.SplitHostPort(o.Listen)
	if err != nil {
		return nil, fmt.Errorf("TURN_LISTEN=%q: want HOST:PORT, :PORT or off", o.Listen)
	}
	if host == "" {
		ip, err := hostnet.BridgeIPv4()
		if err != nil {
			return nil, fmt.Errorf("TURN_LISTEN: no docker0 address to listen on (%v); set TURN_LISTEN=HOST:PORT or off", err)
		}
		host = ip.String()
	}
	relayIP, err := netip.ParseAddr(host)
	if err != nil {
		return nil, fmt.Errorf("TURN_LISTEN=%q: the host must be an IP address of this machine", o.Listen)
	}
	pc, ln, err := hostnet.ListenUDPTCP(host, port)
	if err != nil {
		return nil, fmt.Errorf("TURN_LISTEN %s: %w", o.Listen, err)
	}
	cfg := turnserver.Config{RelayIP: relayIP, PacketConns: []net.PacketConn{pc}, Listeners: []net.Listener{ln}, Logger: d.log}
	turnPort := pc.LocalAddr().(*net.UDPAddr).Port
	closeAll := func() { pc.Close(); ln.Close() }
	var tlsPort int
	if o.TLSListen != "" && o.TLSListen != "off" {
		tl, err := listenTLS(o.TLSListen, host, o.TLSCert, o.TLSKey)
		if err != nil {
			closeAll()
			return nil, err
		}
		tlsPort = tl.Addr().(*net.TCPAddr).Port
		cfg.Listeners = append(cfg.Listeners, tl)
	}
	secret := o.Secret
	if secret == "" {
		if secret, err = secrets.LoadOrCreateSecretFile(filepath.Join(d.opts.DataDir, "turn.secret"), 32); err != nil {
			closeAll()
			return nil, err
		}
	}
	cfg.Secret = []byte(secret)
	ts, err := turnserver.New(cfg)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("TURN: %w", err)
	}
	d.TURN = ts
	d.turnSecret = cfg.Secret
	public := o.PublicHost
	if public == "" {
		public = host
	}
	hp := net.JoinHostPort(public, strconv.Itoa(turnPort))
	d.turnRelay = hp
	d.viewerTURN = []string{"turn:" + hp + "?transport=udp", "turn:" + hp + "?transport=tcp"}
	if tlsPort != 0 {
		d.viewerTURN = append(d.viewerTURN, "turns:"+net.JoinHostPort(public, strconv.Itoa(tlsPort))+"?transport=tcp")
	}
	for _, g := range d.guards {
		if err := g.AllowTURN(ctx, turnPort); err != nil {
			d.log.Warn("could not open the TURN port to computers in the host firewall; live view of Docker computers may fail", "err", err)
		} else {
			d.turnGuarded = turnPort
		}
	}
	d.log.Info("TURN relay listening", "udp", pc.LocalAddr().String(), "tcp", ln.Addr().String(), "tls", tlsPort, "public", public)
	env := map[string]string{desktop.EnvTURNHost: public, desktop.EnvTURNPort: strconv.Itoa(turnPort)}
	if o.IdleStopMS > 0 {
		env[desktop.EnvIdleStop] = strconv.Itoa(o.IdleStopMS)
	}
	return env, nil
}

// startLiveView gives the API the viewer links and pages when live view is
// on.
func (d *Daemon) startLiveView(h *apiserver.Handler, tokens *token.Deriver) error {
	if d.TURN == nil {
		return nil
	}
	o := d.opts.LiveView
	lv, err := liveview.New(liveview.Config{
		Store: d.Store, Tokens: tokens, Transport: d.Service.ComputerTransport,
		TURNSecret: d.turnSecret, ViewerTURN: d.viewerTURN,
		DesktopUsers: o.DesktopUsers, PublicURL: o.PublicURL, Logger: d.log,
	})
	if err != nil {
		return err
	}
	d.LiveView = lv
	h.Views = lv
	return nil
}

func (d *Daemon) closeTURN() {
	if d.TURN == nil {
		return
	}
	d.TURN.Close()
	if d.turnGuarded != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, g := range d.guards {
			if err := g.UnguardTURN(ctx, d.turnGuarded); err != nil {
				d.log.Warn("close the TURN port in the host firewall", "err", err)
			}
		}
	}
}
