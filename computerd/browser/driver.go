package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/remote"
)

// DriverOptions configures a Driver.
type DriverOptions struct {
	// Header is sent with the websocket handshake (a hosted provider's
	// credentials, for one).
	Header http.Header
	// AllowFile lets navigate and tab open load file: URLs. computerd
	// allows them (the files are the computer's own); a hosted session
	// does not.
	AllowFile bool
	// ViewportWidth and ViewportHeight, when set, fix each tab's viewport
	// in CSS pixels (computerd's headless browser: its window's frame
	// would otherwise take part of the window size).
	ViewportWidth, ViewportHeight int
	// Logger receives the DevTools client's own complaints (default:
	// discarded).
	Logger *slog.Logger
}

// Driver implements Tools over the Chrome DevTools Protocol on one
// browser. Calls are served one at a time; each has a deadline.
type Driver struct {
	opts    DriverOptions
	log     *slog.Logger
	cancelA context.CancelFunc // the connection
	bctx    context.Context    // the browser's chromedp context
	cancelB context.CancelFunc
	browser *chromedp.Browser

	mu   sync.Mutex // held by each call
	tabs []*tab     // in the order the tab list shows them
	sel  int        // index of the selected tab in tabs
	// gone holds the tabs this driver closed that the browser may still
	// list for a moment (Target.closeTarget answers before the target is
	// gone): sync must not take one for a tab the page opened.
	gone   map[target.ID]bool
	closed bool
	// nextRef is the least number a new ref may have: refs are never
	// given twice by one Driver, in any tab or document. It starts at a
	// random thousand, so a ref kept from an earlier connection to the
	// browser is almost never another element's in this one.
	nextRef int64
}

// tab is one page target, attached on first use.
type tab struct {
	id     target.ID
	ctx    context.Context // its chromedp context, nil until attached
	cancel context.CancelFunc
	t      *chromedp.Target
	// world is the unique id of the driver's isolated world in the tab's
	// document (see snapshot.go), "" until made.
	world string
}

// Dial attaches to the browser whose DevTools websocket is wsURL
// (ws://127.0.0.1:PORT/devtools/browser/ID, or a hosted provider's wss
// URL) and selects its first tab, opening a blank one if it has none.
// ctx bounds the dial; the Driver lives until Close.
func Dial(ctx context.Context, wsURL string, opts DriverOptions) (*Driver, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	log := opts.Logger.With("component", "browser")
	if u, err := url.Parse(wsURL); err == nil && (u.Scheme == "http" || u.Scheme == "https") {
		// An HTTP DevTools endpoint (Browser Use gives one) names its
		// websocket in /json/version.
		ws, err := versionURL(ctx, u, opts.Header)
		if err != nil {
			return nil, browserFailed("connect to the browser at %s: %v", redactURL(wsURL), err)
		}
		wsURL = ws
	}
	aopts := []remote.Option{remote.NoModifyURL}
	if len(opts.Header) > 0 {
		aopts = append(aopts, remote.WithDialHTTPHeader(opts.Header))
	}
	if dl, ok := ctx.Deadline(); ok {
		aopts = append(aopts, remote.WithDialTimeout(time.Until(dl)))
	}
	actx, cancelA := remote.NewAllocator(context.Background(), wsURL, aopts...)
	logf := func(f string, args ...any) { log.Debug(fmt.Sprintf(f, args...)) }
	bctx, cancelB := chromedp.NewContext(actx, chromedp.WithBrowserOption(
		chromedp.WithBrowserLogf(logf), chromedp.WithBrowserErrorf(logf)))
	d := &Driver{opts: opts, log: log, cancelA: cancelA, bctx: bctx, cancelB: cancelB, nextRef: firstRef(), gone: map[target.ID]bool{}}

	// The first use binds the connection to bctx, so it runs on bctx and
	// the dial's ctx only bounds the wait.
	type result struct {
		infos []*target.Info
		err   error
	}
	ch := make(chan result, 1)
	go func() {
		infos, err := chromedp.Targets(bctx)
		ch <- result{infos, err}
	}()
	var r result
	select {
	case r = <-ch:
	case <-ctx.Done():
		d.Close()
		<-ch
		return nil, browserFailed("connect to the browser at %s: %v", redactURL(wsURL), ctx.Err())
	}
	if r.err != nil {
		d.Close()
		return nil, browserFailed("connect to the browser at %s: %v", redactURL(wsURL), r.err)
	}
	d.browser = chromedp.FromContext(bctx).Browser
	for _, in := range r.infos {
		if isPage(in) {
			d.tabs = append(d.tabs, &tab{id: in.TargetID})
		}
	}
	if len(d.tabs) == 0 {
		if _, err := d.createTab(ctx); err != nil {
			d.Close()
			return nil, describe(ctx, d.browser.LostConnection, err, "open a tab", 0)
		}
	}
	if err := d.attach(ctx, d.tabs[0]); err != nil {
		d.Close()
		return nil, describe(ctx, d.browser.LostConnection, err, "attach to the first tab", 0)
	}
	return d, nil
}

