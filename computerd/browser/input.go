package browser

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/runtime"
)

// objectGroup holds the page objects a call resolves; it is released at
// the call's end.
const objectGroup = "berth-browser"

// element is a resolved reference.
type element struct {
	ref string
	id  runtime.RemoteObjectID
}

// resolve finds the element ref names in t's page, in the registry the
// snapshots keep in the driver's isolated world, or answers
// CodeRefNotFound.
func (d *Driver) resolve(ctx context.Context, t *tab, ref string) (element, error) {
	n, err := parseRef("ref", ref, true)
	if err != nil {
		return element{}, err
	}
	o, err := d.inWorld(ctx, t, fmt.Sprintf("berth.lookup(%d)", n), false)
	if err != nil {
		return element{}, err
	}
	if o == nil || o.ObjectID == "" {
		return element{}, refNotFound(ref, "no such element in the page (any more); take a new snapshot")
	}
	return element{ref: ref, id: o.ObjectID}, nil
}

// release frees the page objects the call resolved.
func (d *Driver) release(ctx context.Context, t *tab) {
	cdp.Call(ctx, t.t, runtime.ReleaseObjectGroup, runtime.ReleaseObjectGroupParams{ObjectGroup: objectGroup})
}

// callOn runs fn with the element as this, decoding its value into out
// (when not nil).
func (d *Driver) callOn(ctx context.Context, t *tab, e element, fn string, out any, args ...any) error {
	var cargs []*runtime.CallArgument
	for _, a := range args {
		b, err := json.Marshal(a)
		if err != nil {
			return err
		}
		cargs = append(cargs, &runtime.CallArgument{Value: b})
	}
	res, err := cdp.Call(ctx, t.t, runtime.CallFunctionOn, runtime.CallFunctionOnParams{
		FunctionDeclaration: fn, ObjectID: e.id, Arguments: cargs, ReturnByValue: ptr(true), AwaitPromise: ptr(true),
	})
	if err != nil {
		if isNoNode(err) {
			return refNotFound(e.ref, "the element is no longer in the page")
		}
		return err
	}
	if res.ExceptionDetails != nil {
		return fmt.Errorf("ref %s: %s", e.ref, exceptionText(res.ExceptionDetails))
	}
	if out == nil || res.Result == nil || len(res.Result.Value) == 0 {
		return nil
	}
	return json.Unmarshal(res.Result.Value, out)
}

// centre scrolls the element into view and returns the centre of its
// first box, in viewport coordinates.
func (d *Driver) centre(ctx context.Context, t *tab, e element) (x, y float64, err error) {
	if _, err := cdp.Call(ctx, t.t, dom.ScrollIntoViewIfNeeded, dom.ScrollIntoViewIfNeededParams{ObjectID: e.id}); err != nil {
		if isNoNode(err) {
			return 0, 0, refNotFound(e.ref, "the element is no longer in the page")
		}
		return 0, 0, notInteractable("ref %s: cannot be scrolled into view: %v", e.ref, err)
	}
	res, err := cdp.Call(ctx, t.t, dom.GetContentQuads, dom.GetContentQuadsParams{ObjectID: e.id})
	if err != nil || len(res.Quads) == 0 {
		return 0, 0, notInteractable("ref %s: the element has no box on the page (hidden or not rendered)", e.ref)
	}
	for _, q := range res.Quads {
		if len(q) != 8 {
			continue
		}
		x = (q[0] + q[2] + q[4] + q[6]) / 4
		y = (q[1] + q[3] + q[5] + q[7]) / 4
		if area(q) > 0.5 {
			return x, y, nil
		}
	}
	return 0, 0, notInteractable("ref %s: the element has an empty box", e.ref)
}

func area(q dom.Quad) float64 {
	a := 0.0
	for i := 0; i < 4; i++ {
		j := (i + 1) % 4
		a += q[2*i]*q[2*j+1] - q[2*j]*q[2*i+1]
	}
	if a < 0 {
		a = -a
	}
	return a / 2
}

// Click implements Tools.
func (d *Driver) Click(ctx context.Context, req ClickRequest) (Page, error) {
	if err := validate(req); err != nil {
		return Page{}, err
	}
	var p Page
	err := d.do(ctx, DefaultTimeout, "click", func(ctx context.Context, t *tab) error {
		defer d.release(ctx, t)
		e, err := d.resolve(ctx, t, req.Ref)
		if err != nil {
			return err
		}
		started, stop := watchStart(t)
		defer stop()
		w := watchLoad(t)
		defer w.stop()
		if err := d.click(ctx, t, e, req.Button, max(req.Clicks, 1)); err != nil {
			return err
		}
		d.settle(ctx, t, started, w)
		p, err = d.page(ctx, t)
		return err
	})
	return p, err
}

func (d *Driver) click(ctx context.Context, t *tab, e element, button string, clicks int) error {
	x, y, err := d.centre(ctx, t, e)
	if err != nil {
		return err
	}
	b, bits := input.MouseButtonLeft, int64(1)
	switch button {
	case "right":
		b, bits = input.MouseButtonRight, 2
	case "middle":
		b, bits = input.MouseButtonMiddle, 4
	}
	mouse := func(typ input.DispatchMouseEventType, btn input.MouseButton, buttons, count int64) error {
		_, err := cdp.Call(ctx, t.t, input.DispatchMouseEvent, input.DispatchMouseEventParams{
			Type: typ, X: x, Y: y, Button: btn, Buttons: buttons, ClickCount: count})
		return err
	}
	if err := mouse(input.DispatchMouseEventTypeMouseMoved, input.MouseButtonNone, 0, 0); err != nil {
		return err
	}
	for i := 1; i <= clicks; i++ {
		if err := mouse(input.DispatchMouseEventTypeMousePressed, b, bits, int64(i)); err != nil {
			return err
		}
		if err := mouse(input.DispatchMouseEventTypeMouseReleased, b, 0, int64(i)); err != nil {
			return err
		}
	}
	return nil
}

