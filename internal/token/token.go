// Package token derives and checks the per-computer secrets that Berth hands
// out: the token a computer's daemon accepts, and the credentials it uses at
// the egress proxy. Every one is an HMAC-SHA256 of COMPUTER_TOKEN_SECRET and
// the computer's id, so nothing per computer needs to be stored.
package token

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
)

// MinSecretLen is the shortest COMPUTER_TOKEN_SECRET accepted, in bytes.
const MinSecretLen = 32

// ErrShortSecret is returned when a secret is shorter than MinSecretLen.
var ErrShortSecret = errors.New("token: secret shorter than 32 bytes")

// Purpose separates the tokens derived for one computer.
type Purpose string

// The purposes tokens are derived for.
const (
	Computer Purpose = "computerd" // bearer token of the computer's daemon
	Egress   Purpose = "egress"    // password at the egress proxy
	View     Purpose = "view"      // live-view signalling
	Preview  Purpose = "preview"   // port preview links
)

// Deriver derives per-computer tokens from one secret.
type Deriver struct {
	secret []byte
}

// NewDeriver returns a Deriver for secret, which must be at least
// MinSecretLen bytes.
func NewDeriver(secret []byte) (*Deriver, error) {
	if len(secret) < MinSecretLen {
		return nil, ErrShortSecret
	}
	return &Deriver{secret: append([]byte(nil), secret...)}, nil
}

// Derive returns the token for the computer id and purpose.
func (d *Deriver) Derive(p Purpose, computerID string) string {
	m := hmac.New(sha256.New, d.secret)
	fmt.Fprintf(m, "berth/%s/%s", p, computerID)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Hash returns the hex SHA-256 of a token. A computer is given only the hash
// of its token, so that reading its own environment does not reveal it.
func Hash(tok string) string {
	h := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(h[:])
}

// Check reports whether presented hashes to wantHash, in constant time.
func Check(presented, wantHash string) bool {
	got := Hash(presented)
	return subtle.ConstantTimeCompare([]byte(got), []byte(wantHash)) == 1
}

// NewSecret returns a fresh random secret of n bytes, base64url encoded.
func NewSecret(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("token: random: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}
