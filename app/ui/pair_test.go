package ui

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/supervisor/supervisortest"

	"fyne.io/fyne/v2/test"
	"github.com/zalando/go-keyring"

	"github.com/berthdev/berth/agent/credstore"
	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/app/agentlink"
)

const opToken = "operator-token-0123456789"

// newSupervisor serves a real supervisor API (SQLite store, fake
// provider) on loopback.
func newSupervisor(t *testing.T) *supervisortest.Supervisor {
	t.Helper()
	return supervisortest.Start(t, supervisortest.Options{Token: opToken, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
}

func TestPair(t *testing.T) {
	keyring.MockInitWithError(errors.New("dbus: no secret service"))
	srv := newSupervisor(t)
	op, err := api.New(srv.URL, opToken)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	code, err := op.CreatePairCode(ctx, "lab laptop")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	store, err := credstore.New(credstore.WithDir(dir), credstore.FileOnly())
	if err != nil {
		t.Fatal(err)
	}
	pair := func(ctx context.Context, url, code, name string) (agentlink.Paired, error) {
		return agentlink.Pair(ctx, store, url, code, name, "berth-companion/test")
	}
	h := newHarness(t, baseAgent(t), Options{Pair: pair})
	v := h.ui.settings

	// A wrong code is refused plainly and nothing is stored.
	test.Type(v.pairURL, srv.URL)
	test.Type(v.pairCode, "AAAA-BBBB-CC")
	test.Tap(v.pair)
	h.settle()
	if want := "Pairing failed: pair: pairing code unknown, expired or already used"; !strings.HasPrefix(v.pairOut.Text, want) {
		t.Errorf("result = %q, want it to start %q", v.pairOut.Text, want)
	}
	if _, err := store.Load(); !errors.Is(err, credstore.ErrNotFound) {
		t.Fatalf("credentials after a refused code: %v", err)
	}

	v.pairCode.SetText("")
	test.Type(v.pairCode, code.Code)
	test.Tap(v.pair)
	h.settle()
	got, err := store.Load()
	if err != nil {
		t.Fatalf("no credentials stored: %v (result %q)", err, v.pairOut.Text)
	}
	if got.SupervisorURL != srv.URL || got.LenderID == "" || got.Token == "" {
		t.Errorf("stored %+v", got)
	}
	want := "Paired as companion " + got.LenderID + " with " + srv.URL + ". Its token is kept in an encrypted file (no system keyring here)."
	if v.pairOut.Text != want {
		t.Errorf("result = %q, want %q", v.pairOut.Text, want)
	}
	if strings.Contains(v.pairOut.Text, got.Token) {
		t.Error("the token is shown")
	}
	if v.pairCode.Text != "" {
		t.Error("the used code stays in its field")
	}
	if fi, err := os.Stat(filepath.Join(dir, credstore.FileName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("credentials file: %v, %v", fi, err)
	}
}

func TestPairNeedsFields(t *testing.T) {
	store, _ := credstore.New(credstore.WithDir(t.TempDir()), credstore.FileOnly())
	for _, c := range []struct{ url, code, want string }{
		{"", "ABCD-EFGH-JK", "supervisor URL: required"},
		{"https://berth.example.com", "", "pairing code: required"},
		{"ftp://berth.example.com", "ABCD-EFGH-JK", "supervisor URL: client: supervisor URL"},
	} {
		_, err := agentlink.Pair(t.Context(), store, c.url, c.code, "", "test")
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("Pair(%q, %q) = %v, want %q...", c.url, c.code, err, c.want)
		}
	}
}
