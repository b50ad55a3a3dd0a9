package incus

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/berthdev/berth/providers"
)

// selfSigned makes a certificate and key, written as PEM files in dir.
func selfSigned(t *testing.T, dir, name string, server bool) (certFile, keyFile string, cert tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		BasicConstraintsValid: true, IsCA: server}
	if server {
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	cert, err = tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, cert
}

// TestTLSClientCertificate reaches Incus over HTTPS with a client
// certificate, as a remote Incus is reached: the server's certificate is
// checked against INCUS_CA_FILE, and a client certificate the server does
// not trust gets 403 (Incus's answer for an untrusted client), which is
// refused credentials.
func TestTLSClientCertificate(t *testing.T) {
	f := newFakeIncus(t)
	dir := t.TempDir()
	caFile, _, serverCert := selfSigned(t, dir, "server", true)
	certFile, keyFile, clientCert := selfSigned(t, dir, "client", false)
	otherCert, otherKey, _ := selfSigned(t, dir, "other", false)
	trusted := sha256.Sum256(clientCert.Certificate[0])

	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TLS.PeerCertificates) == 0 || sha256.Sum256(r.TLS.PeerCertificates[0].Raw) != trusted {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(403)
			w.Write([]byte(`{"type":"error","error":"not authorized","error_code":403}`))
			return
		}
		f.ServeHTTP(w, r)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientAuth: tls.RequireAnyClientCert, MinVersion: tls.VersionTLS12}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake below
	srv.StartTLS()
	defer srv.Close()

	p, err := New(Options{URL: srv.URL, ClientCert: certFile, ClientKey: keyFile, CAFile: caFile, Registry: "https://registry.example",
		Project: "berth", PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	m, err := p.Create(t.Context(), spec())
	if err != nil {
		t.Fatalf("create over TLS: %v", err)
	}
	if ms, err := p.List(t.Context()); err != nil || len(ms) != 1 {
		t.Errorf("List = %v, %v", ms, err)
	}
	if err := p.Destroy(t.Context(), m.ID); err != nil {
		t.Fatal(err)
	}

	other, err := New(Options{URL: srv.URL, ClientCert: otherCert, ClientKey: otherKey, CAFile: caFile, Registry: "https://registry.example"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.List(t.Context()); !errors.Is(err, providers.ErrBadCredentials) {
		t.Errorf("untrusted client certificate: %v, want ErrBadCredentials", err)
	}
	// Without the CA the server's certificate is not trusted.
	noCA, _ := New(Options{URL: srv.URL, ClientCert: certFile, ClientKey: keyFile, Registry: "https://registry.example"})
	if _, err := noCA.List(t.Context()); !errors.Is(err, providers.ErrUnavailable) {
		t.Errorf("unknown server certificate: %v, want ErrUnavailable", err)
	}
}
