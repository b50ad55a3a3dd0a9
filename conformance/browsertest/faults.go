package browsertest

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"
)

// Faults are the bad days a browser provider's fake plays, and the lock
// it serves under. A fake embeds it; its methods are the fake's
// providertest.Faults.
type Faults struct {
	Mu sync.Mutex
	// Refuse answers 401 to every call while set.
	Refuse bool
	// RateLimit is how many of the next creates answer 429, LoseReplies
	// how many run and then lose their answer, FailDeletes how many
	// releases answer 500 and release nothing.
	RateLimit, LoseReplies, FailDeletes int
}

// LoseNextCreateReply makes the next create run and lose its answer.
func (f *Faults) LoseNextCreateReply() { f.Mu.Lock(); f.LoseReplies++; f.Mu.Unlock() }

// FailNextDeletes makes the next n releases fail.
func (f *Faults) FailNextDeletes(n int) { f.Mu.Lock(); f.FailDeletes += n; f.Mu.Unlock() }

// RefuseCredentials refuses every key while on.
func (f *Faults) RefuseCredentials(on bool) { f.Mu.Lock(); f.Refuse = on; f.Mu.Unlock() }

// Take counts one off *n and reports whether there was one (with Mu held).
func Take(n *int) bool {
	if *n <= 0 {
		return false
	}
	*n--
	return true
}

// WriteJSON answers v as JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// HangUp closes the request's connection without an answer, as a reply
// lost on the way.
func HangUp(w http.ResponseWriter) {
	if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
		conn.Close()
	}
}

// StopWhenDone stops, when t ends, the browsers running() returns (it is
// called with Mu held; nil entries are skipped): a fake's sessions end
// with its test.
func (f *Faults) StopWhenDone(t testing.TB, running func() []*Chromium) {
	t.Cleanup(func() {
		f.Mu.Lock()
		defer f.Mu.Unlock()
		for _, c := range running() {
			if c != nil {
				c.Stop()
			}
		}
	})
}

// StartChromiumFor starts the browser of a create request r, allowing it a
// minute to listen.
func StartChromiumFor(r *http.Request) (*Chromium, error) {
	ctx, cancel := context.WithTimeout(r.Context(), time.Minute)
	defer cancel()
	return StartChromium(ctx)
}
