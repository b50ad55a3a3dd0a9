package api

import (
	"context"
	"net/http"
	"time"
)

// CreatePairCodeRequest is the optional body of POST
// /v1/companions/pair-codes.
type CreatePairCodeRequest struct {
	// Name is the companion's name unless the agent gives one.
	Name string `json:"name,omitempty"`
}

// PairRequest is the body of POST /v1/companions/pair.
type PairRequest struct {
	Code string `json:"code"`
	Name string `json:"name,omitempty"`
}

// PairCode is a one-time pairing code and when it expires.
type PairCode struct {
	Code      string    `json:"code"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// Paired is a lender's (companion's) id and token, as pairing returns
// them; the id is "agentId" on the wire, as companions paired before read
// it.
type Paired struct {
	LenderID string `json:"agentId"`
	Token    string `json:"token"`
	// RelayURL is the relay the agent connects to; empty when the
	// supervisor has none.
	RelayURL string `json:"relayUrl,omitempty"`
}

// CreatePairCode asks for a one-time pairing code (operator token); name,
// when set, names the companion to be.
func (c *Client) CreatePairCode(ctx context.Context, name string) (*PairCode, error) {
	var out PairCode
	in := CreatePairCodeRequest{Name: name}
	if err := c.do(ctx, request{method: http.MethodPost, path: "/v1/companions/pair-codes", in: in, out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
}

// Pair exchanges a pairing code for a companion agent's id and token. It
// sends no operator token: the code is the credential. A code is good for
// one exchange, so the call is not repeated once it may have reached the
// supervisor.
func (c *Client) Pair(ctx context.Context, code, name string) (*Paired, error) {
	var out Paired
	in := PairRequest{Code: code, Name: name}
	if err := c.do(ctx, request{method: http.MethodPost, path: "/v1/companions/pair", in: in, out: &out, noAuth: true}); err != nil {
		return nil, err
	}
	return &out, nil
}