// focus focuses the element, clicking it when focusing by script does
// not take.
func (d *Driver) focus(ctx context.Context, t *tab, e element) error {
	var focused bool
	err := d.callOn(ctx, t, e, `function() {
		this.focus();
		let a = document.activeElement;
		while (a && a.shadowRoot && a.shadowRoot.activeElement) a = a.shadowRoot.activeElement;
		return a === this || this.contains(a);
	}`, &focused)
	if err != nil {
		return err
	}
	if focused {
		return nil
	}
	return d.click(ctx, t, e, "left", 1)
}

// Type implements Tools.
func (d *Driver) Type(ctx context.Context, req TypeRequest) (Page, error) {
	if err := validate(req); err != nil {
		return Page{}, err
	}
	var p Page
	err := d.do(ctx, DefaultTimeout, "type", func(ctx context.Context, t *tab) error {
		defer d.release(ctx, t)
		e, err := d.resolve(ctx, t, req.Ref)
		if err != nil {
			return err
		}
		if err := d.focus(ctx, t, e); err != nil {
			return err
		}
		if req.Clear {
			var editable bool
			err := d.callOn(ctx, t, e, `function() {
				if (this instanceof HTMLInputElement || this instanceof HTMLTextAreaElement) { this.select(); return true; }
				if (this.isContentEditable) {
					const r = document.createRange(); r.selectNodeContents(this);
					const s = window.getSelection(); s.removeAllRanges(); s.addRange(r); return true;
				}
				return false;
			}`, &editable)
			if err != nil {
				return err
			}
			if !editable {
				return notInteractable("ref %s: the element takes no text (not a field or editable)", req.Ref)
			}
			if err := d.press(ctx, t, combo{key: namedKeys["backspace"]}); err != nil {
				return err
			}
		}
		if req.Text != "" {
			if _, err := cdp.Call(ctx, t.t, input.InsertText, input.InsertTextParams{Text: req.Text}); err != nil {
				return err
			}
		}
		if req.Submit {
			started, stop := watchStart(t)
			defer stop()
			w := watchLoad(t)
			defer w.stop()
			if err := d.press(ctx, t, combo{key: namedKeys["enter"]}); err != nil {
				return err
			}
			d.settle(ctx, t, started, w)
		}
		p, err = d.page(ctx, t)
		return err
	})
	return p, err
}

func (d *Driver) press(ctx context.Context, t *tab, c combo) error {
	for _, ev := range c.events() {
		if _, err := cdp.Call(ctx, t.t, input.DispatchKeyEvent, *ev); err != nil {
			return err
		}
	}
	return nil
}

// Press implements Tools.
func (d *Driver) Press(ctx context.Context, req PressRequest) (Page, error) {
	if err := validate(req); err != nil {
		return Page{}, err
	}
	c, _ := parseCombo(req.Key)
	var p Page
	err := d.do(ctx, DefaultTimeout, "press", func(ctx context.Context, t *tab) error {
		defer d.release(ctx, t)
		if req.Ref != "" {
			e, err := d.resolve(ctx, t, req.Ref)
			if err != nil {
				return err
			}
			if err := d.focus(ctx, t, e); err != nil {
				return err
			}
		}
		started, stop := watchStart(t)
		defer stop()
		w := watchLoad(t)
		defer w.stop()
		if err := d.press(ctx, t, c); err != nil {
			return err
		}
		d.settle(ctx, t, started, w)
		var err error
		p, err = d.page(ctx, t)
		return err
	})
	return p, err
}

// scrollScript scrolls the element under the viewport's centre that can
// scroll that way, or the page.
const scrollScript = `(function(dx, dy) {
	const can = (el) => {
		const s = getComputedStyle(el);
		const y = dy !== 0 && /(auto|scroll|overlay)/.test(s.overflowY) && el.scrollHeight > el.clientHeight;
		const x = dx !== 0 && /(auto|scroll|overlay)/.test(s.overflowX) && el.scrollWidth > el.clientWidth;
		return x || y;
	};
	let el = document.elementFromPoint(innerWidth / 2, innerHeight / 2);
	while (el && el !== document.body && el !== document.documentElement && !can(el)) el = el.parentElement;
	if (!el || el === document.body || el === document.documentElement) el = document.scrollingElement || document.documentElement;
	el.scrollBy({left: dx, top: dy, behavior: 'instant'});
	return true;
})`

// Scroll implements Tools.
func (d *Driver) Scroll(ctx context.Context, req ScrollRequest) (Page, error) {
	if err := validate(req); err != nil {
		return Page{}, err
	}
	var p Page
	err := d.do(ctx, DefaultTimeout, "scroll", func(ctx context.Context, t *tab) error {
		defer d.release(ctx, t)
		if req.Ref != "" {
			e, err := d.resolve(ctx, t, req.Ref)
			if err != nil {
				return err
			}
			if err := d.callOn(ctx, t, e, `function() { this.scrollIntoView({block: 'center', inline: 'center', behavior: 'instant'}) }`, nil); err != nil {
				return err
			}
		} else {
			expr := fmt.Sprintf("%s(%d, %d)", scrollScript, req.DeltaX, req.DeltaY)
			if err := d.eval(ctx, t, expr, nil); err != nil {
				return err
			}
		}
		var err error
		p, err = d.page(ctx, t)
		return err
	})
	return p, err
}
