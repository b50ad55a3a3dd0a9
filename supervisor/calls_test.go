package supervisor

import (
	"net/http"
	"strings"
	"testing"
)

// TestKeptOutcome: an answer up to MaxKeptOutcome is kept as it is; a
// larger one is replaced, for retries, by a small outcome_not_kept.
func TestKeptOutcome(t *testing.T) {
	small := Outcome{Status: 200, Body: []byte(`{"exitCode":0}`)}
	if got := kept(small); got.Status != 200 || string(got.Body) != string(small.Body) {
		t.Errorf("a small answer was changed: %+v", got)
	}
	big := Outcome{Status: 200, Body: make([]byte, MaxKeptOutcome+1)}
	got := kept(big)
	if got.Status != http.StatusConflict || len(got.Body) > 1024 || !strings.Contains(string(got.Body), CodeOutcomeNotKept) {
		t.Errorf("an answer over the limit: %d %q", got.Status, got.Body)
	}
}
