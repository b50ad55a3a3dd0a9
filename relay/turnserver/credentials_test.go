package turnserver

import (
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/pion/stun/v4"
	"github.com/pion/turn/v5"

	"github.com/berthdev/berth/internal/clock"
)

// TestRefreshGrace: an expired credential makes no new allocation but
// still refreshes one it made, for RefreshGrace.
func TestRefreshGrace(t *testing.T) {
	now := time.Now()
	clk := clock.NewFake(now)
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Secret: []byte("0123456789abcdef"), RelayIP: netip.MustParseAddr("127.0.0.1"), PacketConns: []net.PacketConn{pc}, Clock: clk, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := s.Issue("viewer", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	auth := func(m stun.Method) bool {
		_, _, ok := s.authenticate(&turn.RequestAttributes{Username: c.Username, Realm: DefaultRealm, Method: m})
		return ok
	}
	if !auth(stun.MethodAllocate) || !auth(stun.MethodRefresh) {
		t.Fatal("a valid credential was refused")
	}
	clk.Advance(2 * time.Minute)
	if auth(stun.MethodAllocate) {
		t.Error("an expired credential may allocate")
	}
	for _, m := range []stun.Method{stun.MethodRefresh, stun.MethodCreatePermission, stun.MethodChannelBind} {
		if !auth(m) {
			t.Errorf("%v with a credential expired a minute ago was refused", m)
		}
	}
	clk.Advance(RefreshGrace)
	if auth(stun.MethodRefresh) {
		t.Error("a refresh past the grace was accepted")
	}
}
