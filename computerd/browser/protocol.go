// Package browser is the browser tools: what an agent does with a web
// browser (navigate, read the page's accessibility tree, click and type by
// element reference, press keys, scroll, take screenshots, manage tabs,
// wait for text, evaluate JavaScript), over the Chrome DevTools Protocol.
//
// One implementation serves two places. In a computer, computerd starts
// one Chromium on demand under the computer's proxy, keeps it for the
// session and serves the tools under /v1/browser/ (Server); the supervisor
// reaches them with a Client. For a hosted browser session (Browserbase,
// Browser Use) the supervisor drives the provider's CDP URL itself with a
// Driver. Both implement Tools and answer failures as *httpjson.Error with
// one of the codes below, so callers map them the same way.
//
// Element references ("e" and a number) name DOM nodes by Chromium's own
// backend node id: a reference stays valid for as long as the node lives in
// the page, across calls and across processes, with no table kept here.
package browser

import (
	"context"
	"encoding/json"
	"time"
)

// Paths computerd serves, each a POST of the tool's request as JSON.
const (
	PathPrefix     = "/v1/browser/"
	PathNavigate   = PathPrefix + "navigate"
	PathSnapshot   = PathPrefix + "snapshot"
	PathClick      = PathPrefix + "click"
	PathType       = PathPrefix + "type"
	PathPress      = PathPrefix + "press"
	PathScroll     = PathPrefix + "scroll"
	PathScreenshot = PathPrefix + "screenshot"
	PathTabs       = PathPrefix + "tabs"
	PathWait       = PathPrefix + "wait_for"
	PathEvaluate   = PathPrefix + "evaluate"
)

// Error codes of the browser tools, answered in the httpjson envelope.
const (
	// CodeBadRequest: a field is missing, malformed or over its limit
	// (400); the message names the field and the limit.
	CodeBadRequest = "bad_request"
	// CodeRefNotFound: the element reference names no node of the
	// selected tab's page, for example after the page navigated (404).
	// A new snapshot gives current references.
	CodeRefNotFound = "ref_not_found"
	// CodeNotInteractable: the element has no box to click or cannot
	// take text (409).
	CodeNotInteractable = "not_interactable"
	// CodeTimeout: the page did not load, or the awaited text did not
	// appear, within the call's timeout (504). The browser stays usable.
	CodeTimeout = "browser_timeout"
	// CodeBrowserFailed: the browser could not be started or reached, or
	// it crashed during the call (502). In a computer the next call
	// starts a new one.
	CodeBrowserFailed = "browser_failed"
	// CodeEvaluateFailed: the script threw; the message has the exception
	// (422).
	CodeEvaluateFailed = "evaluate_failed"
	// CodeNavigationFailed: the page could not be loaded at all (a name
	// that does not resolve, a refused connection, a TLS failure); the
	// message has the browser's net error (502). A page that answers
	// with an HTTP error status loads normally.
	CodeNavigationFailed = "navigation_failed"
)

// Limits of the browser tools' requests and answers.
const (
	MaxURLBytes          = 8 << 10  // a navigate or tab URL
	MaxTextChars         = 10000    // characters of one type call
	MaxKeyChars          = 100      // a press's key or combination
	MaxExpressionBytes   = 64 << 10 // a script to evaluate
	MaxEvaluateBytes     = 256 << 10
	DefaultSnapshotBytes = 64 << 10 // of a snapshot's tree
	MaxSnapshotBytes     = 1 << 20
	MaxScrollPixels      = 100000 // either direction
	MaxTabs              = 20     // tabs open at once
	MaxScreenshotBytes   = 16 << 20
	DefaultJPEGQuality   = 80
	DefaultTimeout       = 30 * time.Second // navigate, tab open, wait
	MaxTimeout           = 60 * time.Second
	// MaxRequestBytes bounds a request's body.
	MaxRequestBytes = 64<<10 + MaxExpressionBytes
)

// Page is the selected tab after an action: where it is and what it is.
type Page struct {
	URL   string `json:"url"`
	Title string `json:"title"`
	// Tab is the selected tab's index in the tab list.
	Tab int `json:"tab"`
}

// NavigateRequest loads a URL in the selected tab and waits for its load
// event. URL may also be "back", "forward" or "reload".
type NavigateRequest struct {
	URL string `json:"url"`
	// TimeoutMS bounds the load: default DefaultTimeout, at most
	// MaxTimeout.
	TimeoutMS int `json:"timeoutMs,omitempty"`
}

// SnapshotRequest asks for the selected tab's accessibility tree.
type SnapshotRequest struct {
	// MaxBytes bounds the tree: default DefaultSnapshotBytes, at most
	// MaxSnapshotBytes. A longer tree is cut at a line's end and
	// Truncated is set.
	MaxBytes int `json:"maxBytes,omitempty"`
}