// maxVersionBytes bounds the answer of /json/version.
const maxVersionBytes = 64 << 10

// versionURL reads the browser's websocket URL from the /json/version of
// the HTTP DevTools endpoint u, and returns it on u's host (the browser
// names its own address, which may not be the one it is reached on), with
// ws for http and wss for https, and u's query (where hosted providers
// put credentials) when it has none of its own.
func versionURL(ctx context.Context, u *url.URL, h http.Header) (string, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	v := *u
	v.Path = strings.TrimRight(v.Path, "/") + "/json/version"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, v.String(), nil)
	if err != nil {
		return "", err
	}
	maps.Copy(req.Header, h)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("GET /json/version: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxVersionBytes+1))
	if err != nil {
		return "", fmt.Errorf("GET /json/version: %w", err)
	}
	if resp.StatusCode != http.StatusOK || len(body) > maxVersionBytes {
		return "", fmt.Errorf("GET /json/version: %s, %d bytes", resp.Status, len(body))
	}
	var version struct {
		WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
	}
	if err := json.Unmarshal(body, &version); err != nil || version.WebSocketDebuggerURL == "" {
		return "", errors.New("GET /json/version: no webSocketDebuggerUrl in the answer")
	}
	ws, err := url.Parse(version.WebSocketDebuggerURL)
	if err != nil {
		return "", fmt.Errorf("GET /json/version: webSocketDebuggerUrl: %w", err)
	}
	ws.Scheme, ws.Host = "ws", u.Host
	if u.Scheme == "https" {
		ws.Scheme = "wss"
	}
	if ws.RawQuery == "" {
		ws.RawQuery = u.RawQuery
	}
	return ws.String(), nil
}

// firstRef is a connection's first ref number: a random thousand below a
// million.
func firstRef() int64 { return 1000 * (1 + rand.Int64N(999)) }

// redactURL drops a URL's query and user info, where hosted providers
// put credentials.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(a malformed URL)"
	}
	u.RawQuery, u.User = "", nil
	return u.String()
}

func isPage(in *target.Info) bool {
	return in.Type == "page" && !strings.HasPrefix(in.URL, "devtools://")
}

// Close detaches from the browser and closes the connection. It leaves
// the browser and its tabs running.
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	for _, t := range d.tabs {
		if t.cancel != nil {
			t.cancel()
		}
	}
	d.cancelB()
	d.cancelA()
	return nil
}

// Lost is closed once the connection to the browser is gone (the browser
// exited, crashed or closed it).
func (d *Driver) Lost() <-chan struct{} { return d.browser.LostConnection }

// do runs f on the selected tab with the call's deadline, one call at a
// time, and turns its failure into the protocol's error.
func (d *Driver) do(ctx context.Context, limit time.Duration, what string, f func(ctx context.Context, t *tab) error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return browserFailed("%s: the browser connection is closed", what)
	}
	select {
	case <-d.browser.LostConnection:
		return browserFailed("%s: the browser exited or closed the connection", what)
	default:
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	t, err := d.selected(ctx)
	if err == nil {
		err = f(ctx, t)
	}
	return describe(ctx, d.browser.LostConnection, err, what, limit)
}

