package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/berthdev/berth/supervisor/store"
)

// testLenderLinks: the newer link wins, a relay that lost a lender cannot
// take it back with an older link or end the newer one, and a lease that
// ran out lets any relay record the lender.
func testLenderLinks(t *testing.T, s store.Store) {
	ctx := context.Background()
	const r1, r2 = "http://10.0.0.5:8081", "http://10.0.0.6:8081"
	if _, err := s.GetLenderLink(ctx, "cp_a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown lender: %v, want ErrNotFound", err)
	}
	put := func(l store.LenderLink, now time.Time, want bool) {
		t.Helper()
		if ok, err := s.PutLenderLink(ctx, l, now); err != nil || ok != want {
			t.Fatalf("put %+v at %v: %v %v, want written=%v", l, now, ok, err, want)
		}
	}
	get := func(id string) store.LenderLink {
		t.Helper()
		l, err := s.GetLenderLink(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	a1 := store.LenderLink{LenderID: "cp_a", Relay: r1, ConnectedAt: t0, LastSeen: t0, Version: "v1", Expires: at(6 * time.Second)}
	put(a1, t0, true)
	if got := get("cp_a"); got != a1 || !got.Online(at(5*time.Second)) || got.Online(at(6*time.Second)) {
		t.Fatalf("get %+v, want %+v online until %v", got, a1, a1.Expires)
	}
	// r1 renews its lease.
	a1.LastSeen, a1.Expires = at(2*time.Second), at(8*time.Second)
	put(a1, at(2*time.Second), true)
	// The lender moves to r2: its newer link wins while r1's lease holds.
	a2 := store.LenderLink{LenderID: "cp_a", Relay: r2, ConnectedAt: at(3 * time.Second), LastSeen: at(3 * time.Second), Version: "v1", Expires: at(9 * time.Second)}
	put(a2, at(3*time.Second), true)
	// r1 still reports its older link: refused, and it cannot end r2's.
	put(a1, at(4*time.Second), false)
	if err := s.EndLenderLink(ctx, "cp_a", r1, at(4*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := get("cp_a"); got != a2 {
		t.Fatalf("after r1's stale report: %+v, want %+v", got, a2)
	}
	// r2 sees the link end: offline from then on, last seen then.
	if err := s.EndLenderLink(ctx, "cp_a", r2, at(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := get("cp_a"); got.Online(at(5*time.Second)) || !got.LastSeen.Equal(at(5*time.Second)) || got.Relay != r2 {
		t.Fatalf("ended link: %+v", got)
	}
	// An ended (or run-out) lease lets any relay record the lender, even
	// with a link that began earlier.
	put(a1, at(6*time.Second), true)
	// A second lender; the list is sorted by lender id.
	b := store.LenderLink{LenderID: "cp_0", Relay: r2, ConnectedAt: t0, LastSeen: t0, Expires: at(time.Minute)}
	put(b, t0, true)
	ls, err := s.LenderLinks(ctx)
	if err != nil || len(ls) != 2 || ls[0] != b || ls[1] != a1 {
		t.Fatalf("links: %+v %v", ls, err)
	}
}
