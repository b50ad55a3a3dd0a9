package secrets

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSealOpen(t *testing.T) {
	key, err := LoadOrCreateKeyFile(filepath.Join(t.TempDir(), "k", "secret.key"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewBox(key)
	if err != nil {
		t.Fatal(err)
	}
	pt := []byte(`{"apiKey":"sk-live-123"}`)
	s1, err := b.Seal(pt, "agent-1")
	if err != nil {
		t.Fatal(err)
	}
	s2, _ := b.Seal(pt, "agent-1")
	if s1 == s2 {
		t.Fatal("two seals of one value are equal: nonce reused")
	}
	if strings.Contains(s1, "sk-live") {
		t.Fatal("sealed value shows the plaintext")
	}
	got, err := b.Open(s1, "agent-1")
	if err != nil || !bytes.Equal(got, pt) {
		t.Fatalf("Open = %q, %v", got, err)
	}
	if _, err := b.Open(s1, "agent-2"); err != ErrOpen {
		t.Fatalf("open bound to another record: err = %v, want ErrOpen", err)
	}
	other, _ := NewBox(bytes.Repeat([]byte{7}, KeySize))
	if _, err := other.Open(s1, "agent-1"); err != ErrOpen {
		t.Fatalf("open with another key: err = %v, want ErrOpen", err)
	}
	if _, err := b.Open("AAAA", "agent-1"); err != ErrOpen {
		t.Fatalf("open garbage: err = %v", err)
	}
}

func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "secret.key")
	k1, err := LoadOrCreateKeyFile(p)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(p)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, want 0600", st.Mode().Perm())
	}
	k2, err := LoadOrCreateKeyFile(p)
	if err != nil || !bytes.Equal(k1, k2) {
		t.Fatalf("reload gave another key: %v", err)
	}
	os.Chmod(p, 0o644)
	if _, err := LoadOrCreateKeyFile(p); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("world-readable key accepted: %v", err)
	}
}

func TestSecretFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "s")
	a, err := LoadOrCreateSecretFile(p, 32)
	if err != nil || len(a) < 40 {
		t.Fatalf("secret %q, %v", a, err)
	}
	b, _ := LoadOrCreateSecretFile(p, 32)
	if a != b {
		t.Fatal("secret not kept")
	}
}
