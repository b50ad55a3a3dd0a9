package supervisor

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/supervisor/store"
)

// CodePairInvalid answers (403) a pairing code that is unknown, expired or
// already used; the three are not told apart.
const CodePairInvalid = "pair_code_invalid"

// Pairing (SPEC section 9).
const (
	// PairCodeTTL is how long a pairing code can be redeemed.
	PairCodeTTL = 10 * time.Minute
	// PairCodeLen is the number of characters of a pairing code.
	PairCodeLen = 10
	// pairCodeAlphabet has no 0/O, 1/I/L or U, so that a code read aloud
	// or typed from a screen comes through.
	pairCodeAlphabet = "ABCDEFGHJKMNPQRSTVWXYZ23456789"
	// CompanionTokenBytes is the size of a companion agent's token.
	CompanionTokenBytes = 32
	defaultCompanion    = "companion"
)

// CreatePairCodeRequest is the optional body of POST /v1/companions/pair-codes.
type CreatePairCodeRequest = api.CreatePairCodeRequest

// PairCode is a new one-time pairing code, shown once.
type PairCode = api.PairCode

// PairRequest is the body of POST /v1/companions/pair.
type PairRequest = api.PairRequest

// Paired is the answer to a pairing: the companion agent's id and the token
// it authenticates with, shown once.
type Paired = api.Paired

// PairingOptions are what Pairing needs.
type PairingOptions struct {
	Store  store.Store
	Clock  clock.Clock
	Logger *slog.Logger
	// RelayURL is given to each agent that pairs (empty when no relay is
	// configured).
	RelayURL string
}

// Pairing pairs lenders' agents (SPEC section 9): it makes one-time
// pairing codes, redeems them for companion tokens, and authenticates
// those tokens.
type Pairing struct {
	st       store.Store
	clk      clock.Clock
	log      *slog.Logger
	relayURL string
}

// NewPairing returns the pairing of opts.
func NewPairing(opts PairingOptions) *Pairing {
	return &Pairing{st: opts.Store, clk: opts.Clock, log: opts.Logger, relayURL: opts.RelayURL}
}

// CreatePairCode makes a one-time pairing code that a lender's agent
// exchanges for a token with Pair, within PairCodeTTL. Only the code's hash
// is stored.
func (s *Pairing) CreatePairCode(ctx context.Context, r CreatePairCodeRequest) (PairCode, error) {
	name, err := companionName(r.Name)
	if err != nil {
		return PairCode{}, err
	}
	code, err := newPairCode()
	if err != nil {
		return PairCode{}, err
	}
	now := s.clk.Now().UTC()
	pc := store.PairCode{Hash: token.Hash(normalizePairCode(code)), Name: name, CreatedAt: now, ExpiresAt: now.Add(PairCodeTTL)}
	if err := s.st.CreatePairCode(ctx, pc); err != nil {
		return PairCode{}, fmt.Errorf("create pairing code: %w", err)
	}
	s.log.Info("pairing code created", "name", name, "expiresAt", pc.ExpiresAt)
	return PairCode{Code: code, ExpiresAt: pc.ExpiresAt}, nil
}

// Pair redeems a pairing code once: it registers a companion agent and
// returns its id and a fresh token, of which only the hash is stored.
func (s *Pairing) Pair(ctx context.Context, r PairRequest) (Paired, error) {
	code := normalizePairCode(r.Code)
	if code == "" {
		return Paired{}, badRequest("code: required")
	}
	var name string
	if strings.TrimSpace(r.Name) != "" {
		var err error
		if name, err = companionName(r.Name); err != nil {
			return Paired{}, err
		}
	}
	tok, err := token.NewSecret(CompanionTokenBytes)
	if err != nil {
		return Paired{}, err
	}
	now := s.clk.Now().UTC()
	c := store.Companion{ID: newID("cp_"), Name: name, TokenHash: token.Hash(tok), CreatedAt: now}
	if len(code) != PairCodeLen {
		// Not a code this supervisor makes: refuse it like an unknown one.
		return Paired{}, pairRefused()
	}
	c, err = s.st.RedeemPairCode(ctx, token.Hash(code), now, c)
	if errors.Is(err, store.ErrPairCode) {
		s.log.Warn("pairing refused: code unknown, expired or already used")
		return Paired{}, pairRefused()
	}
	if err != nil {
		return Paired{}, fmt.Errorf("pair: %w", err)
	}
	s.log.Info("companion paired", "agent", c.ID, "name", c.Name)
	return Paired{LenderID: c.ID, Token: tok, RelayURL: s.relayURL}, nil
}

// AuthenticateCompanion returns the companion agent whose token tok is; a
// wrong token is refused (401) and logged without the token.
func (s *Pairing) AuthenticateCompanion(ctx context.Context, tok string) (store.Companion, error) {
	c, err := s.st.CompanionByTokenHash(ctx, token.Hash(tok))
	if errors.Is(err, store.ErrNotFound) {
		s.log.Warn("companion token refused")
		return c, errorf(http.StatusUnauthorized, CodeUnauthorized, "unknown companion token")
	}
	if err != nil {
		return c, fmt.Errorf("authenticate companion: %w", err)
	}
	return c, nil
}

func pairRefused() *Error {
	return errorf(http.StatusForbidden, CodePairInvalid, "pairing code unknown, expired or already used")
}

func companionName(name string) (string, error) {
	name = strings.TrimSpace(name)
	if name == "" {
		return defaultCompanion, nil
	}
	if len(name) > 200 {
		return "", badRequest("name: at most 200 characters")
	}
	return name, nil
}

// newPairCode returns a random code of PairCodeLen characters grouped by
// four with dashes, such as ABCD-EFGH-JK.
func newPairCode() (string, error) {
	var b strings.Builder
	buf := make([]byte, 1)
	for n := 0; n < PairCodeLen; {
		if _, err := rand.Read(buf); err != nil {
			return "", fmt.Errorf("pairing code: random: %w", err)
		}
		// Reject the top of the byte range so that every letter is as likely.
		if int(buf[0]) >= 256/len(pairCodeAlphabet)*len(pairCodeAlphabet) {
			continue
		}
		if n > 0 && n%4 == 0 {
			b.WriteByte('-')
		}
		b.WriteByte(pairCodeAlphabet[int(buf[0])%len(pairCodeAlphabet)])
		n++
	}
	return b.String(), nil
}

// normalizePairCode upper-cases a code and drops dashes and spaces, so that
// "abcd efgh jk" and "ABCD-EFGH-JK" are one code.
func normalizePairCode(code string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '-' || r == ' ' || r == '\t':
			return -1
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		}
		return r
	}, code)
}

// CreatePairCode makes a one-time pairing code; see Pairing.CreatePairCode.
func (s *Service) CreatePairCode(ctx context.Context, r CreatePairCodeRequest) (PairCode, error) {
	return s.pairing.CreatePairCode(ctx, r)
}

// Pair redeems a pairing code once; see Pairing.Pair.
func (s *Service) Pair(ctx context.Context, r PairRequest) (Paired, error) {
	return s.pairing.Pair(ctx, r)
}

// AuthenticateCompanion returns the companion agent whose token tok is;
// see Pairing.AuthenticateCompanion.
func (s *Service) AuthenticateCompanion(ctx context.Context, tok string) (store.Companion, error) {
	return s.pairing.AuthenticateCompanion(ctx, tok)
}
