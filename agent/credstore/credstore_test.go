package credstore_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/zalando/go-keyring"

	"github.com/berthdev/berth/agent/credstore"
)

// The keyring mock is process-wide: these tests do not run in parallel.

var creds = credstore.Credentials{LenderID: "cp_abc", Token: "tok-secret-0123456789", SupervisorURL: "http://127.0.0.1:8080"}

func newStore(t *testing.T, opts ...credstore.Option) (*credstore.Store, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "berth")
	s, err := credstore.New(append([]credstore.Option{credstore.WithDir(dir)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s, dir
}

func TestKeyring(t *testing.T) {
	keyring.MockInit()
	s, dir := newStore(t)
	if _, err := s.Load(); !errors.Is(err, credstore.ErrNotFound) {
		t.Fatalf("load from empty store: %v, want ErrNotFound", err)
	}
	where, err := s.Save(creds)
	if err != nil || where != credstore.InKeyring {
		t.Fatalf("save: %q, %v; want the keyring", where, err)
	}
	if _, err := os.Stat(filepath.Join(dir, credstore.FileName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file was written although the keyring works: %v", err)
	}
	got, err := s.Load()
	if err != nil || got != creds {
		t.Fatalf("load = %+v, %v", got, err)
	}
	if err := s.Delete(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(); !errors.Is(err, credstore.ErrNotFound) {
		t.Errorf("load after delete: %v, want ErrNotFound", err)
	}
}

func checkFile(t *testing.T, dir string) {
	t.Helper()
	for _, name := range []string{credstore.FileName, credstore.KeyName} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", name, fi.Mode().Perm())
		}
	}
	raw, _ := os.ReadFile(filepath.Join(dir, credstore.FileName))
	if bytes.Contains(raw, []byte(creds.Token)) || bytes.Contains(raw, []byte(creds.LenderID)) {
		t.Errorf("the credentials file holds the credentials in clear")
	}
}

func TestFallbackWhenKeyringFails(t *testing.T) {
	keyring.MockInitWithError(errors.New("dbus: no secret service"))
	s, dir := newStore(t)
	if _, err := s.Load(); !errors.Is(err, credstore.ErrNotFound) {
		t.Fatalf("load from empty store: %v, want ErrNotFound", err)
	}
	where, err := s.Save(creds)
	if err != nil || where != credstore.InFile {
		t.Fatalf("save: %q, %v; want the file", where, err)
	}
	checkFile(t, dir)
	got, err := s.Load()
	if err != nil || got != creds {
		t.Fatalf("load = %+v, %v", got, err)
	}

	// Saved again, with the same key, then read by a new Store.
	next := creds
	next.Token = "tok-second"
	if _, err := s.Save(next); err != nil {
		t.Fatal(err)
	}
	s2, err := credstore.New(credstore.WithDir(dir), credstore.FileOnly())
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s2.Load(); err != nil || got != next {
		t.Fatalf("load by another store = %+v, %v", got, err)
	}

	// A keyring that works again later still finds the file.
	keyring.MockInit()
	if got, err := s.Load(); err != nil || got != next {
		t.Fatalf("load with a working, empty keyring = %+v, %v", got, err)
	}
	// Saving there moves the credentials to the keyring and drops the file.
	if where, err := s.Save(next); err != nil || where != credstore.InKeyring {
		t.Fatalf("save: %q, %v", where, err)
	}
	if _, err := os.Stat(filepath.Join(dir, credstore.FileName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale file kept: %v", err)
	}
}

func TestFileOnly(t *testing.T) {
	keyring.MockInit()
	s, dir := newStore(t, credstore.FileOnly())
	if where, err := s.Save(creds); err != nil || where != credstore.InFile {
		t.Fatalf("save: %q, %v", where, err)
	}
	checkFile(t, dir)
	if _, err := keyring.Get(credstore.Service, credstore.User); !errors.Is(err, keyring.ErrNotFound) {
		t.Errorf("FileOnly wrote to the keyring: %v", err)
	}

	// A tampered file is refused.
	p := filepath.Join(dir, credstore.FileName)
	raw, _ := os.ReadFile(p)
	raw[len(raw)-1] ^= 1
	os.WriteFile(p, raw, 0o600)
	if _, err := s.Load(); err == nil || errors.Is(err, credstore.ErrNotFound) {
		t.Errorf("load of a tampered file: %v, want a decryption error", err)
	}
	if err := s.Delete(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(); !errors.Is(err, credstore.ErrNotFound) {
		t.Errorf("load after delete: %v", err)
	}
}
