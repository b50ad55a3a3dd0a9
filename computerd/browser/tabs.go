package browser

import (
	"context"
	"slices"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/target"
)

// Tabs implements Tools.
func (d *Driver) Tabs(ctx context.Context, req TabsRequest) (Tabs, error) {
	if err := validate(req); err != nil {
		return Tabs{}, err
	}
	if err := d.checkScheme("url", req.URL); err != nil {
		return Tabs{}, err
	}
	var out Tabs
	err := d.do(ctx, DefaultTimeout, "tabs", func(ctx context.Context, cur *tab) error {
		switch req.Action {
		case TabsOpen:
			if len(d.tabs) >= MaxTabs {
				return badRequest("action: open: %d tabs are open, at most %d; close one first", len(d.tabs), MaxTabs)
			}
			t, err := d.createTab(ctx)
			if err != nil {
				return err
			}
			d.sel = len(d.tabs) - 1
			if err := d.attach(ctx, t); err != nil {
				return err
			}
			if err := d.activate(ctx, t); err != nil {
				return err
			}
			if req.URL != "" {
				if err := d.navigate(ctx, t, req.URL, DefaultTimeout); err != nil {
					return err
				}
			}
		case TabsSelect:
			if req.Index >= len(d.tabs) {
				return badRequest("index: no tab %d; %d tabs are open (0 to %d)", req.Index, len(d.tabs), len(d.tabs)-1)
			}
			d.sel = req.Index
			t := d.tabs[d.sel]
			if t.t == nil {
				if err := d.attach(ctx, t); err != nil {
					return err
				}
			}
			if err := d.activate(ctx, t); err != nil {
				return err
			}
		case TabsClose:
			if req.Index >= len(d.tabs) {
				return badRequest("index: no tab %d; %d tabs are open (0 to %d)", req.Index, len(d.tabs), len(d.tabs)-1)
			}
			if len(d.tabs) == 1 {
				// Closing the last tab leaves one blank tab.
				if _, err := d.createTab(ctx); err != nil {
					return err
				}
			}
			t := d.tabs[req.Index]
			if _, err := cdp.Call(ctx, d.browser, target.CloseTarget, target.CloseTargetParams{TargetID: t.id}); err != nil {
				return err
			}
			d.gone[t.id] = true
			if t.cancel != nil {
				t.cancel()
			}
			d.tabs = slices.Delete(d.tabs, req.Index, req.Index+1)
			if req.Index < d.sel || (req.Index == d.sel && d.sel > 0) {
				d.sel--
			}
			s := d.tabs[d.sel]
			if s.t == nil {
				if err := d.attach(ctx, s); err != nil {
					return err
				}
			}
			if err := d.activate(ctx, s); err != nil {
				return err
			}
		}
		var err error
		out, err = d.list(ctx)
		return err
	})
	return out, err
}

// activate brings t to the front: a hidden tab gets no frames, so it
// could not be captured or animate.
func (d *Driver) activate(ctx context.Context, t *tab) error {
	_, err := cdp.Call(ctx, d.browser, target.ActivateTarget, target.ActivateTargetParams{TargetID: t.id})
	return err
}

// list describes the tabs from the browser's target list.
func (d *Driver) list(ctx context.Context) (Tabs, error) {
	res, err := cdp.Call(ctx, d.browser, target.GetTargets, target.GetTargetsParams{})
	if err != nil {
		return Tabs{}, err
	}
	info := make(map[target.ID]*target.Info)
	for _, in := range res.TargetInfos {
		info[in.TargetID] = in
	}
	out := Tabs{Tabs: make([]Tab, 0, len(d.tabs)), Selected: d.sel}
	for i, t := range d.tabs {
		tb := Tab{Index: i}
		if in := info[t.id]; in != nil {
			tb.URL, tb.Title = in.URL, in.Title
		}
		out.Tabs = append(out.Tabs, tb)
	}
	return out, nil
}
