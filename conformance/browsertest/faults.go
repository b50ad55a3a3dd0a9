package browsertest

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/berthdev/berth/conformance/hostedtest"
)

// Faults are the bad days a browser provider's fake plays, and the lock
// it serves under (hostedtest.Faults). A fake embeds it; its methods are
// the fake's providertest.Faults.
type Faults struct {
	hostedtest.Faults
}

// WriteJSON answers v as JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
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
