package egress_test

import (
	"context"
	"crypto/subtle"
	"log/slog"
	"net"
	"os"
	"os/signal"

	"github.com/berthdev/berth/egress"
	"github.com/berthdev/berth/internal/token"
)

// The supervisor wires the proxy to the per-computer egress tokens, the
// system resolver and dialer, and its environment.
func ExampleNew() {
	d, err := token.NewDeriver([]byte(os.Getenv("COMPUTER_TOKEN_SECRET")))
	if err != nil {
		panic(err)
	}
	blocked, err := egress.ParseBlockedCIDRs(os.Getenv("EGRESS_BLOCKED_CIDRS"))
	if err != nil {
		panic(err)
	}
	running := func(id string) bool { return id != "" } // the supervisor asks its store
	p, err := egress.New(egress.Config{
		Authenticate: func(user, pass string) (string, bool) {
			want := d.Derive(token.Egress, user)
			ok := subtle.ConstantTimeCompare([]byte(pass), []byte(want)) == 1
			return user, ok && running(user)
		},
		Resolver:     net.DefaultResolver,
		Dialer:       &net.Dialer{},
		BlockedCIDRs: blocked,
		Abuse:        os.Getenv("EGRESS_ABUSE") == "on",
		OnEvent:      func(ev egress.Event) { slog.Warn("egress refusal", "event", ev) },
		Logger:       slog.Default(),
	})
	if err != nil {
		panic(err)
	}
	ln, err := net.Listen("tcp", ":3128")
	if err != nil {
		panic(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := p.Serve(ctx, ln); err != nil {
		slog.Error("egress proxy", "err", err)
	}
}
