package browser

import (
	"bytes"
	"context"
	"image"
	_ "image/jpeg" // decodes the size of jpeg screenshots
	_ "image/png"  // and of png ones

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
)

// maxFullPageHeight bounds a full-page screenshot's height in CSS pixels
// (Chromium's own texture limit).
const maxFullPageHeight = 16384

// Screenshot implements Tools.
func (d *Driver) Screenshot(ctx context.Context, req ScreenshotRequest) (Screenshot, error) {
	if err := validate(req); err != nil {
		return Screenshot{}, err
	}
	format := req.Format
	if format == "" {
		format = FormatPNG
	}
	var shot Screenshot
	err := d.do(ctx, DefaultTimeout, "screenshot", func(ctx context.Context, t *tab) error {
		defer d.release(ctx, t)
		params := page.CaptureScreenshotParams{Format: page.CaptureScreenshotFormat(format)}
		if format == FormatJPEG {
			q := int64(req.Quality)
			if q == 0 {
				q = DefaultJPEGQuality
			}
			params.Quality = &q
		}
		switch {
		case req.Ref != "":
			e, err := d.resolve(ctx, t, req.Ref)
			if err != nil {
				return err
			}
			var r struct{ X, Y, W, H float64 }
			if err := d.callOn(ctx, t, e, `function() {
				this.scrollIntoView({block: 'center', inline: 'center', behavior: 'instant'});
				const r = this.getBoundingClientRect();
				return {X: r.left + window.scrollX, Y: r.top + window.scrollY, W: r.width, H: r.height};
			}`, &r); err != nil {
				return err
			}
			if r.W < 1 || r.H < 1 {
				return notInteractable("ref %s: the element has an empty box", req.Ref)
			}
			params.Clip = &page.Viewport{X: r.X, Y: r.Y, Width: r.W, Height: min(r.H, maxFullPageHeight), Scale: 1}
			params.CaptureBeyondViewport = ptr(true)
		case req.FullPage:
			m, err := cdp.Call(ctx, t.t, page.GetLayoutMetrics, cdp.Empty{})
			if err != nil {
				return err
			}
			if cs := m.CSSContentSize; cs != nil && cs.Width > 0 && cs.Height > 0 {
				params.Clip = &page.Viewport{Width: cs.Width, Height: min(cs.Height, maxFullPageHeight), Scale: 1}
				params.CaptureBeyondViewport = ptr(true)
			}
		}
		res, err := cdp.Call(ctx, t.t, page.CaptureScreenshot, params)
		if err != nil {
			return err
		}
		if len(res.Data) > MaxScreenshotBytes {
			return tooLarge("screenshot: %d bytes, at most %d; use format jpeg, a lower quality or a smaller area", len(res.Data), MaxScreenshotBytes)
		}
		cfg, _, err := image.DecodeConfig(bytes.NewReader(res.Data))
		if err != nil {
			return browserFailed("screenshot: the browser sent an image that does not decode: %v", err)
		}
		shot = Screenshot{Format: format, Data: res.Data, Width: cfg.Width, Height: cfg.Height}
		return nil
	})
	return shot, err
}
