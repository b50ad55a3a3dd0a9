package api

import (
	"context"
	"encoding/json"
	"net/http"
)

// Browser tools: a web browser driven by element references read from the
// page's accessibility tree, on every computer with Chromium (headless and
// desktop images; computerd starts it on the first call) and on hosted
// browser sessions. Each tool is POST
// /v1/agents/{agent}/computer/browser/{tool} with the tool's request as
// JSON. The same types travel from the agent through the supervisor to the
// browser unchanged (computerd/browser uses them).

// BrowserTools are the tools' names in their routes; the MCP tools are
// "browser_" and the name.
var BrowserTools = []string{
	"navigate", "snapshot", "click", "type", "press", "scroll",
	"screenshot", "tabs", "wait_for", "evaluate",
}

// Error codes of the browser tools.
const (
	// CodeRefNotFound: the element reference names no node of the
	// selected tab's page, for example after the page navigated (404).
	// A new snapshot gives current references.
	CodeRefNotFound = "ref_not_found"
	// CodeNotInteractable: the element has no box to click or cannot
	// take text (409).
	CodeNotInteractable = "not_interactable"
	// CodeBrowserTimeout: the page did not load, or the awaited text did
	// not appear, within the call's timeout (504). The browser stays
	// usable.
	CodeBrowserTimeout = "browser_timeout"
	// CodeBrowserFailed: the browser could not be started or reached, or
	// it crashed during the call (502). In a computer the next call starts
	// a new one.
	CodeBrowserFailed = "browser_failed"
	// CodeEvaluateFailed: the script threw; the message has the exception
	// (422).
	CodeEvaluateFailed = "evaluate_failed"
	// CodeNavigationFailed: the page could not be loaded at all (a name
	// that does not resolve, a refused connection, a TLS failure); the
	// message has the browser's net error (502).
	CodeNavigationFailed = "navigation_failed"
	// CodeEvaluateNotAllowed: browser_evaluate on a connection that does
	// not allow it (403); connect with "browserEvaluate": true.
	CodeEvaluateNotAllowed = "evaluate_not_allowed"
)

// BrowserPage is the selected tab after an action: where it is and what
// it is.
type BrowserPage struct {
	URL   string `json:"url"`
	Title string `json:"title"`
	// Tab is the selected tab's index in the tab list.
	Tab int `json:"tab"`
}

// BrowserNavigateRequest loads a URL in the selected tab and waits for its
// load event. URL may also be "back", "forward" or "reload".
type BrowserNavigateRequest struct {
	URL string `json:"url"`
	// TimeoutMS bounds the load: default 30 s, at most 60 s.
	TimeoutMS int `json:"timeoutMs,omitempty"`
}

// BrowserSnapshotRequest asks for the selected tab's accessibility tree.
type BrowserSnapshotRequest struct {
	// MaxBytes bounds the tree: default 64 KiB, at most 1 MiB. A longer
	// tree is cut at a line's end and Truncated is set.
	MaxBytes int `json:"maxBytes,omitempty"`
}

// BrowserSnapshot is a page's accessibility tree as text, one node a line,
// indented two spaces a level:
//
//   - heading "Sign in" [level=1]
//   - textbox "Email" [ref=e14] value="a@b.c"
//   - button "Send" [ref=e17] [disabled]
//
// Nodes an agent can act on (links, buttons, fields, boxes with a name)
// carry a ref for the other tools. Nodes with no role and no name are left
// out and their children lifted.
type BrowserSnapshot struct {
	BrowserPage
	Tree      string `json:"tree"`
	Nodes     int    `json:"nodes"` // lines in Tree
	Truncated bool   `json:"truncated,omitempty"`
}

// BrowserClickRequest clicks the centre of an element, scrolled into view
// first.
type BrowserClickRequest struct {
	Ref    string `json:"ref"`
	Button string `json:"button,omitempty"` // left (default), right, middle
	Clicks int    `json:"clicks,omitempty"` // 1 (default) to 3
}

