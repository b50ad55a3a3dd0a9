// Package supervisortest serves a real supervisor for the tests of the
// parts around it (the CLI, the MCP server, the companion app): its REST
// API on loopback, over a SQLite store in the test's folder, with the
// fake provider's computers (real computerd servers in the test's
// process) unless the test gives providers of its own, and archives of
// persistent computers sealed in a local object store.
package supervisortest

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/objstore"
	"github.com/berthdev/berth/internal/secrets"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/fake"
	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/apiserver"
	"github.com/berthdev/berth/supervisor/store"
	"github.com/berthdev/berth/supervisor/store/sqlstore"
)

// DefaultToken is the operator's token when Options.Token is empty.
const DefaultToken = "supervisortest-operator-token"

// Options change the supervisor Start serves.
type Options struct {
	// Token is the operator's bearer token (default DefaultToken).
	Token string
	// Providers replace the fake provider; DefaultProvider names the
	// default among them (default: the fake, or the only one given).
	Providers       map[string]providers.Provider
	DefaultProvider string
	// Logger gets the supervisor's log (default: discarded).
	Logger *slog.Logger
	// Configure, when set, changes the configuration last.
	Configure func(*supervisor.Config)
}

// Supervisor is a served supervisor.
type Supervisor struct {
	URL     string
	Token   string
	Service *supervisor.Service
	Store   store.Store
	// Tokens derives the computers' tokens, as the Service does.
	Tokens *token.Deriver
	// Fake is the fake provider, nil when Options.Providers replaced it.
	Fake *fake.Provider
}

// Start serves a supervisor until t ends.
func Start(t testing.TB, o Options) *Supervisor {
	t.Helper()
	dir := t.TempDir()
	parts := NewParts(t, dir)
	st, box, tokens := parts.Store, parts.Box, parts.Tokens
	local, err := objstore.NewLocal(filepath.Join(dir, "objects"))
	if err != nil {
		t.Fatal(err)
	}
	objects, err := objstore.NewEncrypted(local, box)
	if err != nil {
		t.Fatal(err)
	}
	s := &Supervisor{Token: o.Token, Store: st, Tokens: tokens}
	if s.Token == "" {
		s.Token = DefaultToken
	}
	provs, def := o.Providers, o.DefaultProvider
	if provs == nil {
		s.Fake = fake.New(filepath.Join(dir, "machines"), nil)
		provs, def = map[string]providers.Provider{fake.ID: s.Fake}, fake.ID
	} else if def == "" && len(provs) == 1 {
		for id := range provs {
			def = id
		}
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg := supervisor.Config{
		Store: st, Providers: provs, DefaultProvider: def, Box: box, Tokens: tokens, Logger: log,
		ReadyTimeout: 5 * time.Second, Objects: objects,
	}
	if o.Configure != nil {
		o.Configure(&cfg)
	}
	if s.Service, err = supervisor.New(cfg); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(apiserver.New(s.Service, s.Token, log))
	s.URL = srv.URL
	t.Cleanup(func() {
		srv.Close()
		if s.Fake != nil {
			s.Fake.Close()
		}
	})
	return s
}

// T is the part of testing.TB that NewParts uses.
type T interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// Parts are what a supervisor is made of besides its providers.
type Parts struct {
	// Store is the SQLite store dir/berth.db, closed when the test ends.
	Store store.Store
	// Box seals with the key kept in dir/secret.key.
	Box *secrets.Box
	// Tokens derives the computers' tokens.
	Tokens *token.Deriver
}

// NewParts opens the parts kept in dir: a second call on the same dir, as
// after a restart, finds the same store and key.
func NewParts(t T, dir string) Parts {
	t.Helper()
	st, err := sqlstore.OpenSQLite(context.Background(), filepath.Join(dir, "berth.db"))
	if err != nil {
		t.Fatalf("supervisortest: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	key, err := secrets.LoadOrCreateKeyFile(filepath.Join(dir, "secret.key"))
	if err != nil {
		t.Fatalf("supervisortest: %v", err)
	}
	box, err := secrets.NewBox(key)
	if err != nil {
		t.Fatalf("supervisortest: %v", err)
	}
	tokens, err := token.NewDeriver([]byte(strings.Repeat("t", token.MinSecretLen)))
	if err != nil {
		t.Fatalf("supervisortest: %v", err)
	}
	return Parts{Store: st, Box: box, Tokens: tokens}
}

// Agent creates agent (in workspace, when set) and, unless conn is nil,
// connects it as conn says (conn.Agent is set to agent).
func (s *Supervisor) Agent(t testing.TB, agent, workspace string, conn *supervisor.ConnectRequest) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.Service.CreateAgent(ctx, supervisor.CreateAgentRequest{ID: agent, Name: agent, Workspace: workspace}); err != nil {
		t.Fatal(err)
	}
	if conn == nil {
		return
	}
	c := *conn
	c.Agent = agent
	if _, err := s.Service.Connect(ctx, c); err != nil {
		t.Fatal(err)
	}
}
