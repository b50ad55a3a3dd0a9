package turnserver_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"log/slog"
	"math/big"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/pion/turn/v5"

	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/relay/turnserver"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

var secret = []byte("0123456789abcdef-turn-secret")

type tlog struct{ t testing.TB }

func (w tlog) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// server starts a TURN server on loopback UDP and TCP; cfg's listeners and
// secret are filled in.
func server(t *testing.T, cfg turnserver.Config) (*turnserver.Server, string, string) {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Secret = secret
	cfg.RelayIP = netip.MustParseAddr("127.0.0.1")
	cfg.PacketConns = append(cfg.PacketConns, pc)
	cfg.Listeners = append(cfg.Listeners, ln)
	cfg.Logger = slog.New(slog.NewTextHandler(tlog{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, err := turnserver.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, pc.LocalAddr().String(), ln.Addr().String()
}

// client is a pion TURN client over UDP on loopback with creds.
func client(t *testing.T, addr string, c turnserver.Credentials) *turn.Client {
	t.Helper()
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return newClient(t, conn, addr, c)
}

func newClient(t *testing.T, conn net.PacketConn, addr string, c turnserver.Credentials) *turn.Client {
	t.Helper()
	cl, err := turn.NewClient(&turn.ClientConfig{
		STUNServerAddr: addr, TURNServerAddr: addr, Conn: conn,
		Username: c.Username, Password: c.Password, Realm: turnserver.DefaultRealm,
		RTO: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Listen(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close(); conn.Close() })
	return cl
}

func issue(t *testing.T, id string) turnserver.Credentials {
	t.Helper()
	c, err := turnserver.Issue(secret, id, time.Now(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func allocate(t *testing.T, cl *turn.Client) net.PacketConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	relay, err := cl.AllocateWithContext(ctx)
	if err != nil {
		t.Fatalf("allocate: %v", err)
	}
	t.Cleanup(func() { relay.Close() })
	return relay
}

// exchange sends from a to b's relay address and reads it at b. b first
// permits a's address, as both ends of an ICE check do.
func exchange(t *testing.T, a, b net.PacketConn, msg string) error {
	t.Helper()
	b.WriteTo([]byte("permit"), a.LocalAddr())
	b.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 1500)
	// The first packets may race the permission; resend a few times.
	got := make(chan error, 1)
	go func() {
		for {
			n, _, err := b.ReadFrom(buf)
			if err != nil || string(buf[:n]) == msg {
				got <- err
				return
			}
		}
	}()
	for range 10 {
		if _, err := a.WriteTo([]byte(msg), b.LocalAddr()); err != nil {
			return err
		}
		select {
		case err := <-got:
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
	return <-got
}

// TestRelayToRelay: two clients, each with its own relay, reach each other
// through the server (the way a viewer and a computer do).
func TestRelayToRelay(t *testing.T) {
	s, udp, tcp := server(t, turnserver.Config{})
	a := allocate(t, client(t, udp, issue(t, "viewer-1")))

	// The other side connects over TCP, as a viewer behind a UDP block would.
	tc, err := net.Dial("tcp4", tcp)
	if err != nil {
		t.Fatal(err)
	}
	b := allocate(t, newClient(t, turn.NewSTUNConn(tc), tcp, issue(t, "computer-1")))

	if err := exchange(t, a, b, "hello b"); err != nil {
		t.Fatalf("a to b: %v", err)
	}
	if err := exchange(t, b, a, "hello a"); err != nil {
		t.Fatalf("b to a: %v", err)
	}
	if n := s.Allocations(); n != 2 {
		t.Errorf("allocations = %d, want 2", n)
	}
}

// TestTLSListener: a client reaches the server over TLS.
func TestTLSListener(t *testing.T) {
	cert, pool := selfSigned(t)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tl := tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	_, udp, _ := server(t, turnserver.Config{Listeners: []net.Listener{tl}})
	tc, err := tls.Dial("tcp4", ln.Addr().String(), &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	b := allocate(t, newClient(t, turn.NewSTUNConn(tc), ln.Addr().String(), issue(t, "tls-viewer")))
	a := allocate(t, client(t, udp, issue(t, "computer")))
	if err := exchange(t, a, b, "over tls"); err != nil {
		t.Fatal(err)
	}
}

// TestPermissionRefused: a peer other than the server's own address is
// refused, and a packet toward a port of the relay address that is not a
// relay (another service on the host) never leaves.
func TestPermissionRefused(t *testing.T) {
	s, udp, _ := server(t, turnserver.Config{})
	cl := client(t, udp, issue(t, "viewer"))
	relay := allocate(t, cl)

	for _, peer := range []string{"127.0.0.2:9", "10.1.2.3:3478", "192.0.2.1:80"} {
		addr, _ := net.ResolveUDPAddr("udp4", peer)
		if err := cl.CreatePermission(addr); err == nil {
			t.Errorf("permission for %s granted; want refused", peer)
		}
	}
	if s.Denied() < 3 {
		t.Errorf("denied = %d, want at least 3", s.Denied())
	}

	// A UDP service on the relay's own IP but not a relay.
	svc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	before := s.Denied()
	for range 5 {
		relay.WriteTo([]byte("probe"), svc.LocalAddr())
		time.Sleep(20 * time.Millisecond)
	}
	svc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, _, err := svc.ReadFrom(make([]byte, 64)); err == nil {
		t.Fatalf("a non-relay service on the relay address got %d bytes", n)
	}
	if s.Denied() == before {
		t.Errorf("the dropped packets were not counted")
	}
}

// TestCredentialsRefused: expired, too long-lived, forged and malformed
// credentials get no allocation.
func TestCredentialsRefused(t *testing.T) {
	now := time.Now()
	fake := clock.NewFake(now)
	_, udp, _ := server(t, turnserver.Config{Clock: fake})

	expired, err := turnserver.Issue(secret, "old", now.Add(-2*time.Minute), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	forged := issue(t, "forged")
	forged.Password = "AAAAAAAAAAAAAAAAAAAAAAAAAAA="
	other, err := turnserver.Issue([]byte("another-secret-of-16+bytes"), "other", now, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// A username whose expiry lies far ahead, signed with the right secret
	// through pion's own generator.
	u, p, _ := turn.GenerateLongTermTURNRESTCredentials(string(secret), "far", time.Hour)
	far := turnserver.Credentials{Username: u, Password: p}
	for name, c := range map[string]turnserver.Credentials{
		"expired": expired, "forged": forged, "other secret": other, "beyond MaxTTL": far,
		"malformed": {Username: "no-expiry", Password: "x"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		if _, err := client(t, udp, c).AllocateWithContext(ctx); err == nil {
			t.Errorf("%s credentials got an allocation", name)
		}
		cancel()
	}

	// Valid ones work until the clock passes their expiry.
	c, err := turnserver.Issue(secret, "late", now, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	fake.Advance(31 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := client(t, udp, c).AllocateWithContext(ctx); err == nil {
		t.Errorf("credentials past their expiry got an allocation")
	}
}

// TestUserQuota: one credential id holds at most UserQuota allocations.
func TestUserQuota(t *testing.T) {
	_, udp, _ := server(t, turnserver.Config{UserQuota: 2})
	c := issue(t, "greedy")
	allocate(t, client(t, udp, c))
	allocate(t, client(t, udp, c))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := client(t, udp, c).AllocateWithContext(ctx); err == nil {
		t.Fatalf("a third allocation for the same user was granted; quota is 2")
	}
	// Another user is not affected.
	allocate(t, client(t, udp, issue(t, "modest")))
}

func TestIssue(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	c, err := turnserver.Issue(secret, "v1", now, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if c.Username != "1800000300:v1" {
		t.Errorf("username = %q", c.Username)
	}
	// The password is the one pion's TURN REST helper computes.
	u, p, _ := turn.GenerateLongTermTURNRESTCredentials(string(secret), "v1", time.Until(c.Expires))
	if u == c.Username && p != c.Password {
		t.Errorf("password %q differs from pion's %q", c.Password, p)
	}
	for _, tc := range []struct {
		id  string
		ttl time.Duration
		err error
	}{
		{"v", 11 * time.Minute, turnserver.ErrBadTTL},
		{"v", 0, turnserver.ErrBadTTL},
		{"a:b", time.Minute, turnserver.ErrBadID},
		{"", time.Minute, turnserver.ErrBadID},
	} {
		if _, err := turnserver.Issue(secret, tc.id, now, tc.ttl); !errors.Is(err, tc.err) {
			t.Errorf("Issue(%q, %v) = %v, want %v", tc.id, tc.ttl, err, tc.err)
		}
	}
	if _, err := turnserver.Issue([]byte("short"), "v", now, time.Minute); !errors.Is(err, turnserver.ErrBadSecret) {
		t.Errorf("short secret: %v", err)
	}
}

// selfSigned makes a certificate for 127.0.0.1 and a pool that trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "turn test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}