// BrowserTypeRequest focuses an element and types text into it.
type BrowserTypeRequest struct {
	Ref  string `json:"ref"`
	Text string `json:"text"`
	// Clear empties the field first; otherwise the text goes where the
	// caret is after focusing.
	Clear bool `json:"clear,omitempty"`
	// Submit presses Enter after the text.
	Submit bool `json:"submit,omitempty"`
}

// BrowserPressRequest presses a key or a combination such as "Enter",
// "Tab", "ArrowDown", "Control+a" or "Shift+Tab" (the DOM's key names,
// with Control, Shift, Alt and Meta as modifiers), in the focused element
// or, with Ref, in that element after focusing it.
type BrowserPressRequest struct {
	Key string `json:"key"`
	Ref string `json:"ref,omitempty"`
}

// BrowserScrollRequest scrolls an element into view (Ref) or the page by a
// number of pixels (DeltaX, DeltaY; positive is right and down).
type BrowserScrollRequest struct {
	Ref    string `json:"ref,omitempty"`
	DeltaX int    `json:"deltaX,omitempty"`
	DeltaY int    `json:"deltaY,omitempty"`
}

// BrowserScreenshotRequest captures the selected tab's viewport, the whole
// page, or one element.
type BrowserScreenshotRequest struct {
	Format   string `json:"format,omitempty"`  // png (default) or jpeg
	Quality  int    `json:"quality,omitempty"` // jpeg only, 1..100
	FullPage bool   `json:"fullPage,omitempty"`
	Ref      string `json:"ref,omitempty"`
}

// BrowserScreenshot is an image of the page.
type BrowserScreenshot struct {
	Format string `json:"format"`
	Data   []byte `json:"data"` // base64 in JSON
	Width  int    `json:"width"`
	Height int    `json:"height"`
}

// BrowserTabsRequest lists, opens, selects or closes tabs: Action is
// "list" (default), "open", "select" or "close". Open selects the new tab
// (about:blank without a URL); closing the selected tab selects the one
// before it; closing the last tab leaves one blank tab.
type BrowserTabsRequest struct {
	Action string `json:"action,omitempty"`
	URL    string `json:"url,omitempty"`   // open
	Index  int    `json:"index,omitempty"` // select, close
}

// BrowserTab is one open tab.
type BrowserTab struct {
	Index int    `json:"index"`
	URL   string `json:"url"`
	Title string `json:"title"`
}

// BrowserTabs is the tab list after a tabs call.
type BrowserTabs struct {
	Tabs     []BrowserTab `json:"tabs"`
	Selected int          `json:"selected"`
}

// BrowserWaitRequest waits until Text appears in the selected tab's page,
// until TextGone is no longer in it, or, with neither, for TimeoutMS.
type BrowserWaitRequest struct {
	Text      string `json:"text,omitempty"`
	TextGone  string `json:"textGone,omitempty"`
	TimeoutMS int    `json:"timeoutMs,omitempty"` // default 30 s, at most 60 s
}

// BrowserEvaluateRequest runs a JavaScript expression in the selected
// tab's page and returns its value; a promise is awaited. Only connections
// made with "browserEvaluate": true allow it.
type BrowserEvaluateRequest struct {
	Expression string `json:"expression"`
	TimeoutMS  int    `json:"timeoutMs,omitempty"` // default 30 s, at most 60 s
}

// BrowserEvaluation is an expression's value as JSON (null for undefined),
// at most 256 KiB.
type BrowserEvaluation struct {
	Value json.RawMessage `json:"value"`
}

// Browser calls one browser tool (one of BrowserTools) of the agent's
// computer with req and decodes its answer into out.
func (c *Client) Browser(ctx context.Context, agent, tool string, req, out any) error {
	return c.agentCall(ctx, http.MethodPost, agent, "/browser/"+tool, req, out)
}
