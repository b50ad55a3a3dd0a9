package supervisor

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/supervisor/store"
)

// CodeDesktopBusy answers a desktop tool while other holders hold every
// desktop seat of the computer (409; see api.CodeDesktopBusy).
const CodeDesktopBusy = api.CodeDesktopBusy

// desktopSeatFor is how long a holder's desktop seat lasts after its last
// desktop call.
const desktopSeatFor = api.DesktopSeatSeconds * time.Second

// desktopUsers checks and completes a new connection's desktopUsers: only
// desktop computers have desktop tools to share.
func desktopUsers(r ConnectRequest) (int, error) {
	if r.DesktopUsers == nil {
		return api.DefaultDesktopUsers, nil
	}
	n := *r.DesktopUsers
	if r.Image != providers.ImageDesktop {
		return 0, badRequest("desktopUsers: only with image %q, whose computers have desktop tools", providers.ImageDesktop)
	}
	if n < 1 || n > api.MaxDesktopUsers {
		return 0, limitf("desktopUsers: %d is outside 1..%d", n, api.MaxDesktopUsers)
	}
	return n, nil
}

type holderKey struct{}

// WithDesktopHolder returns ctx naming holder as the caller of the desktop
// tools (api.HeaderDesktopHolder); the REST server sets it from the
// request.
func WithDesktopHolder(ctx context.Context, holder string) context.Context {
	return context.WithValue(ctx, holderKey{}, holder)
}

// desktopHolder is who holds the desktop seat of a call under ctx: the
// holder ctx names, or else the caller's key (its id; "operator" for the
// operator token). The two never collide: a named holder is "h:"-prefixed.
func desktopHolder(ctx context.Context) string {
	if h, _ := ctx.Value(holderKey{}).(string); h != "" {
		return "h:" + h
	}
	return "key:" + PrincipalOf(ctx).Actor
}

// desktopSeat seats the caller at the desktop of session x for
// desktopSeatFor from now, within the connection's desktopUsers.
func (s *Service) desktopSeat(ctx context.Context, x store.Session) error {
	c, err := s.st.GetConnection(ctx, x.AgentID)
	if err != nil {
		return err
	}
	limit := max(c.DesktopUsers, api.DefaultDesktopUsers)
	now := s.clk.Now()
	_, err = s.st.TakeDesktopSeat(ctx, x.ID, desktopHolder(ctx), now.Add(desktopSeatFor), now, limit)
	var full *store.SeatsFullError
	if errors.As(err, &full) {
		seats := "its 1 desktop seat is"
		if limit > 1 {
			seats = "all " + strconv.Itoa(limit) + " of its desktop seats are"
		}
		wait := max(full.FreesAt.Sub(now).Round(time.Second), time.Second)
		return errorf(http.StatusConflict, CodeDesktopBusy,
			"the desktop of agent %q's computer is busy: %s held by other callers (desktopUsers %d); the first frees at %s, in %s, unless its holder uses the desktop again",
			x.AgentID, seats, limit, full.FreesAt.UTC().Format(time.RFC3339), wait)
	}
	return err
}
