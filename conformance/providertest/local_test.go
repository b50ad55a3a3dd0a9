package providertest_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/agent/lender"
	"github.com/berthdev/berth/conformance/providertest"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/docker"
	"github.com/berthdev/berth/providers/local"
	"github.com/berthdev/berth/relay"
	"github.com/berthdev/berth/relay/relayserver"
)

// recordingLocal is the local provider, the computers it asked for
// remembered.
type recordingLocal struct {
	*local.Local
	computers
}

func (r *recordingLocal) Create(ctx context.Context, spec providers.Spec) (providers.Machine, error) {
	r.add(spec.ComputerID)
	return r.Local.Create(ctx, spec)
}

// TestLocal runs the suite against providers/local with a relay and a
// lending agent (`berth agent run`) in this process, the agent's
// computers on the real engine; faults are injected at the provider's
// boundary.
func TestLocal(t *testing.T) {
	cli, host := engine(t)
	providertest.Run(t, providertest.Harness{
		ID:           local.ID,
		ReadyTimeout: 60 * time.Second,
		New: func(t providertest.T, log *slog.Logger) providertest.Target {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			var b [6]byte
			rand.Read(b[:])
			// Its own id, so that another run's agent never takes its
			// computers for leftovers.
			lenderID := fmt.Sprintf("cp_conformance_%x", b)
			const agentToken = "conformance-agent-token"
			rlog := slog.New(slog.NewTextHandler(logTo{t}, nil)).With("side", "lender")
			rs := relayserver.New(relayserver.Config{Logger: rlog, Authenticate: func(tok string) (string, bool) {
				return lenderID, tok == agentToken
			}})
			mux := http.NewServeMux()
			mux.Handle(relay.ConnectPath, rs)
			rsrv := httptest.NewServer(mux)

			dir := t.TempDir()
			sock := filepath.Join(dir, control.SocketName)
			ready, done := make(chan *lender.Lender, 1), make(chan error, 1)
			go func() {
				done <- lender.RunAgent(ctx, lender.AgentOptions{
					LenderID: lenderID, Token: agentToken, RelayURL: "ws" + strings.TrimPrefix(rsrv.URL, "http") + relay.ConnectPath,
					DataDir: dir, Socket: sock,
					Docker: docker.Options{Host: host, HeadlessImage: dockerImage, DesktopImage: dockerImage},
					Egress: lender.EgressOptions{Listen: "off"},
					Logger: rlog, Version: "conformance",
					Ready: func(l *lender.Lender) { ready <- l },
				})
			}()
			p, err := local.New(local.Options{Relay: local.InProcess(rs), Logger: log})
			if err != nil {
				t.Fatalf("local provider: %v", err)
			}
			rec := &recordingLocal{Local: p}
			t.Cleanup(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("lending agent: %v", err)
				}
				rsrv.Close()
				rs.Close()
				d, err := docker.New(docker.Options{Host: host, HeadlessImage: dockerImage})
				if err != nil {
					t.Errorf("cleanup: %v", err)
					return
				}
				defer d.Close()
				rec.removeFrom(t, d)
			})
			select {
			case <-ready:
			case err := <-done:
				done <- err
				t.Fatalf("lending agent ended: %v", err)
			case <-ctx.Done():
				t.Fatalf("lending agent not ready")
			}
			owner := control.NewClient(sock)
			defer owner.Close()
			two, mem, none := 2, int64(512), 0
			if _, err := owner.UpdateSettings(ctx, control.SettingsUpdate{MaxComputers: &two, MemoryMB: &mem, WarmPoolSize: &none}); err != nil {
				t.Fatalf("owner settings: %v", err)
			}
			for {
				if pr, ok := rs.Presence(lenderID); ok && pr.Online {
					break
				}
				select {
				case <-ctx.Done():
					t.Fatalf("the lending agent did not come online at the relay")
				case <-time.After(50 * time.Millisecond):
				}
			}
			return providertest.Target{Provider: rec, Exists: engineExists(cli)}
		},
	})
}
