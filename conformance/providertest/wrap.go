package providertest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/berthdev/berth/providers"
)

// wrapped is a provider with faults injected at its boundary.
type wrapped struct {
	p providers.Provider

	mu          sync.Mutex
	loseReplies int
	failDeletes int
}

// Wrap returns p with faults injected at its boundary, and the Faults
// that drive them: a create runs on the backend and its reply is dropped,
// a delete fails before it reaches the backend. The result keeps p's
// Lister and Transporter abilities; it is not a CredentialChecker, so it
// suits providers that take no credentials (RefuseCredentials does
// nothing).
func Wrap(p providers.Provider) (providers.Provider, Faults) {
	w := &wrapped{p: p}
	if t, ok := p.(providers.Transporter); ok {
		return transporting{w, t}, w
	}
	return w, w
}

// transporting is a wrapped Transporter.
type transporting struct {
	*wrapped
	t providers.Transporter
}

// Transport implements providers.Transporter.
func (w transporting) Transport(m providers.Machine, credentials map[string]string) http.RoundTripper {
	return w.t.Transport(m, credentials)
}

// LoseNextCreateReply implements Faults.
func (w *wrapped) LoseNextCreateReply() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.loseReplies++
}

// FailNextDeletes implements Faults.
func (w *wrapped) FailNextDeletes(n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failDeletes += n
}

// RefuseCredentials implements Faults; at the boundary it can do nothing,
// so Wrap suits only providers that take no credentials.
func (w *wrapped) RefuseCredentials(on bool) {}

// Create implements providers.Provider.
func (w *wrapped) Create(ctx context.Context, spec providers.Spec) (providers.Machine, error) {
	w.mu.Lock()
	lose := w.loseReplies > 0
	if lose {
		w.loseReplies--
	}
	w.mu.Unlock()
	m, err := w.p.Create(ctx, spec)
	if err == nil && lose {
		return providers.Machine{}, errors.New("create: connection reset before the reply (injected)")
	}
	return m, err
}

// Destroy implements providers.Provider.
func (w *wrapped) Destroy(ctx context.Context, machineID string) error {
	w.mu.Lock()
	fail := w.failDeletes > 0
	if fail {
		w.failDeletes--
	}
	w.mu.Unlock()
	if fail {
		return fmt.Errorf("destroy %s: %w (injected)", machineID, providers.ErrUnavailable)
	}
	return w.p.Destroy(ctx, machineID)
}

// List implements providers.Lister when the wrapped provider does; it
// answers nothing otherwise.
func (w *wrapped) List(ctx context.Context) ([]providers.Machine, error) {
	if l, ok := w.p.(providers.Lister); ok {
		return l.List(ctx)
	}
	return nil, nil
}

var (
	_ providers.Provider    = (*wrapped)(nil)
	_ providers.Lister      = (*wrapped)(nil)
	_ providers.Transporter = transporting{}
	_ Faults                = (*wrapped)(nil)
)