// sync brings the tab list up to date with the browser's page targets:
// tabs that closed leave it, tabs the page opened join it at the end.
func (d *Driver) sync(ctx context.Context) error {
	res, err := cdp.Call(ctx, d.browser, target.GetTargets, target.GetTargetsParams{})
	if err != nil {
		return err
	}
	live := make(map[target.ID]bool)
	listed := make(map[target.ID]bool, len(res.TargetInfos))
	for _, in := range res.TargetInfos {
		listed[in.TargetID] = true
		if isPage(in) && !d.gone[in.TargetID] {
			live[in.TargetID] = true
		}
	}
	for id := range d.gone {
		if !listed[id] {
			delete(d.gone, id) // gone at last
		}
	}
	selID := target.ID("")
	if d.sel < len(d.tabs) {
		selID = d.tabs[d.sel].id
	}
	selAt := d.sel
	kept := d.tabs[:0]
	for i, t := range d.tabs {
		if live[t.id] {
			kept = append(kept, t)
			delete(live, t.id)
			continue
		}
		if t.cancel != nil {
			t.cancel()
		}
		if i < d.sel {
			selAt--
		}
	}
	d.tabs = kept
	for _, in := range res.TargetInfos {
		if live[in.TargetID] {
			d.tabs = append(d.tabs, &tab{id: in.TargetID})
		}
	}
	d.sel = 0
	for i, t := range d.tabs {
		if t.id == selID {
			d.sel = i
		}
	}
	if selID != "" && (len(d.tabs) == 0 || d.tabs[d.sel].id != selID) {
		// The selected tab closed: select the one before it.
		d.sel = max(0, min(selAt-1, len(d.tabs)-1))
	}
	if len(d.tabs) == 0 {
		if _, err := d.createTab(ctx); err != nil {
			return err
		}
		d.sel = 0
	}
	return nil
}

