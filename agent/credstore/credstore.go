// Package credstore keeps a paired agent's credentials (its agent id, token
// and supervisor URL) in the OS keyring, and, where no keyring works (a
// headless machine without a secret service), in an AES-GCM encrypted file
// in the user's config directory whose key sits beside it; both files are
// readable by the owner only.
package credstore

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/zalando/go-keyring"
)

// ErrNotFound is returned by Load when no credentials are stored.
var ErrNotFound = errors.New("credstore: no agent credentials stored (run berth agent pair)")

// Keyring entry and file names.
const (
	Service  = "berth-agent"
	User     = "credentials"
	FileName = "agent-credentials.enc"
	KeyName  = "agent-credentials.key"
	aad      = "berth agent credentials v1"
)

// Where credentials were stored.
const (
	InKeyring = "keyring"
	InFile    = "file"
)

// Credentials are what an agent needs to reach its supervisor.
type Credentials struct {
	LenderID      string `json:"agentId"`
	Token         string `json:"token"`
	SupervisorURL string `json:"supervisorUrl"`
	// RelayURL is the relay the supervisor named at pairing.
	RelayURL string `json:"relayUrl,omitempty"`
}

// Store keeps Credentials.
type Store struct {
	dir      string
	fileOnly bool
}

// Option configures a Store.
type Option func(*Store)

// WithDir keeps the fallback file in dir instead of the user's config
// directory.
func WithDir(dir string) Option { return func(s *Store) { s.dir = dir } }

// FileOnly skips the keyring and uses the encrypted file.
func FileOnly() Option { return func(s *Store) { s.fileOnly = true } }

// New returns a Store; without WithDir its file fallback lives in
// os.UserConfigDir()/berth.
func New(opts ...Option) (*Store, error) {
	s := &Store{}
	for _, o := range opts {
		o(s)
	}
	if s.dir == "" {
		base, err := os.UserConfigDir()
		if err != nil {
			return nil, fmt.Errorf("credstore: %w", err)
		}
		s.dir = filepath.Join(base, "berth")
	}
	return s, nil
}

// Dir returns the directory of the file fallback.
func (s *Store) Dir() string { return s.dir }

// Save stores c in the keyring, or in the encrypted file when the keyring
// fails; it returns InKeyring or InFile.
func (s *Store) Save(c Credentials) (string, error) {
	raw, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	if !s.fileOnly {
		if err := keyring.Set(Service, User, string(raw)); err == nil {
			// A file left from an earlier fallback would be stale.
			if err := s.removeFile(); err != nil {
				return "", err
			}
			return InKeyring, nil
		}
	}
	if err := s.writeFile(raw); err != nil {
		return "", err
	}
	return InFile, nil
}

// Load returns the stored credentials, from the keyring or else the file,
// or ErrNotFound.
func (s *Store) Load() (Credentials, error) {
	var c Credentials
	if !s.fileOnly {
		v, err := keyring.Get(Service, User)
		if err == nil {
			if err := json.Unmarshal([]byte(v), &c); err != nil {
				return c, fmt.Errorf("credstore: keyring entry: %w", err)
			}
			return c, nil
		}
		// ErrNotFound or a broken keyring: the file may hold them.
	}
	raw, err := s.readFile()
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return c, fmt.Errorf("credstore: %s: %w", s.path(FileName), err)
	}
	return c, nil
}

// Delete removes stored credentials from the keyring and the file.
func (s *Store) Delete() error {
	if !s.fileOnly {
		// A missing entry, or a keyring that does not work, holds nothing
		// of ours.
		_ = keyring.Delete(Service, User)
	}
	return s.removeFile()
}

func (s *Store) path(name string) string { return filepath.Join(s.dir, name) }

func (s *Store) removeFile() error {
	for _, name := range []string{FileName, KeyName} {
		if err := os.Remove(s.path(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("credstore: %w", err)
		}
	}
	return nil
}

func (s *Store) writeFile(plain []byte) error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("credstore: %w", err)
	}
	key, err := s.key(true)
	if err != nil {
		return err
	}
	aead, err := newAEAD(key)
	if err != nil {
		return err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return fmt.Errorf("credstore: random: %w", err)
	}
	return writeAtomic(s.path(FileName), aead.Seal(nonce, nonce, plain, []byte(aad)))
}

func (s *Store) readFile() ([]byte, error) {
	sealed, err := os.ReadFile(s.path(FileName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("credstore: %w", err)
	}
	key, err := s.key(false)
	if err != nil {
		return nil, err
	}
	aead, err := newAEAD(key)
	if err != nil {
		return nil, err
	}
	if len(sealed) < aead.NonceSize() {
		return nil, fmt.Errorf("credstore: %s: too short", s.path(FileName))
	}
	plain, err := aead.Open(nil, sealed[:aead.NonceSize()], sealed[aead.NonceSize():], []byte(aad))
	if err != nil {
		return nil, fmt.Errorf("credstore: %s: cannot decrypt with %s: %w", s.path(FileName), s.path(KeyName), err)
	}
	return plain, nil
}

// key reads the file key, creating it when create is set and it is missing.
func (s *Store) key(create bool) ([]byte, error) {
	p := s.path(KeyName)
	key, err := os.ReadFile(p)
	switch {
	case err == nil && len(key) == 32:
		return key, nil
	case err == nil:
		return nil, fmt.Errorf("credstore: %s: want 32 bytes, have %d", p, len(key))
	case !errors.Is(err, fs.ErrNotExist) || !create:
		return nil, fmt.Errorf("credstore: %w", err)
	}
	key = make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("credstore: random: %w", err)
	}
	if err := writeAtomic(p, key); err != nil {
		return nil, err
	}
	return key, nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("credstore: %w", err)
	}
	return cipher.NewGCM(block)
}

// writeAtomic writes data to path with mode 0600 through a temporary file.
func writeAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("credstore: %w", err)
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("credstore: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("credstore: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("credstore: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("credstore: %w", err)
	}
	return nil
}
