package supervisor

import (
	"context"
	"errors"
	"net/http"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/computerd/desktop"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/supervisor/store"
)

// CodeNotDesktop answers a desktop tool on a computer without a screen (409).
const CodeNotDesktop = api.CodeNotDesktop

// desktopClient returns a client of the desktop of the agent's running
// computer. Like every tool call it counts as the session's activity.
func (s *Service) desktopClient(ctx context.Context, agent string) (*desktop.Client, store.Session, error) {
	x, err := s.running(ctx, agent)
	if err != nil {
		return nil, x, err
	}
	if x.Image != providers.ImageDesktop {
		return nil, x, errorf(http.StatusConflict, CodeNotDesktop,
			"session %s runs the %q image, which has no screen; connect with \"image\": \"desktop\" for the desktop tools", x.ID, x.Image)
	}
	hc, h, err := s.transport(ctx, x)
	if err != nil {
		return nil, x, err
	}
	return desktop.NewClient(x.Endpoint, s.cfg.Tokens.Derive(token.Computer, x.ComputerID), hc, h), x, nil
}

// desktopError maps computerd's answer to a desktop action.
func desktopError(x store.Session, err error) error {
	var re *desktop.RemoteError
	if !errors.As(err, &re) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		return errorf(http.StatusBadGateway, CodeProvider, "the computer's desktop did not answer: %v", err)
	}
	switch re.Status {
	case http.StatusBadRequest:
		return badRequest("%s", re.Message)
	case http.StatusNotFound:
		return errorf(http.StatusConflict, CodeNotDesktop, "session %s has no desktop tools: its computer serves no screen", x.ID)
	}
	return errorf(http.StatusBadGateway, CodeProvider, "the computer's desktop failed: %s", re.Message)
}

// DesktopScreenshot takes a screenshot of the agent's desktop.
func (s *Service) DesktopScreenshot(ctx context.Context, agent string, r api.ScreenshotRequest) (api.Screenshot, error) {
	c, x, err := s.desktopClient(ctx, agent)
	if err != nil {
		return api.Screenshot{}, err
	}
	shot, err := c.Shot(ctx, desktop.ShotRequest{Format: r.Format, Quality: r.Quality, Width: r.Width})
	if err != nil {
		return api.Screenshot{}, desktopError(x, err)
	}
	return api.Screenshot{Format: shot.Format, Data: shot.Data, Width: shot.Width, Height: shot.Height,
		ScreenWidth: shot.ScreenWidth, ScreenHeight: shot.ScreenHeight, Scale: shot.Scale}, nil
}

func result(a desktop.ActionResult) api.DesktopResult {
	return api.DesktopResult{Cursor: a.Cursor, ScreenWidth: a.ScreenWidth, ScreenHeight: a.ScreenHeight}
}

// DesktopCursor returns the pointer's position on the agent's desktop.
func (s *Service) DesktopCursor(ctx context.Context, agent string) (api.DesktopResult, error) {
	c, x, err := s.desktopClient(ctx, agent)
	if err != nil {
		return api.DesktopResult{}, err
	}
	a, err := c.Cursor(ctx)
	if err != nil {
		return api.DesktopResult{}, desktopError(x, err)
	}
	return result(a), nil
}

// DesktopMouse moves, clicks, drags or scrolls on the agent's desktop.
func (s *Service) DesktopMouse(ctx context.Context, agent string, r api.MouseRequest) (api.DesktopResult, error) {
	c, x, err := s.desktopClient(ctx, agent)
	if err != nil {
		return api.DesktopResult{}, err
	}
	a, err := c.Mouse(ctx, desktop.MouseRequest{Action: r.Action, Coordinate: r.Coordinate, Button: r.Button, Clicks: r.Clicks,
		Modifiers: r.Modifiers, Path: r.Path, Direction: r.Direction, Amount: r.Amount})
	if err != nil {
		return api.DesktopResult{}, desktopError(x, err)
	}
	return result(a), nil
}

// DesktopKeyboard types text or presses keys on the agent's desktop.
func (s *Service) DesktopKeyboard(ctx context.Context, agent string, r api.KeyboardRequest) (api.DesktopResult, error) {
	c, x, err := s.desktopClient(ctx, agent)
	if err != nil {
		return api.DesktopResult{}, err
	}
	a, err := c.Keyboard(ctx, desktop.KeyboardRequest{Action: r.Action, Text: r.Text, Keys: r.Keys, DurationMs: r.DurationMs})
	if err != nil {
		return api.DesktopResult{}, desktopError(x, err)
	}
	return result(a), nil
}

// DesktopWait waits on the agent's desktop.
func (s *Service) DesktopWait(ctx context.Context, agent string, r api.WaitRequest) (api.DesktopResult, error) {
	c, x, err := s.desktopClient(ctx, agent)
	if err != nil {
		return api.DesktopResult{}, err
	}
	a, err := c.Wait(ctx, desktop.WaitRequest{DurationMs: r.DurationMs})
	if err != nil {
		return api.DesktopResult{}, desktopError(x, err)
	}
	return result(a), nil
}
