package daemon_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"
	_ "github.com/berthdev/berth/providers/fake"
	"github.com/berthdev/berth/supervisor/daemon"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

// selfSigned writes a certificate for 127.0.0.1 and its key to dir and
// returns their paths and a pool that trusts the certificate.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "berth test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

func tlsOptions(t *testing.T, certFile, keyFile string) daemon.Options {
	return daemon.Options{
		DataDir: t.TempDir(), Token: "tls-test-operator-token-0123456789",
		Providers: []string{"fake"}, DefaultProvider: "fake",
		Getenv:  func(string) string { return "" },
		Logger:  slog.New(slog.NewTextHandler(t.Output(), nil)),
		Egress:  daemon.EgressOptions{Listen: "off"},
		TLSCert: certFile, TLSKey: keyFile,
	}
}

func testContext(t *testing.T) context.Context {
	return testkit.ContextTimeout(t, 2*time.Minute)
}

// TestServeTLS: with a certificate and key the API answers over HTTPS
// only, and the URL it reports says https.
func TestServeTLS(t *testing.T) {
	ctx := testContext(t)
	certFile, keyFile, pool := selfSigned(t, t.TempDir())
	d, err := daemon.New(ctx, tlsOptions(t, certFile, keyFile))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	urls := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- d.ServeListener(sctx, ln, 5*time.Second, func(u string) { urls <- u }) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	var url string
	select {
	case url = <-urls:
	case err := <-done:
		t.Fatalf("serve ended before it was ready: %v", err)
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	if want := "https://" + ln.Addr().String(); url != want {
		t.Fatalf("ready URL = %q, want %q", url, want)
	}

	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	defer tr.CloseIdleConnections()
	get := func(c *http.Client, u string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		return resp, string(b)
	}
	resp, body := get(&http.Client{Transport: tr}, url+"/healthz")
	if resp.StatusCode != http.StatusOK || resp.TLS == nil || resp.TLS.Version < tls.VersionTLS12 {
		t.Fatalf("GET /healthz over https: %d %q (TLS %v), want 200 over TLS 1.2+", resp.StatusCode, body, resp.TLS)
	}

	plain := &http.Transport{}
	defer plain.CloseIdleConnections()
	resp, body = get(&http.Client{Transport: plain}, "http://"+ln.Addr().String()+"/healthz")
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "HTTP request to an HTTPS server") {
		t.Fatalf("GET /healthz over plain http: %d %q, want Go's 400 for HTTP to an HTTPS server", resp.StatusCode, body)
	}

	// TLS older than 1.2 is refused by the server (the client offers 1.0 and 1.1).
	old := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}}
	defer old.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(ctx, "GET", url+"/healthz", nil)
	if resp, err := (&http.Client{Transport: old}).Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("GET /healthz over TLS 1.1: %d, want a failed handshake", resp.StatusCode)
	}
}

// TestTLSFilesAtStart: a certificate or key that does not load stops New
// with an error naming the file; one without the other is refused.
func TestTLSFilesAtStart(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	certFile, keyFile, _ := selfSigned(t, dir)
	missing := filepath.Join(dir, "missing-key.pem")
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, cert, key, want string
	}{
		{"missing key", certFile, missing, missing},
		{"missing cert", filepath.Join(dir, "missing-cert.pem"), keyFile, "missing-cert.pem"},
		{"bad cert", garbage, keyFile, garbage},
		{"key alone", "", keyFile, "--tls-cert"},
		{"cert alone", certFile, "", "--tls-key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, err := daemon.New(ctx, tlsOptions(t, c.cert, c.key))
			if err == nil {
				d.Close()
				t.Fatalf("New with cert %q and key %q: no error", c.cert, c.key)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("New: %v, want an error naming %s", err, c.want)
			}
		})
	}
}
