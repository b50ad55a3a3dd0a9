package supervisor

import (
	"context"
	"crypto/subtle"
	"sync"
	"time"

	"github.com/berthdev/berth/internal/token"
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

type egressAuth struct {
	mu   sync.Mutex
	seen map[string]egressVerdict
}

type egressVerdict struct {
	live bool
	at   time.Time
}

// EgressAuth checks egress proxy credentials: the user is a computer id,
// the password that computer's egress token, and the computer's session
// must be live.
func (s *Service) EgressAuth(user, pass string) (string, bool) {
	want := s.cfg.Tokens.Derive(token.Egress, user)
	if user == "" || subtle.ConstantTimeCompare([]byte(pass), []byte(want)) != 1 {
		return user, false
	}
	return user, s.computerLive(user)
}

// computerLive reports whether computerID's session is live, from the
// store at most once per egressAuthTTL. A store that cannot answer is a no.
func (s *Service) computerLive(computerID string) bool {
	now := s.clk.Now()
	a := &s.egress
	a.mu.Lock()
	v, ok := a.seen[computerID]
	a.mu.Unlock()
	if ok && now.Sub(v.at) < egressAuthTTL {
		return v.live
	}
	ctx, cancel := context.WithTimeout(context.Background(), egressAuthWait)
	defer cancel()
	_, err := s.st.LiveComputer(ctx, computerID)
	live := err == nil
	if err != nil && ctx.Err() != nil {
		s.log.Warn("egress proxy: the store did not answer whether a computer is live", "computer", computerID, "err", err)
	}
	a.mu.Lock()
	if a.seen == nil || len(a.seen) >= egressAuthMax {
		a.seen = map[string]egressVerdict{}
	}
	a.seen[computerID] = egressVerdict{live: live, at: now}
	a.mu.Unlock()
	return live
}
