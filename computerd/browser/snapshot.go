package browser

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/chromedp/cdproto"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
)

// pageScript defines berth.snapshot and berth.lookup in the driver's
// isolated world of a page: the snapshot is built inside the page, by one
// walk of its DOM, and the registry of refs lives there too.
//
//go:embed snapshot.js
var pageScript string

// worldName names the driver's isolated world (DevTools shows it).
const worldName = "berth"

// Snapshot implements Tools. The tree is built by pageScript in an
// isolated world of the tab's main frame (the page's own scripts cannot
// see or change it), bounded there to limit bytes, so that no more than
// the answer crosses the connection.
func (d *Driver) Snapshot(ctx context.Context, req SnapshotRequest) (Snapshot, error) {
	if err := validate(req); err != nil {
		return Snapshot{}, err
	}
	limit := req.MaxBytes
	if limit == 0 {
		limit = DefaultSnapshotBytes
	}
	var s Snapshot
	err := d.do(ctx, DefaultTimeout, "snapshot", func(ctx context.Context, t *tab) error {
		start := time.Now()
		var r struct {
			Tree      string `json:"tree"`
			Truncated bool   `json:"truncated"`
			Next      int64  `json:"next"`
		}
		res, err := d.inWorld(ctx, t, fmt.Sprintf("berth.snapshot(%d, %d)", limit, d.nextRef), true)
		if err != nil {
			return err
		}
		if res == nil || json.Unmarshal(res.Value, &r) != nil {
			return errors.New("snapshot: the page script gave no tree")
		}
		d.log.Debug("snapshot", "bytes", len(r.Tree), "took", time.Since(start))
		d.nextRef = max(d.nextRef, r.Next)
		s.Tree, s.Truncated = r.Tree, r.Truncated
		if len(s.Tree) > limit {
			// The script counts as we do; this only keeps the bound if
			// it ever did not.
			s.Tree, s.Truncated = s.Tree[:strings.LastIndexByte(s.Tree[:limit], '\n')+1], true
		}
		s.Nodes = strings.Count(s.Tree, "\n")
		s.BrowserPage, err = d.page(ctx, t)
		return err
	})
	return s, err
}

// inWorld evaluates expr in the driver's isolated world of t's main frame,
// by value or as an object of objectGroup. It makes the world (and
// defines pageScript in it) when the tab has none yet or the document it
// was made in is gone: refs given in an earlier document are then
// unknown.
func (d *Driver) inWorld(ctx context.Context, t *tab, expr string, byValue bool) (*runtime.RemoteObject, error) {
	params := runtime.EvaluateParams{Expression: expr, ObjectGroup: objectGroup, ReturnByValue: ptr(byValue)}
	if dl, ok := ctx.Deadline(); ok {
		params.Timeout = runtime.TimeDelta(max(time.Until(dl).Milliseconds(), 1))
	}
	for attempt := 0; ; attempt++ {
		if t.world == "" {
			if err := d.makeWorld(ctx, t); err != nil {
				return nil, err
			}
		}
		params.UniqueContextID = t.world
		res, err := cdp.Call(ctx, t.t, runtime.Evaluate, params)
		if err != nil {
			if isNoContext(err) && attempt == 0 {
				t.world = ""
				continue
			}
			return nil, err
		}
		if res.ExceptionDetails != nil {
			return nil, fmt.Errorf("page script failed: %s", exceptionText(res.ExceptionDetails))
		}
		return res.Result, nil
	}
}

// makeWorld makes the driver's isolated world in t's current document and
// defines pageScript in it.
func (d *Driver) makeWorld(ctx context.Context, t *tab) error {
	// The world is named by its unique id: a context's plain id may be
	// given again by another renderer process after a navigation.
	evs, stop := t.t.Subscribe("Runtime.executionContextCreated")
	defer stop()
	res, err := cdp.Call(ctx, t.t, page.CreateIsolatedWorld, page.CreateIsolatedWorldParams{FrameID: cdp.FrameID(t.id), WorldName: worldName})
	if err != nil {
		return fmt.Errorf("make the page's isolated world: %w", err)
	}
	timer := time.NewTimer(5 * time.Second)
	defer timer.Stop()
	unique := ""
	for unique == "" {
		select {
		case ev, ok := <-evs:
			if !ok {
				return errors.New("make the page's isolated world: the tab closed")
			}
			var e struct {
				Context struct {
					ID       runtime.ExecutionContextID `json:"id"`
					UniqueID string                     `json:"uniqueId"`
				} `json:"context"`
			}
			if json.Unmarshal(ev, &e) == nil && e.Context.ID == res.ExecutionContextID {
				unique = e.Context.UniqueID
			}
		case <-timer.C:
			return errors.New("make the page's isolated world: the browser did not report it")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	def, err := cdp.Call(ctx, t.t, runtime.Evaluate, runtime.EvaluateParams{Expression: pageScript, UniqueContextID: unique, ReturnByValue: ptr(true)})
	if err != nil {
		return fmt.Errorf("define the page script: %w", err)
	}
	if def.ExceptionDetails != nil {
		return fmt.Errorf("define the page script: %s", exceptionText(def.ExceptionDetails))
	}
	t.world = unique
	return nil
}

// isNoContext tells an evaluation in a context that is gone (its document
// was replaced).
func isNoContext(err error) bool {
	var ce *cdproto.Error
	return errors.As(err, &ce) && strings.Contains(strings.ToLower(ce.Message), "cannot find context")
}