// Snapshot is a page's accessibility tree as text, one node a line,
// indented two spaces a level:
//
//   - heading "Sign in" [level=1]
//   - textbox "Email" [ref=e14] value="a@b.c"
//   - button "Send" [ref=e17] [disabled]
//
// Nodes an agent can act on (links, buttons, fields, boxes with a name)
// carry a ref for the other tools. Nodes with no role and no name are
// left out and their children lifted.
type Snapshot struct {
	Page
	Tree      string `json:"tree"`
	Nodes     int    `json:"nodes"` // lines in Tree
	Truncated bool   `json:"truncated,omitempty"`
}

// ClickRequest clicks the centre of an element, scrolled into view first.
type ClickRequest struct {
	Ref    string `json:"ref"`
	Button string `json:"button,omitempty"` // left (default), right, middle
	Clicks int    `json:"clicks,omitempty"` // 1 (default) to 3
}

// TypeRequest focuses an element and types text into it.
type TypeRequest struct {
	Ref  string `json:"ref"`
	Text string `json:"text"`
	// Clear empties the field first; otherwise the text goes where the
	// caret is after focusing.
	Clear bool `json:"clear,omitempty"`
	// Submit presses Enter after the text.
	Submit bool `json:"submit,omitempty"`
}

// PressRequest presses a key or a combination such as "Enter", "Tab",
// "ArrowDown", "Control+a" or "Shift+Tab" (the DOM's key names, with
// Control, Shift, Alt and Meta as modifiers), in the focused element or,
// with Ref, in that element after focusing it.
type PressRequest struct {
	Key string `json:"key"`
	Ref string `json:"ref,omitempty"`
}

// ScrollRequest scrolls an element into view (Ref) or the page by a number
// of pixels (DeltaX, DeltaY; positive is right and down).
type ScrollRequest struct {
	Ref    string `json:"ref,omitempty"`
	DeltaX int    `json:"deltaX,omitempty"`
	DeltaY int    `json:"deltaY,omitempty"`
}

// Image formats of a screenshot.
const (
	FormatPNG  = "png"
	FormatJPEG = "jpeg"
)

// ScreenshotRequest captures the selected tab's viewport, the whole page,
// or one element.
type ScreenshotRequest struct {
	Format   string `json:"format,omitempty"`  // png (default) or jpeg
	Quality  int    `json:"quality,omitempty"` // jpeg only, 1..100
	FullPage bool   `json:"fullPage,omitempty"`
	Ref      string `json:"ref,omitempty"`
}

// Screenshot is an image of the page.
type Screenshot struct {
	Format string `json:"format"`
	Data   []byte `json:"data"` // base64 in JSON
	Width  int    `json:"width"`
	Height int    `json:"height"`
}

// Tab actions.
const (
	TabsList   = "list"
	TabsOpen   = "open"
	TabsSelect = "select"
	TabsClose  = "close"
)

// TabsRequest lists, opens, selects or closes tabs. Open selects the new
// tab (about:blank without a URL); closing the selected tab selects the
// one before it; closing the last tab leaves one blank tab.
type TabsRequest struct {
	Action string `json:"action,omitempty"` // default TabsList
	URL    string `json:"url,omitempty"`    // open
	Index  int    `json:"index,omitempty"`  // select, close
}

// Tab is one open tab.
type Tab struct {
	Index int    `json:"index"`
	URL   string `json:"url"`
	Title string `json:"title"`
}

// Tabs is the tab list after a tabs call.
type Tabs struct {
	Tabs     []Tab `json:"tabs"`
	Selected int   `json:"selected"`
}

// WaitRequest waits until Text appears in the selected tab's page, until
// TextGone is no longer in it, or, with neither, for TimeoutMS.
type WaitRequest struct {
	Text      string `json:"text,omitempty"`
	TextGone  string `json:"textGone,omitempty"`
	TimeoutMS int    `json:"timeoutMs,omitempty"` // default DefaultTimeout, at most MaxTimeout
}

// EvaluateRequest runs a JavaScript expression in the selected tab's page
// and returns its value; a promise is awaited. The supervisor allows it
// only on connections that ask for it.
type EvaluateRequest struct {
	Expression string `json:"expression"`
	TimeoutMS  int    `json:"timeoutMs,omitempty"` // default DefaultTimeout, at most MaxTimeout
}

// Evaluation is an expression's value as JSON (null for undefined), at
// most MaxEvaluateBytes.
type Evaluation struct {
	Value json.RawMessage `json:"value"`
}

// Tools is what an agent does with a browser. Driver and Client implement
// it; every failure is an *httpjson.Error with one of the codes above.
type Tools interface {
	Navigate(context.Context, NavigateRequest) (Page, error)
	Snapshot(context.Context, SnapshotRequest) (Snapshot, error)
	Click(context.Context, ClickRequest) (Page, error)
	Type(context.Context, TypeRequest) (Page, error)
	Press(context.Context, PressRequest) (Page, error)
	Scroll(context.Context, ScrollRequest) (Page, error)
	Screenshot(context.Context, ScreenshotRequest) (Screenshot, error)
	Tabs(context.Context, TabsRequest) (Tabs, error)
	Wait(context.Context, WaitRequest) (Page, error)
	Evaluate(context.Context, EvaluateRequest) (Evaluation, error)
}
