package relayserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
)

// Lookup is the supervisor's RELAY_URL for several relays: each lender is
// reached through the relay that reports holding it, as the supervisor's
// store records it.
const Lookup = "lookup"

// Link is where a lender's link is: the relay that holds (or last held)
// it, and the lender's presence there, online while the relay's lease on
// it holds.
type Link struct {
	Relay    string
	Presence Presence
}

// Links looks up lenders' links, as relays reported them (the
// supervisor's store).
type Links interface {
	// Link returns the lender's link; ok is false for a lender no relay
	// has reported.
	Link(ctx context.Context, lenderID string) (l Link, ok bool, err error)
	// Links lists every lender's link.
	Links(ctx context.Context) ([]Link, error)
}

// Router reaches each lender through the relay that holds its link, found
// by lookup: the supervisor's side of several relays. Relays are reached
// over their internal APIs with the shared token, as Remote does.
type Router struct {
	links Links
	token string
	hc    *http.Client

	mu      sync.Mutex
	remotes map[string]*Remote
}

// NewRouter returns a Router over links; hc nil uses a client of its own.
func NewRouter(links Links, token string, hc *http.Client) (*Router, error) {
	if len(token) < 16 {
		return nil, errors.New("RELAY_TOKEN: must be at least 16 characters")
	}
	if hc == nil {
		hc = internalClient()
	}
	return &Router{links: links, token: token, hc: hc, remotes: make(map[string]*Remote)}, nil
}

func (r *Router) remote(base string) (*Remote, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rm := r.remotes[base]; rm != nil {
		return rm, nil
	}
	rm, err := NewRemote(base, r.token, r.hc)
	if err != nil {
		return nil, err
	}
	r.remotes[base] = rm
	return rm, nil
}

// Presence returns a lender's presence at the relay that holds its link;
// ok is false for a lender no relay has reported.
func (r *Router) Presence(ctx context.Context, lenderID string) (Presence, bool, error) {
	l, ok, err := r.links.Link(ctx, lenderID)
	if err != nil || !ok {
		return Presence{LenderID: lenderID}, false, err
	}
	return l.Presence, true, nil
}

// Lenders returns every lender some relay has reported.
func (r *Router) Lenders(ctx context.Context) ([]Presence, error) {
	ls, err := r.links.Links(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Presence, 0, len(ls))
	for _, l := range ls {
		out = append(out, l.Presence)
	}
	return out, nil
}

// Transport returns a RoundTripper that sends each request through the
// relay holding the lender's link when the request is made. A lender with
// no live link fails with an *OfflineError.
func (r *Router) Transport(lenderID string) http.RoundTripper {
	return routed{r: r, id: lenderID}
}

type routed struct {
	r  *Router
	id string
}

func (t routed) RoundTrip(req *http.Request) (*http.Response, error) {
	rm, err := t.r.relayOf(req.Context(), t.id)
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	return rm.Transport(t.id).RoundTrip(req)
}

// relayOf returns the relay holding the lender's live link.
func (r *Router) relayOf(ctx context.Context, lenderID string) (*Remote, error) {
	l, ok, err := r.links.Link(ctx, lenderID)
	if err != nil {
		return nil, fmt.Errorf("look up lender %s's relay: %w", lenderID, err)
	}
	if !ok || !l.Presence.Online {
		return nil, &OfflineError{LenderID: lenderID, LastSeen: l.Presence.LastSeen}
	}
	return r.remote(l.Relay)
}

// Drop closes the lender's link at the relay that holds it; it reports
// whether there was a live one.
func (r *Router) Drop(ctx context.Context, lenderID string) (bool, error) {
	rm, err := r.relayOf(ctx, lenderID)
	if oe := new(OfflineError); errors.As(err, &oe) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return rm.Drop(ctx, lenderID)
}
