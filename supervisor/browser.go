package supervisor

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/computerd/browser"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/supervisor/store"
)

// hostedBrowsers are this process's connections to hosted browser
// sessions' DevTools, by session: the supervisor drives a hosted browser
// itself, where a computer's computerd drives its own. A connection keeps
// the selected tab between calls; it is closed when its session ends here,
// and dialled again when the browser dropped it. Another supervisor
// instance opens its own, which selects the first tab.
type hostedBrowsers struct {
	mu  sync.Mutex
	set map[string]*browser.Driver
}

// get returns the session's connection, dialling cdpURL when it has none
// or lost it. The dial runs outside the lock, so one slow provider holds
// up no other session; of two dials that race, the first kept wins.
func (h *hostedBrowsers) get(ctx context.Context, session, cdpURL string, log *slog.Logger) (*browser.Driver, error) {
	if d := h.live(session); d != nil {
		return d, nil
	}
	d, err := browser.Dial(ctx, cdpURL, browser.DriverOptions{Logger: log})
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if kept := h.set[session]; kept != nil {
		if !lost(kept) {
			d.Close()
			return kept, nil
		}
		kept.Close()
	}
	if h.set == nil {
		h.set = map[string]*browser.Driver{}
	}
	h.set[session] = d
	return d, nil
}

// live returns the session's connection unless it has none or lost it;
// a lost one is closed and forgotten.
func (h *hostedBrowsers) live(session string) *browser.Driver {
	h.mu.Lock()
	defer h.mu.Unlock()
	d := h.set[session]
	if d != nil && lost(d) {
		d.Close()
		delete(h.set, session)
		return nil
	}
	return d
}

func lost(d *browser.Driver) bool {
	select {
	case <-d.Lost():
		return true
	default:
		return false
	}
}

// drop closes the session's connection, leaving the hosted browser as it
// is (its provider ends it with the session).
func (h *hostedBrowsers) drop(session string) {
	h.mu.Lock()
	d := h.set[session]
	delete(h.set, session)
	h.mu.Unlock()
	if d != nil {
		d.Close()
	}
}

// withBrowser runs do with the browser tools of the agent's running
// computer: computerd's browser in a computer, the provider's DevTools
// driven from here for a hosted browser session. Like every tool call it
// counts as the session's activity.
func (s *Service) withBrowser(ctx context.Context, agent string, do func(browser.Tools) error) error {
	x, err := s.live(ctx, agent, true)
	if err != nil {
		return err
	}
	if b, ok := s.cfg.Providers[x.Provider].(BrowserSession); ok {
		cdp, _ := b.BrowserURLs(machineOf(x))
		if cdp == "" {
			return errorf(http.StatusBadGateway, api.CodeBrowserFailed, "the %s provider gave session %s no DevTools URL", x.Provider, x.ID)
		}
		d, err := s.hosted.get(ctx, x.ID, cdp, s.log)
		if err != nil {
			return browserError(x, err)
		}
		return browserError(x, do(d))
	}
	hc, h, err := s.ComputerTransport(ctx, x)
	if err != nil {
		return err
	}
	c := browser.NewClient(x.Endpoint, s.cfg.Tokens.Derive(token.Computer, x.ComputerID), hc, h)
	return browserError(x, do(c))
}

// browserError passes the browser's own errors on as they are (their
// codes are the API's) and names the session in any other.
func browserError(x store.Session, err error) error {
	var he *Error
	if err == nil || errors.As(err, &he) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return errorf(http.StatusBadGateway, api.CodeBrowserFailed, "the browser of session %s did not answer: %v", x.ID, err)
}

// browserTool runs one browser tool and returns its answer.
func browserTool[Req, Resp any](s *Service, ctx context.Context, agent string, req Req, run func(browser.Tools, context.Context, Req) (Resp, error)) (Resp, error) {
	var out Resp
	err := s.withBrowser(ctx, agent, func(t browser.Tools) error {
		var err error
		out, err = run(t, ctx, req)
		return err
	})
	return out, err
}

// BrowserNavigate loads a URL in the selected tab.
func (s *Service) BrowserNavigate(ctx context.Context, agent string, r api.BrowserNavigateRequest) (api.BrowserPage, error) {
	return browserTool(s, ctx, agent, r, browser.Tools.Navigate)
}

// BrowserSnapshot returns the selected tab's accessibility tree.
func (s *Service) BrowserSnapshot(ctx context.Context, agent string, r api.BrowserSnapshotRequest) (api.BrowserSnapshot, error) {
	return browserTool(s, ctx, agent, r, browser.Tools.Snapshot)
}

// BrowserClick clicks an element.
func (s *Service) BrowserClick(ctx context.Context, agent string, r api.BrowserClickRequest) (api.BrowserPage, error) {
	return browserTool(s, ctx, agent, r, browser.Tools.Click)
}

// BrowserType types into an element.
func (s *Service) BrowserType(ctx context.Context, agent string, r api.BrowserTypeRequest) (api.BrowserPage, error) {
	return browserTool(s, ctx, agent, r, browser.Tools.Type)
}

// BrowserPress presses a key or a combination.
func (s *Service) BrowserPress(ctx context.Context, agent string, r api.BrowserPressRequest) (api.BrowserPage, error) {
	return browserTool(s, ctx, agent, r, browser.Tools.Press)
}

// BrowserScroll scrolls an element into view or the page.
func (s *Service) BrowserScroll(ctx context.Context, agent string, r api.BrowserScrollRequest) (api.BrowserPage, error) {
	return browserTool(s, ctx, agent, r, browser.Tools.Scroll)
}

// BrowserScreenshot captures the page.
func (s *Service) BrowserScreenshot(ctx context.Context, agent string, r api.BrowserScreenshotRequest) (api.BrowserScreenshot, error) {
	return browserTool(s, ctx, agent, r, browser.Tools.Screenshot)
}

// BrowserTabs lists, opens, selects or closes tabs.
func (s *Service) BrowserTabs(ctx context.Context, agent string, r api.BrowserTabsRequest) (api.BrowserTabs, error) {
	return browserTool(s, ctx, agent, r, browser.Tools.Tabs)
}

// BrowserWait waits for text to appear or go, or for a time.
func (s *Service) BrowserWait(ctx context.Context, agent string, r api.BrowserWaitRequest) (api.BrowserPage, error) {
	return browserTool(s, ctx, agent, r, browser.Tools.Wait)
}

// BrowserEvaluate runs JavaScript in the page, on connections that allow
// it.
func (s *Service) BrowserEvaluate(ctx context.Context, agent string, r api.BrowserEvaluateRequest) (api.BrowserEvaluation, error) {
	c, err := s.connection(ctx, agent)
	if err != nil {
		return api.BrowserEvaluation{}, err
	}
	if !c.BrowserEvaluate {
		return api.BrowserEvaluation{}, errorf(http.StatusForbidden, api.CodeEvaluateNotAllowed,
			"browser_evaluate runs any script in the page; agent %q's connection does not allow it (connect with \"browserEvaluate\": true)", agent)
	}
	return browserTool(s, ctx, agent, r, browser.Tools.Evaluate)
}
