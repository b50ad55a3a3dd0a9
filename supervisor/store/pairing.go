package store

import (
	"context"
	"errors"
	"time"
)

// ErrPairCode is returned by RedeemPairCode when the code is unknown,
// expired or already used.
var ErrPairCode = errors.New("pairing code unknown, expired or already used")

// PairCode is a one-time pairing code, kept only as the SHA-256 of the
// code (hex): the code itself is shown once, to the operator.
type PairCode struct {
	Hash string
	// Name is the name the operator gave the companion to be; the agent
	// may give another when it pairs.
	Name      string
	CreatedAt time.Time
	ExpiresAt time.Time
	UsedAt    time.Time // zero until the code is redeemed
	// LenderID is the lender (companion) the code was redeemed for.
	LenderID string
}

// Companion is a lender's machine paired with the supervisor: its agent
// authenticates with a token of which only the SHA-256 (hex) is kept.
type Companion struct {
	ID         string
	Name       string
	TokenHash  string
	CreatedAt  time.Time
	LastSeenAt time.Time // zero until the agent is first seen
}

// Pairing keeps pairing codes and companion agents; every Store
// implements it.
type Pairing interface {
	// CreatePairCode records a new code; ErrConflict when its hash exists.
	CreatePairCode(ctx context.Context, c PairCode) error
	// RedeemPairCode atomically marks the unused, unexpired (at now) code
	// with hash codeHash as used and records companion c; of concurrent
	// redeems of one code exactly one succeeds. When c.Name is empty the
	// code's name is used. It fails with ErrPairCode when the code is
	// unknown, expired or used, and records nothing then.
	RedeemPairCode(ctx context.Context, codeHash string, now time.Time, c Companion) (Companion, error)
	// GetCompanion returns a companion by id, or ErrNotFound.
	GetCompanion(ctx context.Context, id string) (Companion, error)
	// CompanionByTokenHash returns the companion whose token hashes to
	// tokenHash, or ErrNotFound.
	CompanionByTokenHash(ctx context.Context, tokenHash string) (Companion, error)
	// Companions lists every companion, oldest first.
	Companions(ctx context.Context) ([]Companion, error)
	// DeleteCompanion removes a companion, so that its token is refused;
	// ErrNotFound when there is none.
	DeleteCompanion(ctx context.Context, id string) error
}
