package agentlink

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/berthdev/berth/agent/credstore"
	"github.com/berthdev/berth/api"
)

// Paired is the outcome of a pairing: the machine's agent id at the
// supervisor and where its token was kept. The token itself is not part
// of it.
type Paired struct {
	LenderID      string
	SupervisorURL string
	// RelayURL is the relay the supervisor named, if any.
	RelayURL string
	// StoredIn is credstore.InKeyring or credstore.InFile.
	StoredIn string
}

// Pair exchanges a one-time pairing code at the supervisor for this
// machine's agent id and token, and keeps them in store. Nothing is stored
// when the supervisor refuses.
func Pair(ctx context.Context, store *credstore.Store, supervisorURL, code, name, userAgent string) (Paired, error) {
	supervisorURL = strings.TrimSpace(supervisorURL)
	code = strings.TrimSpace(code)
	if supervisorURL == "" {
		return Paired{}, errors.New("supervisor URL: required, like https://berth.example.com")
	}
	if code == "" {
		return Paired{}, errors.New("pairing code: required, like ABCD-EFGH-JK")
	}
	c, err := api.New(supervisorURL, "", api.WithUserAgent(userAgent))
	if err != nil {
		return Paired{}, fmt.Errorf("supervisor URL: %w", err)
	}
	return PairWith(ctx, c, store, code, name)
}

// PairWith is Pair through a client of the supervisor (berth agent pair
// uses it too): the agent id, token and the relay the supervisor names are
// kept in store.
func PairWith(ctx context.Context, c *api.Client, store *credstore.Store, code, name string) (Paired, error) {
	p, err := c.Pair(ctx, code, name)
	if err != nil {
		return Paired{}, fmt.Errorf("pair: %w", err)
	}
	where, err := store.Save(credstore.Credentials{LenderID: p.LenderID, Token: p.Token, SupervisorURL: c.BaseURL(), RelayURL: p.RelayURL})
	if err != nil {
		return Paired{}, fmt.Errorf("paired as companion %s, but could not keep its token: %w (pair again with a new code)", p.LenderID, err)
	}
	return Paired{LenderID: p.LenderID, SupervisorURL: c.BaseURL(), RelayURL: p.RelayURL, StoredIn: where}, nil
}
