package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/supervisor/store"
)

func companion(id string) store.Companion {
	return store.Companion{ID: id, TokenHash: "tok-hash-" + id, CreatedAt: at(time.Minute)}
}

func testPairing(t *testing.T, s store.Store) {
	ctx := testContext(t)
	code := store.PairCode{Hash: "code-1", Name: "lab laptop", CreatedAt: t0, ExpiresAt: at(10 * time.Minute)}
	if err := s.CreatePairCode(ctx, code); err != nil {
		t.Fatalf("create pair code: %v", err)
	}
	wantErr(t, s.CreatePairCode(ctx, code), store.ErrConflict, "second code with the same hash")

	_, err := s.RedeemPairCode(ctx, "code-unknown", at(time.Minute), companion("cp-0"))
	wantErr(t, err, store.ErrPairCode, "unknown code")

	got, err := s.RedeemPairCode(ctx, "code-1", at(time.Minute), companion("cp-1"))
	if err != nil {
		t.Fatalf("redeem: %v", err)
	}
	if got.ID != "cp-1" || got.Name != "lab laptop" || got.TokenHash != "tok-hash-cp-1" {
		t.Errorf("redeem returned %+v, want the code's name", got)
	}
	_, err = s.RedeemPairCode(ctx, "code-1", at(2*time.Minute), companion("cp-2"))
	wantErr(t, err, store.ErrPairCode, "second redeem")
	_, err = s.GetCompanion(ctx, "cp-2")
	wantErr(t, err, store.ErrNotFound, "companion of a refused redeem")

	stored, err := s.GetCompanion(ctx, "cp-1")
	if err != nil {
		t.Fatal(err)
	}
	if stored.Name != "lab laptop" || stored.TokenHash != "tok-hash-cp-1" || !stored.CreatedAt.Equal(at(time.Minute)) ||
		!stored.LastSeenAt.IsZero() {
		t.Errorf("stored companion = %+v", stored)
	}
	byTok, err := s.CompanionByTokenHash(ctx, "tok-hash-cp-1")
	if err != nil || byTok.ID != "cp-1" {
		t.Errorf("by token hash: %+v, %v", byTok, err)
	}
	_, err = s.CompanionByTokenHash(ctx, "tok-hash-none")
	wantErr(t, err, store.ErrNotFound, "unknown token hash")
	_, err = s.GetCompanion(ctx, "cp-none")
	wantErr(t, err, store.ErrNotFound, "unknown companion")

	// The agent's own name wins over the code's.
	if err := s.CreatePairCode(ctx, store.PairCode{Hash: "code-2", Name: "x", CreatedAt: t0, ExpiresAt: at(10 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	c := companion("cp-3")
	c.Name = "own name"
	if got, err := s.RedeemPairCode(ctx, "code-2", at(time.Minute), c); err != nil || got.Name != "own name" {
		t.Errorf("redeem with a name: %+v, %v", got, err)
	}
}

func testPairCodeExpiry(t *testing.T, s store.Store) {
	ctx := testContext(t)
	if err := s.CreatePairCode(ctx, store.PairCode{Hash: "code-e", CreatedAt: t0, ExpiresAt: at(10 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	// Expiry is exclusive: at ExpiresAt the code is gone.
	_, err := s.RedeemPairCode(ctx, "code-e", at(10*time.Minute), companion("cp-late"))
	wantErr(t, err, store.ErrPairCode, "redeem at expiry")
	if _, err := s.RedeemPairCode(ctx, "code-e", at(10*time.Minute-time.Millisecond), companion("cp-ok")); err != nil {
		t.Errorf("redeem just before expiry: %v", err)
	}
}

func testConcurrentRedeem(t *testing.T, s store.Store) {
	ctx := testContext(t)
	if err := s.CreatePairCode(ctx, store.PairCode{Hash: "code-c", CreatedAt: t0, ExpiresAt: at(10 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = s.RedeemPairCode(ctx, "code-c", at(time.Minute), companion(fmt.Sprintf("cp-%d", i)))
		})
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, store.ErrPairCode):
			t.Errorf("redeem %d: %v, want ErrPairCode", i, err)
		}
	}
	if won != 1 {
		t.Fatalf("%d redeems won, want exactly 1", won)
	}
	found := 0
	for i := range n {
		if _, err := s.GetCompanion(ctx, fmt.Sprintf("cp-%d", i)); err == nil {
			found++
		}
	}
	if found != 1 {
		t.Errorf("%d companions recorded, want 1", found)
	}
}
