package lender

import (
	"context"
	"time"

	"github.com/berthdev/berth/relay/relayclient"
)

// Serve connects to the relay with rc (its URL and token) and serves the
// lender's API on the link until ctx ends, reconnecting with relayclient's
// backoff. Computers keep running while the link is down; each time it
// comes back the running computers are checked against the engine.
func (l *Lender) Serve(ctx context.Context, rc relayclient.Config) error {
	rc.Handler = l.Handler()
	if rc.Logger == nil {
		rc.Logger = l.log
	}
	if rc.Version == "" {
		rc.Version = l.cfg.Version
	}
	l.mu.Lock()
	l.relay.URL = rc.URL
	l.mu.Unlock()
	onConnect, onDisconnect := rc.OnConnect, rc.OnDisconnect
	rc.OnConnect = func() {
		l.setRelay(true, nil)
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := l.Resync(rctx); err != nil {
			l.log.Warn("resync after reconnect", "err", err)
		}
		cancel()
		if onConnect != nil {
			onConnect()
		}
	}
	rc.OnDisconnect = func(err error) {
		l.setRelay(false, err)
		if onDisconnect != nil {
			onDisconnect(err)
		}
	}
	return relayclient.Run(ctx, rc)
}
