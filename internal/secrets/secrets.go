// Package secrets seals connection credentials at rest with AES-256-GCM.
// The key lives outside the database: in a 0600 key file (created on first
// use) or, where one works, the OS keyring. A sealed value carries a version
// byte and a random nonce, and is bound to the record it belongs to through
// the additional data, so a sealed value moved to another record fails to open.
package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// KeySize is the AES-256 key size in bytes.
const KeySize = 32

const version byte = 1

// ErrOpen is returned when a sealed value cannot be opened (wrong key,
// corrupted, or bound to another record).
var ErrOpen = errors.New("secrets: cannot open sealed value")

// Box seals and opens values with one key.
type Box struct {
	aead cipher.AEAD
}

// NewBox returns a Box for a KeySize-byte key.
func NewBox(key []byte) (*Box, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("secrets: key is %d bytes, want %d", len(key), KeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Box{aead: aead}, nil
}

// Seal encrypts plaintext bound to the record named by ad and returns
// printable text.
func (b *Box) Seal(plaintext []byte, ad string) (string, error) {
	nonce := make([]byte, b.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("secrets: nonce: %w", err)
	}
	out := append([]byte{version}, nonce...)
	out = b.aead.Seal(out, nonce, plaintext, []byte(ad))
	return base64.RawStdEncoding.EncodeToString(out), nil
}

// Open decrypts a value made by Seal with the same ad.
func (b *Box) Open(sealed string, ad string) ([]byte, error) {
	raw, err := base64.RawStdEncoding.DecodeString(sealed)
	ns := b.aead.NonceSize()
	if err != nil || len(raw) < 1+ns+b.aead.Overhead() || raw[0] != version {
		return nil, ErrOpen
	}
	pt, err := b.aead.Open(nil, raw[1:1+ns], raw[1+ns:], []byte(ad))
	if err != nil {
		return nil, ErrOpen
	}
	return pt, nil
}

// LoadOrCreateKeyFile reads the key in path, creating it with a fresh
// random key (mode 0600, parent folder 0700) when it does not exist. A key
// file readable by others is refused.
func LoadOrCreateKeyFile(path string) ([]byte, error) {
	key, err := readKeyFile(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return key, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("secrets: key folder: %w", err)
	}
	key = make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return readKeyFile(path) // another process made it first
	}
	if err != nil {
		return nil, fmt.Errorf("secrets: create key file: %w", err)
	}
	if _, err := f.WriteString(base64.StdEncoding.EncodeToString(key) + "\n"); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("secrets: write key file: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, err
	}
	return key, f.Close()
}

func readKeyFile(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("secrets: key file %s has mode %v; it must be readable by its owner only (chmod 600)", path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(key) != KeySize {
		return nil, fmt.Errorf("secrets: key file %s does not hold a base64 %d-byte key", path, KeySize)
	}
	return key, nil
}

// LoadOrCreateSecretFile reads a printable secret from path, creating it
// with n random bytes (base64url) when missing. It is used for
// COMPUTER_TOKEN_SECRET and SUPERVISOR_TOKEN when they are not set.
func LoadOrCreateSecretFile(path string, n int) (string, error) {
	if st, err := os.Stat(path); err == nil {
		if st.Mode().Perm()&0o077 != 0 {
			return "", fmt.Errorf("secrets: %s has mode %v; chmod 600 it", path, st.Mode().Perm())
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(string(b)), nil
	}
	buf := make([]byte, n)
	if _, err := rand.Read(buf); err != nil {
		return "", err
	}
	v := base64.RawURLEncoding.EncodeToString(buf)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return LoadOrCreateSecretFile(path, n)
	}
	if err != nil {
		return "", err
	}
	if _, err := f.WriteString(v + "\n"); err != nil {
		f.Close()
		return "", err
	}
	return v, f.Close()
}
