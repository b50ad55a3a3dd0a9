package lender

import (
	"bufio"
	"context"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/berthdev/berth/egress"
	"github.com/berthdev/berth/internal/token"
)

// The egress proxy of the engine guard runs in its own container (see
// engineguard.go): `berth agent egress-proxy`, the same egress package and
// the same per-computer credentials as the agent's own proxy. It reads the
// agent's egress secret from its standard input, never from its command
// line or environment, which `docker inspect` shows.

// EgressProxyPort is the egress proxy container's port on every computer
// network.
const EgressProxyPort = 3129

// MaxSecretBytes bounds the secret ReadSecret accepts.
const MaxSecretBytes = 4096

// dockerHostNames are the names Docker Desktop (and Podman) give the host
// and the engine's VM. The egress package refuses them by name; their
// addresses are refused too, so that no other name for them passes.
var dockerHostNames = []string{"host.docker.internal", "gateway.docker.internal", "host.containers.internal"}

// EgressProxyConfig configures ServeEgressProxy.
type EgressProxyConfig struct {
	// Secret is the agent's egress secret; each computer's password is
	// derived from it (token.Egress).
	Secret []byte
	// BlockedCIDRs are refused on top of the built-in ranges: the lender's
	// own addresses and the owner's extra ranges, as the agent names them.
	BlockedCIDRs []netip.Prefix
	Abuse        bool
	// Resolver and Dialer reach the internet; nil are the system's.
	Resolver egress.Resolver
	Dialer   egress.Dialer
	Logger   *slog.Logger
}

// ReadSecret reads the egress secret: one line (or all) of r, at most
// MaxSecretBytes, surrounding space trimmed.
func ReadSecret(r io.Reader) ([]byte, error) {
	br := bufio.NewReader(io.LimitReader(r, MaxSecretBytes+1))
	line, err := br.ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read the egress secret: %w", err)
	}
	if len(line) > MaxSecretBytes {
		return nil, fmt.Errorf("egress secret: longer than %d bytes", MaxSecretBytes)
	}
	s := strings.TrimSpace(line)
	if len(s) < token.MinSecretLen {
		return nil, fmt.Errorf("egress secret: %d bytes on standard input, want at least %d", len(s), token.MinSecretLen)
	}
	return []byte(s), nil
}

// ServeEgressProxy serves the egress proxy on ln until ctx ends. Besides
// the egress package's ranges and cfg.BlockedCIDRs it refuses this
// container's own addresses, its default gateways (the engine's bridge,
// the VM) and the addresses Docker Desktop's host names resolve to here.
func ServeEgressProxy(ctx context.Context, ln net.Listener, cfg EgressProxyConfig) error {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tokens, err := token.NewDeriver(cfg.Secret)
	if err != nil {
		return fmt.Errorf("egress secret: %w", err)
	}
	resolver, dialer := cfg.Resolver, cfg.Dialer
	if resolver == nil {
		resolver = net.DefaultResolver
	}
	if dialer == nil {
		dialer = &net.Dialer{}
	}
	blocked := append([]netip.Prefix(nil), cfg.BlockedCIDRs...)
	for _, gw := range defaultGateways() {
		blocked = append(blocked, netip.PrefixFrom(gw, gw.BitLen()))
	}
	for _, name := range dockerHostNames {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		as, err := resolver.LookupNetIP(lctx, "ip", name+".")
		cancel()
		if err != nil {
			continue
		}
		for _, a := range as {
			a = a.Unmap()
			blocked = append(blocked, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	log.Info("egress proxy refuses, beyond private and reserved ranges", "prefixes", blocked)
	p, err := egress.New(egress.Config{
		Authenticate: func(user, pass string) (string, bool) {
			if user == "" {
				return "", false
			}
			want := tokens.Derive(token.Egress, user)
			return user, subtle.ConstantTimeCompare([]byte(pass), []byte(want)) == 1
		},
		Resolver: resolver, Dialer: dialer, BlockedCIDRs: blocked, Abuse: cfg.Abuse,
		BlockHost: true, Logger: log,
		OnEvent: func(ev egress.Event) {
			log.Warn("egress refused", "event", ev.Type, "computer", ev.ComputerID, "host", ev.Host, "port", ev.Port, "verdict", ev.Verdict)
		},
	})
	if err != nil {
		return err
	}
	log.Info("egress proxy listening", "addr", ln.Addr().String())
	return p.Serve(ctx, ln)
}

// defaultGateways reads this network namespace's IPv4 default gateways
// from /proc/net/route (none where that file is missing).
func defaultGateways() []netip.Addr {
	b, err := os.ReadFile("/proc/net/route")
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[1] != "00000000" {
			continue
		}
		raw, err := hex.DecodeString(f[2])
		if err != nil || len(raw) != 4 {
			continue
		}
		var a [4]byte
		binary.BigEndian.PutUint32(a[:], binary.LittleEndian.Uint32(raw))
		if ip := netip.AddrFrom4(a); !ip.IsUnspecified() {
			out = append(out, ip)
		}
	}
	return out
}

// ProbeEgressProxy checks that an egress proxy answers at addr: a request
// without credentials must get 407.
func ProbeEgressProxy(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("egress proxy at %s: %w", addr, err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	if _, err := io.WriteString(c, "GET http://probe.invalid/ HTTP/1.1\r\nHost: probe.invalid\r\nConnection: close\r\n\r\n"); err != nil {
		return fmt.Errorf("egress proxy at %s: %w", addr, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(io.LimitReader(c, 64<<10)), nil)
	if err != nil {
		return fmt.Errorf("egress proxy at %s: %w", addr, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusProxyAuthRequired {
		return fmt.Errorf("egress proxy at %s answered %s, want 407 without credentials", addr, resp.Status)
	}
	return nil
}