// selected returns the selected tab, attached.
func (d *Driver) selected(ctx context.Context) (*tab, error) {
	if err := d.sync(ctx); err != nil {
		return nil, err
	}
	t := d.tabs[d.sel]
	if t.t == nil {
		if err := d.attach(ctx, t); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// createTab opens a blank tab at the end of the list.
func (d *Driver) createTab(ctx context.Context) (*tab, error) {
	res, err := cdp.Call(ctx, d.browser, target.CreateTarget, target.CreateTargetParams{URL: "about:blank"})
	if err != nil {
		return nil, err
	}
	t := &tab{id: res.TargetID}
	d.tabs = append(d.tabs, t)
	return t, nil
}

// attach opens a DevTools session on t. The session lives on the
// browser's context; ctx only bounds the wait.
func (d *Driver) attach(ctx context.Context, t *tab) error {
	tctx, cancel := chromedp.NewContext(d.bctx, chromedp.WithTargetID(t.id), chromedp.WithDetachOnCancel())
	done := make(chan error, 1)
	go func() { done <- chromedp.Do(tctx) }()
	select {
	case err := <-done:
		if err != nil {
			cancel()
			return fmt.Errorf("attach to tab: %w", err)
		}
	case <-ctx.Done():
		cancel()
		<-done
		return ctx.Err()
	}
	t.ctx, t.cancel, t.t = tctx, cancel, chromedp.FromContext(tctx).Target
	if d.opts.ViewportWidth > 0 && d.opts.ViewportHeight > 0 {
		_, err := cdp.Call(ctx, t.t, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{
			Width: int64(d.opts.ViewportWidth), Height: int64(d.opts.ViewportHeight), DeviceScaleFactor: 1})
		if err != nil {
			return fmt.Errorf("set the viewport: %w", err)
		}
	}
	return nil
}

// page describes t: its URL and title, and its index.
func (d *Driver) page(ctx context.Context, t *tab) (Page, error) {
	p := Page{Tab: slices.Index(d.tabs, t)}
	var v struct {
		URL   string `json:"u"`
		Title string `json:"t"`
	}
	if err := d.eval(ctx, t, `({u: location.href, t: document.title})`, &v); err == nil {
		p.URL, p.Title = v.URL, v.Title
		return p, nil
	}
	// A page busy loading may not answer scripts; the browser knows.
	res, err := cdp.Call(ctx, d.browser, target.GetTargetInfo, target.GetTargetInfoParams{TargetID: t.id})
	if err != nil {
		return p, err
	}
	p.URL, p.Title = res.TargetInfo.URL, res.TargetInfo.Title
	return p, nil
}

// eval evaluates a script of ours in t's page and decodes its value
// into out (when not nil).
func (d *Driver) eval(ctx context.Context, t *tab, expr string, out any) error {
	res, err := cdp.Call(ctx, t.t, runtime.Evaluate, runtime.EvaluateParams{Expression: expr, ReturnByValue: ptr(true), AwaitPromise: ptr(true)})
	if err != nil {
		return err
	}
	if res.ExceptionDetails != nil {
		return fmt.Errorf("script failed: %s", exceptionText(res.ExceptionDetails))
	}
	if out == nil || res.Result == nil || len(res.Result.Value) == 0 {
		return nil
	}
	return json.Unmarshal(res.Result.Value, out)
}

func exceptionText(ed *runtime.ExceptionDetails) string {
	msg := ed.Text
	if ed.Exception != nil && ed.Exception.Description != "" {
		msg = ed.Exception.Description
	} else if ed.Exception != nil && len(ed.Exception.Value) > 0 {
		msg = ed.Text + " " + string(ed.Exception.Value)
	}
	return truncate(msg, 2000)
}

func ptr[T any](v T) *T { return &v }

// Navigate implements Tools.
func (d *Driver) Navigate(ctx context.Context, req NavigateRequest) (Page, error) {
	if err := validate(req); err != nil {
		return Page{}, err
	}
	if err := d.checkScheme("url", req.URL); err != nil {
		return Page{}, err
	}
	limit := timeout(req.TimeoutMS)
	var p Page
	err := d.do(ctx, limit, "navigate", func(ctx context.Context, t *tab) error {
		if err := d.navigate(ctx, t, req.URL, limit); err != nil {
			return err
		}
		var err error
		p, err = d.page(ctx, t)
		return err
	})
	return p, err
}

func (d *Driver) checkScheme(field, raw string) error {
	if !d.opts.AllowFile && len(raw) >= 5 && strings.EqualFold(raw[:5], "file:") {
		return badRequest("%s: file: URLs are refused in this browser; serve the file over http", field)
	}
	return nil
}

// navigate loads raw (or steps through history) in t and waits for the
// page's load. On a timeout the load is stopped, so the tab stays usable.
func (d *Driver) navigate(ctx context.Context, t *tab, raw string, limit time.Duration) error {
	w := watchLoad(t)
	defer w.stop()
	switch raw {
	case NavigateBack, NavigateForward:
		h, err := cdp.Call(ctx, t.t, page.GetNavigationHistory, cdp.Empty{})
		if err != nil {
			return err
		}
		i := int(h.CurrentIndex) - 1
		if raw == NavigateForward {
			i = int(h.CurrentIndex) + 1
		}
		if i < 0 || i >= len(h.Entries) {
			return badRequest("url: %s: the tab has no page to go %s to", raw, raw)
		}
		if _, err := cdp.Call(ctx, t.t, page.NavigateToHistoryEntry, page.NavigateToHistoryEntryParams{EntryID: h.Entries[i].ID}); err != nil {
			return err
		}
	case NavigateReload:
		if _, err := cdp.Call(ctx, t.t, page.Reload, page.ReloadParams{}); err != nil {
			return d.stopAfter(ctx, t, err)
		}
	default:
		res, err := cdp.Call(ctx, t.t, page.Navigate, page.NavigateParams{URL: raw})
		if err != nil {
			return d.stopAfter(ctx, t, err)
		}
		if res.ErrorText != "" {
			return errorf(http.StatusBadGateway, CodeNavigationFailed, "navigate to %s: %s", truncate(raw, 200), res.ErrorText)
		}
		if res.LoaderID == "" {
			return nil // within the document: nothing loads
		}
	}
	if err := w.wait(ctx); err != nil {
		return d.stopAfter(ctx, t, err)
	}
	return nil
}

// stopAfter stops t's loading after a navigation failed or ran out of
// time, and returns err.
func (d *Driver) stopAfter(ctx context.Context, t *tab, err error) error {
	if ctx.Err() != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		cdp.Call(sctx, t.t, page.StopLoading, cdp.Empty{})
	}
	return err
}

// loadWatch notes the end of a navigation in a tab: the load event, the
// main frame stopping loading (a page restored from the cache), or a
// navigation within the document.
type loadWatch struct {
	ch    chan struct{}
	stops []func()
}

func watchLoad(t *tab) *loadWatch {
	w := &loadWatch{ch: make(chan struct{}, 1)}
	for _, m := range []string{"Page.loadEventFired", "Page.frameStoppedLoading", "Page.navigatedWithinDocument"} {
		evs, stop := t.t.Subscribe(m)
		w.stops = append(w.stops, stop)
		go func() {
			for ev := range evs {
				if m != "Page.loadEventFired" {
					var f struct {
						FrameID string `json:"frameId"`
					}
					if json.Unmarshal(ev, &f) != nil || f.FrameID != string(t.id) {
						continue
					}
				}
				select {
				case w.ch <- struct{}{}:
				default:
				}
			}
		}()
	}
	return w
}

func (w *loadWatch) wait(ctx context.Context) error {
	select {
	case <-w.ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *loadWatch) stop() {
	for _, s := range w.stops {
		s()
	}
}

// settle lets an action's consequence land before the page is described:
// if the action started a navigation in the main frame within a short
// moment, it waits (within ctx) for that page's load.
func (d *Driver) settle(ctx context.Context, t *tab, started <-chan struct{}, w *loadWatch) {
	timer := time.NewTimer(150 * time.Millisecond)
	defer timer.Stop()
	select {
	case <-started:
	case <-timer.C:
		return
	case <-ctx.Done():
		return
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	w.wait(wctx)
}

// watchStart notes a navigation starting in t's main frame.
func watchStart(t *tab) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	evs, stop := t.t.Subscribe("Page.frameStartedLoading")
	go func() {
		for ev := range evs {
			var f struct {
				FrameID string `json:"frameId"`
			}
			if json.Unmarshal(ev, &f) == nil && f.FrameID == string(t.id) {
				select {
				case ch <- struct{}{}:
				default:
				}
			}
		}
	}()
	return ch, stop
}

// Wait implements Tools.
func (d *Driver) Wait(ctx context.Context, req WaitRequest) (Page, error) {
	if err := validate(req); err != nil {
		return Page{}, err
	}
	limit := timeout(req.TimeoutMS)
	var p Page
	// The call's own deadline is a little longer than the wait, so that
	// the answer (found or not) is ours and not a cut connection's.
	err := d.do(ctx, limit+5*time.Second, "wait_for", func(ctx context.Context, t *tab) error {
		deadline := time.Now().Add(limit)
		needle, gone := req.Text, false
		if req.TextGone != "" {
			needle, gone = req.TextGone, true
		}
		if needle == "" {
			timer := time.NewTimer(limit)
			defer timer.Stop()
			select {
			case <-timer.C:
			case <-ctx.Done():
				return ctx.Err()
			}
		} else {
			q, _ := json.Marshal(needle)
			expr := `(() => { const b = document.body; return b ? b.innerText.includes(` + string(q) + `) : false })()`
			for {
				var has bool
				ectx, cancel := context.WithDeadline(ctx, deadline)
				err := d.eval(ectx, t, expr, &has)
				cancel()
				if err == nil && has != gone {
					break
				}
				if err != nil && ctx.Err() != nil {
					return err
				}
				if time.Until(deadline) <= 0 {
					if gone {
						return timedOut("wait_for: %q still in the page after %s", truncate(needle, 100), limit)
					}
					return timedOut("wait_for: %q did not appear within %s", truncate(needle, 100), limit)
				}
				timer := time.NewTimer(min(100*time.Millisecond, time.Until(deadline)))
				select {
				case <-timer.C:
				case <-ctx.Done():
					timer.Stop()
					return ctx.Err()
				}
			}
		}
		var err error
		p, err = d.page(ctx, t)
		return err
	})
	return p, err
}

// Evaluate implements Tools.
func (d *Driver) Evaluate(ctx context.Context, req EvaluateRequest) (Evaluation, error) {
	if err := validate(req); err != nil {
		return Evaluation{}, err
	}
	limit := timeout(req.TimeoutMS)
	var out Evaluation
	err := d.do(ctx, limit, "evaluate", func(ctx context.Context, t *tab) error {
		res, err := cdp.Call(ctx, t.t, runtime.Evaluate, runtime.EvaluateParams{
			Expression: req.Expression, ReturnByValue: ptr(true), AwaitPromise: ptr(true), UserGesture: ptr(true),
			Timeout: runtime.TimeDelta(limit.Milliseconds()),
		})
		if err != nil {
			if ctx.Err() != nil {
				// A script that loops for ever would hold the page.
				sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				cdp.Call(sctx, t.t, runtime.TerminateExecution, cdp.Empty{})
			}
			return err
		}
		if res.ExceptionDetails != nil {
			return errorf(http.StatusUnprocessableEntity, CodeEvaluateFailed, "%s", exceptionText(res.ExceptionDetails))
		}
		v, err := resultJSON(res.Result)
		if err != nil {
			return err
		}
		out.Value = v
		return nil
	})
	return out, err
}

// resultJSON is an evaluation's value as JSON, bounded.
func resultJSON(o *runtime.RemoteObject) (json.RawMessage, error) {
	var v json.RawMessage
	switch {
	case o == nil || o.Type == "undefined":
		v = json.RawMessage("null")
	case o.UnserializableValue != "":
		b, _ := json.Marshal(string(o.UnserializableValue)) // NaN, Infinity, -0, 12n
		v = b
	case len(o.Value) > 0:
		v = json.RawMessage(slices.Clone([]byte(o.Value)))
	default:
		v = json.RawMessage("null")
	}
	if len(v) > MaxEvaluateBytes {
		return nil, tooLarge("value: %d bytes of JSON, at most %d; return less (for example a slice or a count)", len(v), MaxEvaluateBytes)
	}
	return v, nil
}

var _ Tools = (*Driver)(nil)
