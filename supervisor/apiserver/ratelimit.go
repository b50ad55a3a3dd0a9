package apiserver

import (
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/berthdev/berth/internal/httpjson"
	"github.com/berthdev/berth/internal/ratelimit"
	"github.com/berthdev/berth/supervisor"
)

// Rate limits (SPEC section 10, "Rate limits").
const (
	// DefaultRate and DefaultBurst are the per-key token bucket when
	// API_RATE and API_BURST are unset: requests per second, and how many
	// may come at once.
	DefaultRate  = 20
	DefaultBurst = 40
	// PairRate and PairBurst limit unauthenticated pairing per client
	// address: 5 a minute.
	PairRate  = 5.0 / 60
	PairBurst = 5
)

// SetRateLimit sets the per-key token bucket: rate requests a second with
// bursts of burst (API_RATE, API_BURST). A rate of 0 or less turns the
// limit off.
func (h *Handler) SetRateLimit(rate float64, burst int) {
	h.keyLimit = ratelimit.New(rate, burst)
}

// SetPairLimit sets the per-address limit of unauthenticated pairing (by
// default PairRate and PairBurst); a rate of 0 or less turns it off.
func (h *Handler) SetPairLimit(rate float64, burst int) {
	h.pairLimit = ratelimit.New(rate, burst)
}

// limit takes a token of the actor's bucket, answering 429 with
// Retry-After when there is none. SUPERVISOR_TOKEN is not limited: it is
// the operator's own credential, not a key handed out.
func (h *Handler) limit(w http.ResponseWriter, actor string) bool {
	if actor == supervisor.ActorOperator {
		return true
	}
	ok, wait := h.keyLimit.Take(actor)
	if !ok {
		tooMany(w, wait, fmt.Sprintf("rate limit: at most %g requests a second (bursts of %g) per key; retry later", h.keyLimit.Rate(), h.keyLimit.Burst()))
	}
	return ok
}

// limitPair limits pairing by the client's address.
func (h *Handler) limitPair(w http.ResponseWriter, r *http.Request) bool {
	addr, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		addr = r.RemoteAddr
	}
	ok, wait := h.pairLimit.Take(addr)
	if !ok {
		tooMany(w, wait, "too many pairing attempts from this address: at most 5 a minute; retry later")
	}
	return ok
}

func tooMany(w http.ResponseWriter, wait time.Duration, msg string) {
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(wait.Seconds())))))
	httpjson.WriteError(w, http.StatusTooManyRequests, supervisor.CodeRateLimited, msg)
}

// RateFromEnv reads API_RATE (requests a second per key, default
// DefaultRate; 0 turns the limit off) and API_BURST (default DefaultBurst).
func RateFromEnv(getenv func(string) string) (float64, int, error) {
	rate, burst := float64(DefaultRate), DefaultBurst
	if v := getenv("API_RATE"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
			return 0, 0, fmt.Errorf("API_RATE: %q is not a number of requests a second (0 turns the limit off)", v)
		}
		rate = f
	}
	if v := getenv("API_BURST"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return 0, 0, fmt.Errorf("API_BURST: %q is not a positive number of requests", v)
		}
		burst = n
	}
	return rate, burst, nil
}
