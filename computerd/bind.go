package computerd

import "context"

// A computer in a warm pool starts unbound: it knows only the SHA-256 of a
// one-time bind secret (EnvBindHash), and serves nothing but health and
// POST /v1/bind until a supervisor binds it to a session. The bind carries
// the session's token hash and the computer's environment; computerd takes
// exactly one bind and refuses every later one.

// EnvBindHash holds the hex SHA-256 of the computer's one-time bind secret.
// A computer started with it (and without EnvTokenHash) waits unbound.
const EnvBindHash = "BERTH_BIND_SHA256"

// MaxBindBytes bounds the body of a bind.
const MaxBindBytes = 64 << 10

// CodeAlreadyBound answers a bind to a computer that is bound already (409).
const CodeAlreadyBound = "already_bound"

// BindRequest binds a waiting computer to a session. It is sent with the
// bind secret as the bearer token.
type BindRequest struct {
	// TokenHash is the hex SHA-256 of the session's computer token; from
	// the bind on, it is the only token computerd accepts.
	TokenHash string `json:"tokenHash"`
	// Env is added to the environment of every command (the egress proxy
	// with the computer's own credentials, for instance).
	Env map[string]string `json:"env,omitempty"`
}

// BindResult answers a successful bind.
type BindResult struct {
	ComputerID string `json:"computerId,omitempty"`
}

// Bind binds a waiting computer. The client's token must be the bind
// secret; afterwards use a client with the session's token.
func (c *Client) Bind(ctx context.Context, req BindRequest) (BindResult, error) {
	var out BindResult
	err := c.call(ctx, "POST", "/v1/bind", nil, req, &out)
	return out, err
}
