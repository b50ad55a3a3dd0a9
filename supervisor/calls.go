package supervisor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"
	"unicode"

	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/supervisor/store"
)

// Idempotency settings.
const (
	// MaxIdempotencyKeyLen bounds an Idempotency-Key header.
	MaxIdempotencyKeyLen = 200
	// InstanceTTL is how long a supervisor instance counts as alive after
	// its last heartbeat. A pending call whose instance died is lost.
	InstanceTTL = 10 * time.Second
	// maxCallWait bounds how long a duplicate waits for the first call.
	maxCallWait = 10 * time.Minute
	// MaxKeptOutcome bounds the answer kept for a call's retries. A larger
	// one (an exec's two 8 MiB streams, escaped) is answered to the first
	// call and replaced, for retries, by CodeOutcomeNotKept.
	MaxKeptOutcome = 32 << 20
)

// CodeOutcomeNotKept answers a retry whose first call's answer was larger
// than MaxKeptOutcome.
const CodeOutcomeNotKept = "outcome_not_kept"

// kept is what the store keeps of out for retries.
func kept(out Outcome) Outcome {
	if len(out.Body) <= MaxKeptOutcome {
		return out
	}
	body, _ := json.Marshal(map[string]any{"error": map[string]string{
		"code": CodeOutcomeNotKept,
		"message": fmt.Sprintf("the first call with this Idempotency-Key ended (status %d), but its answer of %d bytes was over the %d kept for retries",
			out.Status, len(out.Body), MaxKeptOutcome),
	}})
	return Outcome{Status: http.StatusConflict, Body: body}
}

// Outcome is a tool call's answer as the API sends it.
type Outcome struct {
	Status int
	Body   []byte
}

// CallsOptions are what Calls needs.
type CallsOptions struct {
	Store  store.Store
	Clock  clock.Clock
	Logger *slog.Logger
	// Instance is this supervisor's instance id: the owner of the calls it
	// runs, whose heartbeat tells waiters on other instances it is alive.
	Instance string
}

// Calls keeps the records of idempotent tool calls (Idempotency-Key): one
// run per key, its outcome replayed to retries on any supervisor sharing
// the store.
type Calls struct {
	st       store.Store
	clk      clock.Clock
	log      *slog.Logger
	instance string
}

// NewCalls returns the call records of opts.Instance.
func NewCalls(opts CallsOptions) *Calls {
	return &Calls{st: opts.Store, clk: opts.Clock, log: opts.Logger, instance: opts.Instance}
}

// Idempotent runs a tool call once per (agent, key): the first call runs
// run and stores its outcome; a retry with the same key and request gets
// that outcome (replayed is set), waiting while the first is still
// running. The same key with another request is a 409. When the instance
// running the first call died, an exec is answered as uncertain and never
// re-run; the other tools are safe to run again and are.
func (s *Calls) Idempotent(ctx context.Context, agent, tool, key string, req any, run func(context.Context) Outcome) (out Outcome, replayed bool, err error) {
	if key == "" {
		return run(ctx), false, nil
	}
	if len(key) > MaxIdempotencyKeyLen {
		return out, false, badRequest("Idempotency-Key: %d characters, at most %d", len(key), MaxIdempotencyKeyLen)
	}
	for _, r := range key {
		if r > unicode.MaxASCII || !unicode.IsPrint(r) {
			return out, false, badRequest("Idempotency-Key: only printable ASCII characters")
		}
	}
	canon, err := json.Marshal(req)
	if err != nil {
		return out, false, err
	}
	h := sha256.Sum256(append([]byte(tool+"\n"), canon...))
	c := store.Call{
		Key: agent + "/" + key, AgentID: agent, Tool: tool, RequestHash: hex.EncodeToString(h[:]),
		Owner: s.instance, CreatedAt: s.clk.Now().UTC(),
	}
	got, created, err := s.st.BeginCall(ctx, c)
	if err != nil {
		return out, false, err
	}
	if !created {
		if got.Tool != c.Tool || got.RequestHash != c.RequestHash {
			return out, false, errorf(http.StatusConflict, CodeConflict, "Idempotency-Key %q was already used for a different request (%s); use a new key for a new call", key, got.Tool)
		}
		return s.awaitCall(ctx, got, run)
	}
	// The call runs to its end even when the client goes away, so that a
	// retry gets its outcome instead of an unknown.
	out = run(context.WithoutCancel(ctx))
	k := kept(out)
	if err := s.st.FinishCall(context.WithoutCancel(ctx), c.Key, s.instance, k.Status, k.Body, s.clk.Now()); err != nil {
		s.log.Error("record call outcome", "key", c.Key, "err", err)
	}
	return out, false, nil
}

// awaitCall waits for a pending call to finish and returns its outcome.
func (s *Calls) awaitCall(ctx context.Context, c store.Call, run func(context.Context) Outcome) (Outcome, bool, error) {
	deadline := time.Now().Add(maxCallWait)
	wait := 5 * time.Millisecond
	for {
		if c.State == store.CallDone {
			return Outcome{Status: c.Status, Body: c.Response}, true, nil
		}
		if c.Owner != s.instance {
			alive, err := s.st.InstanceAlive(ctx, c.Owner, s.clk.Now().Add(-InstanceTTL))
			if err != nil {
				return Outcome{}, false, err
			}
			if !alive {
				return s.takeOver(ctx, c, run)
			}
		}
		if time.Now().After(deadline) {
			return Outcome{}, false, errorf(http.StatusServiceUnavailable, CodeUnavailable, "the first call with this Idempotency-Key is still running; retry later with the same key")
		}
		select {
		case <-ctx.Done():
			return Outcome{}, false, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*2, 250*time.Millisecond)
		var err error
		if c, err = s.st.GetCall(ctx, c.Key); err != nil {
			return Outcome{}, false, err
		}
	}
}

// takeOver settles a call whose supervisor died while running it.
func (s *Calls) takeOver(ctx context.Context, c store.Call, run func(context.Context) Outcome) (Outcome, bool, error) {
	var out Outcome
	if c.Tool == "exec" {
		body, _ := json.Marshal(ExecResult{ExitCode: -1, Uncertain: true, Advice: UncertainAdvice})
		out = Outcome{Status: http.StatusOK, Body: body}
		s.log.Warn("exec outcome lost with its supervisor; answering uncertain", "key", c.Key, "owner", c.Owner)
	} else {
		out = run(context.WithoutCancel(ctx))
	}
	k := kept(out)
	err := s.st.FinishCall(ctx, c.Key, c.Owner, k.Status, k.Body, s.clk.Now())
	if errors.Is(err, store.ErrStale) {
		// Another waiter settled it first: answer what it stored.
		got, gerr := s.st.GetCall(ctx, c.Key)
		if gerr != nil {
			return Outcome{}, false, gerr
		}
		return Outcome{Status: got.Status, Body: got.Response}, true, nil
	}
	if err != nil {
		return Outcome{}, false, fmt.Errorf("settle lost call %s: %w", c.Key, err)
	}
	return out, true, nil
}

// Idempotent runs a tool call once per (agent, key); see Calls.Idempotent.
func (s *Service) Idempotent(ctx context.Context, agent, tool, key string, req any, run func(context.Context) Outcome) (Outcome, bool, error) {
	return s.calls.Idempotent(ctx, agent, tool, key, req, run)
}
