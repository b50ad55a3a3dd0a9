package providers

import (
	"testing"
	"time"
)

func TestExpiresAt(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.FixedZone("CET", 3600))
	if got := (Spec{Lease: 15 * time.Minute}).ExpiresAt(now); got != "2026-12-01T09:16:00Z" {
		t.Errorf("a 15-minute lease from 10:00 CET ends the computer at %q, want 09:16 UTC", got)
	}
	if got := (Spec{}).ExpiresAt(now); got != "" {
		t.Errorf("no lease: %q, want none", got)
	}
}
