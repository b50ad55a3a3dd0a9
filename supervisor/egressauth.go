package supervisor

import (
	"context"
	"crypto/subtle"
	"log/slog"
	"sync"
	"time"

	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/supervisor/store"
)

// Egress proxy credentials are a computer id and that computer's egress
// token, and hold only while the computer's session is live: a computer
// whose session has ended (a leftover not yet removed, a copy of its
// credentials elsewhere) is refused. The answer for a computer is kept for
// egressAuthTTL, so a session's end takes effect within that long, and the
// store is asked at most once per computer per TTL however busy the proxy.
const (
	egressAuthTTL  = 5 * time.Second
	egressAuthMax  = 65536 // remembered computers; the table is emptied past it
	egressAuthWait = 5 * time.Second
)

// EgressAuthOptions are what EgressAuth needs.
type EgressAuthOptions struct {
	Store  store.Store
	Clock  clock.Clock
	Logger *slog.Logger
	// Tokens derives each computer's egress token.
	Tokens *token.Deriver
}

// EgressAuth decides which computers may use the egress proxy.
type EgressAuth struct {
	st     store.Store
	clk    clock.Clock
	log    *slog.Logger
	tokens *token.Deriver

	mu   sync.Mutex
	seen map[string]egressVerdict // by computer id
}

// NewEgressAuth returns the egress proxy's check of opts.
func NewEgressAuth(opts EgressAuthOptions) *EgressAuth {
	return &EgressAuth{st: opts.Store, clk: opts.Clock, log: opts.Logger, tokens: opts.Tokens}
}

type egressVerdict struct {
	live bool
	at   time.Time
}

// Check checks egress proxy credentials: the user is a computer id, the
// password that computer's egress token, and the computer's session must
// be live.
func (a *EgressAuth) Check(user, pass string) (string, bool) {
	want := a.tokens.Derive(token.Egress, user)
	if user == "" || subtle.ConstantTimeCompare([]byte(pass), []byte(want)) != 1 {
		return user, false
	}
	return user, a.computerLive(user)
}

// computerLive reports whether computerID's session is live, from the
// store at most once per egressAuthTTL. A store that cannot answer is a no.
func (a *EgressAuth) computerLive(computerID string) bool {
	now := a.clk.Now()
	a.mu.Lock()
	v, ok := a.seen[computerID]
	a.mu.Unlock()
	if ok && now.Sub(v.at) < egressAuthTTL {
		return v.live
	}
	ctx, cancel := context.WithTimeout(context.Background(), egressAuthWait)
	defer cancel()
	_, err := a.st.LiveComputer(ctx, computerID)
	live := err == nil
	if err != nil && ctx.Err() != nil {
		a.log.Warn("egress proxy: the store did not answer whether a computer is live", "computer", computerID, "err", err)
	}
	a.mu.Lock()
	if a.seen == nil || len(a.seen) >= egressAuthMax {
		a.seen = map[string]egressVerdict{}
	}
	a.seen[computerID] = egressVerdict{live: live, at: now}
	a.mu.Unlock()
	return live
}

// EgressAuth checks egress proxy credentials; see EgressAuth.Check.
func (s *Service) EgressAuth(user, pass string) (string, bool) { return s.egress.Check(user, pass) }
