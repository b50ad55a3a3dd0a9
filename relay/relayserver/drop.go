package relayserver

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/hashicorp/yamux"
)

// CloseReasonDuplicate is the websocket close reason a second link of a
// lender gets while its first link is live.
const CloseReasonDuplicate = "another link of this lender is live; only one link per lender is allowed"

// livenessProbe bounds the ping that tells a live first link from a dead
// one when a second link of the same lender arrives.
const livenessProbe = 3 * time.Second

// Drop closes the lender's link, if any, and marks it offline: its
// in-flight requests fail. It reports whether there was a link. A lender
// whose token still authenticates may link again; revoke the token first.
func (s *Server) Drop(lenderID string) bool {
	now := s.clock.Now()
	s.mu.Lock()
	a := s.lenders[lenderID]
	if a == nil || a.sess == nil {
		s.mu.Unlock()
		return false
	}
	sess := a.sess
	a.sess = nil
	a.pres.Online = false
	a.pres.LastSeen = now
	p := a.pres
	t := s.transports[lenderID]
	delete(s.transports, lenderID)
	s.mu.Unlock()
	sess.Close()
	if t != nil {
		t.CloseIdleConnections()
	}
	s.log.Info("agent link dropped", "agent", lenderID)
	s.report(p)
	return true
}

// live reports whether a lender's current link answers a ping; a link that
// does not is dead, and a new link may replace it.
func live(sess *yamux.Session) bool {
	if sess.IsClosed() {
		return false
	}
	done := make(chan error, 1)
	go func() {
		_, err := sess.Ping()
		done <- err
	}()
	select {
	case err := <-done:
		return err == nil
	case <-time.After(livenessProbe):
		return false
	}
}

// Drop asks the relay to drop a lender's link (DELETE
// /v1/internal/agents/{id}); it reports whether there was one.
func (r *Remote) Drop(ctx context.Context, lenderID string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, r.base+InternalPrefix+"/agents/"+url.PathEscape(lenderID), nil)
	if err != nil {
		return false, err
	}
	req.Header.Set(TokenHeader, r.token)
	resp, err := r.hc.Do(req)
	if err != nil {
		return false, fmt.Errorf("relay %s: %w", r.base, err)
	}
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return true, nil
	case http.StatusNotFound:
		return false, nil
	case http.StatusUnauthorized:
		return false, fmt.Errorf("relay %s refused RELAY_TOKEN", r.base)
	}
	return false, fmt.Errorf("relay %s answered %d", r.base, resp.StatusCode)
}
