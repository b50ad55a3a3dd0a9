package browser

import (
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// History steps a navigate request may name instead of a URL.
const (
	NavigateBack    = "back"
	NavigateForward = "forward"
	NavigateReload  = "reload"
)

// Validate checks the request's fields against the protocol's limits.
// URLs are http, https or about (file only where the Driver allows it).
func checkNavigate(r NavigateRequest) error {
	switch r.URL {
	case NavigateBack, NavigateForward, NavigateReload:
	default:
		if err := checkURL("url", r.URL, true); err != nil {
			return err
		}
	}
	return checkTimeout(r.TimeoutMS)
}

// Validate checks the request's fields against the protocol's limits.
func checkSnapshot(r SnapshotRequest) error {
	if r.MaxBytes < 0 || r.MaxBytes > MaxSnapshotBytes {
		return badRequest("maxBytes: %d, must be 0 (the default, %d) to %d", r.MaxBytes, DefaultSnapshotBytes, MaxSnapshotBytes)
	}
	return nil
}

// Validate checks the request's fields against the protocol's limits.
func checkClick(r ClickRequest) error {
	if _, err := parseRef("ref", r.Ref, true); err != nil {
		return err
	}
	switch r.Button {
	case "", "left", "right", "middle":
	default:
		return badRequest("button: %q, must be left, right or middle", r.Button)
	}
	if r.Clicks < 0 || r.Clicks > 3 {
		return badRequest("clicks: %d, must be 1 to 3", r.Clicks)
	}
	return nil
}

// Validate checks the request's fields against the protocol's limits.
func checkType(r TypeRequest) error {
	if _, err := parseRef("ref", r.Ref, true); err != nil {
		return err
	}
	if n := utf8.RuneCountInString(r.Text); n > MaxTextChars {
		return badRequest("text: %d characters, at most %d in one call; type it in parts", n, MaxTextChars)
	}
	if !utf8.ValidString(r.Text) {
		return badRequest("text: not valid UTF-8")
	}
	return nil
}

// Validate checks the request's fields against the protocol's limits.
func checkPress(r PressRequest) error {
	if _, err := parseRef("ref", r.Ref, false); err != nil {
		return err
	}
	_, err := parseCombo(r.Key)
	return err
}

// Validate checks the request's fields against the protocol's limits.
func checkScroll(r ScrollRequest) error {
	if _, err := parseRef("ref", r.Ref, false); err != nil {
		return err
	}
	for _, d := range []struct {
		name string
		v    int
	}{{"deltaX", r.DeltaX}, {"deltaY", r.DeltaY}} {
		if d.v < -MaxScrollPixels || d.v > MaxScrollPixels {
			return badRequest("%s: %d pixels, at most %d either way", d.name, d.v, MaxScrollPixels)
		}
	}
	if r.Ref != "" && (r.DeltaX != 0 || r.DeltaY != 0) {
		return badRequest("ref: give either ref or deltaX/deltaY, not both")
	}
	if r.Ref == "" && r.DeltaX == 0 && r.DeltaY == 0 {
		return badRequest("deltaY: give ref, or deltaX or deltaY in pixels (positive is right and down)")
	}
	return nil
}

// Validate checks the request's fields against the protocol's limits.
func checkScreenshot(r ScreenshotRequest) error {
	switch r.Format {
	case "", FormatPNG:
		if r.Quality != 0 {
			return badRequest("quality: only for format jpeg")
		}
	case FormatJPEG:
		if r.Quality < 0 || r.Quality > 100 {
			return badRequest("quality: %d, must be 1 to 100 (0 is the default, %d)", r.Quality, DefaultJPEGQuality)
		}
	default:
		return badRequest("format: %q, must be png or jpeg", r.Format)
	}
	if _, err := parseRef("ref", r.Ref, false); err != nil {
		return err
	}
	if r.Ref != "" && r.FullPage {
		return badRequest("fullPage: give either ref or fullPage, not both")
	}
	return nil
}

// Validate checks the request's fields against the protocol's limits.
func checkTabs(r TabsRequest) error {
	switch r.Action {
	case "", TabsList, TabsSelect, TabsClose:
		if r.URL != "" {
			return badRequest("url: only for action open")
		}
	case TabsOpen:
		if r.URL != "" {
			if err := checkURL("url", r.URL, true); err != nil {
				return err
			}
		}
	default:
		return badRequest("action: %q, must be list, open, select or close", r.Action)
	}
	if r.Index < 0 || r.Index >= MaxTabs {
		return badRequest("index: %d, must be 0 to %d", r.Index, MaxTabs-1)
	}
	return nil
}

// Validate checks the request's fields against the protocol's limits.
func checkWait(r WaitRequest) error {
	for _, f := range []struct{ name, v string }{{"text", r.Text}, {"textGone", r.TextGone}} {
		if n := utf8.RuneCountInString(f.v); n > MaxTextChars {
			return badRequest("%s: %d characters, at most %d", f.name, n, MaxTextChars)
		}
	}
	if r.Text != "" && r.TextGone != "" {
		return badRequest("textGone: give either text or textGone, not both")
	}
	return checkTimeout(r.TimeoutMS)
}

// Validate checks the request's fields against the protocol's limits.
func checkEvaluate(r EvaluateRequest) error {
	if strings.TrimSpace(r.Expression) == "" {
		return badRequest("expression: required")
	}
	if len(r.Expression) > MaxExpressionBytes {
		return badRequest("expression: %d bytes, at most %d", len(r.Expression), MaxExpressionBytes)
	}
	return checkTimeout(r.TimeoutMS)
}

func checkTimeout(ms int) error {
	if ms < 0 || time.Duration(ms)*time.Millisecond > MaxTimeout {
		return badRequest("timeoutMs: %d, must be 0 (the default, %d) to %d", ms, DefaultTimeout.Milliseconds(), MaxTimeout.Milliseconds())
	}
	return nil
}

// timeout is a request's timeout in milliseconds, or the default.
func timeout(ms int) time.Duration {
	if ms <= 0 {
		return DefaultTimeout
	}
	return time.Duration(ms) * time.Millisecond
}

// checkURL checks a URL to load: http, https, about or file (file is
// checked again by the Driver, which may refuse it).
func checkURL(field, raw string, required bool) error {
	if raw == "" {
		if required {
			return badRequest("%s: required (an http or https URL, or back, forward or reload)", field)
		}
		return nil
	}
	if len(raw) > MaxURLBytes {
		return badRequest("%s: %d bytes, at most %d", field, len(raw), MaxURLBytes)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return badRequest("%s: %v", field, err)
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
		if u.Host == "" {
			return badRequest("%s: %q has no host", field, raw)
		}
	case "about", "file":
	case "":
		return badRequest("%s: %q has no scheme; write https://%s", field, raw, raw)
	default:
		return badRequest("%s: scheme %q refused; use http, https or about", field, u.Scheme)
	}
	return nil
}

var refPattern = regexp.MustCompile(`^e[1-9][0-9]{0,17}$`)

// parseRef reads an element reference, "e" and the number a snapshot gave
// the element.
func parseRef(field, ref string, required bool) (int64, error) {
	if ref == "" {
		if required {
			return 0, badRequest("%s: required (an element reference such as e12 from a snapshot)", field)
		}
		return 0, nil
	}
	if !refPattern.MatchString(ref) {
		return 0, badRequest("%s: %q is not an element reference such as e12 from a snapshot", field, truncate(ref, 40))
	}
	n, err := strconv.ParseInt(ref[1:], 10, 64)
	if err != nil {
		return 0, badRequest("%s: %q: %v", field, ref, err)
	}
	return n, nil
}

// truncate cuts s to at most n runes, marking the cut.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}

// validate checks a tool's request: the field, and the limit it is over,
// in a 400 (or 413) naming them.
func validate(req any) error {
	switch r := req.(type) {
	case NavigateRequest:
		return checkNavigate(r)
	case SnapshotRequest:
		return checkSnapshot(r)
	case ClickRequest:
		return checkClick(r)
	case TypeRequest:
		return checkType(r)
	case PressRequest:
		return checkPress(r)
	case ScrollRequest:
		return checkScroll(r)
	case ScreenshotRequest:
		return checkScreenshot(r)
	case TabsRequest:
		return checkTabs(r)
	case WaitRequest:
		return checkWait(r)
	case EvaluateRequest:
		return checkEvaluate(r)
	}
	return nil
}
