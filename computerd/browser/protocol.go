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
// A snapshot is built inside the page, by a script in the Driver's isolated
// world of the tab's main frame (snapshot.js), which also keeps the element
// references ("e" and a number): a reference stays valid for as long as its
// element is in the page and the Driver is connected; after a navigation,
// or once the element left the page, it names nothing.
package browser

import (
	"context"
	"time"

	"github.com/berthdev/berth/api"
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
	CodeRefNotFound = api.CodeRefNotFound
	// CodeNotInteractable: the element has no box to click or cannot
	// take text (409).
	CodeNotInteractable = api.CodeNotInteractable
	// CodeTimeout: the page did not load, or the awaited text did not
	// appear, within the call's timeout (504). The browser stays usable.
	CodeTimeout = api.CodeBrowserTimeout
	// CodeBrowserFailed: the browser could not be started or reached, or
	// it crashed during the call (502). In a computer the next call
	// starts a new one.
	CodeBrowserFailed = api.CodeBrowserFailed
	// CodeEvaluateFailed: the script threw; the message has the exception
	// (422).
	CodeEvaluateFailed = api.CodeEvaluateFailed
	// CodeNavigationFailed: the page could not be loaded at all (a name
	// that does not resolve, a refused connection, a TLS failure); the
	// message has the browser's net error (502). A page that answers
	// with an HTTP error status loads normally.
	CodeNavigationFailed = api.CodeNavigationFailed
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

// The tools' requests and answers are the REST API's, so that a request
// passes from the agent through the supervisor to the browser unchanged.
type (
	Page              = api.BrowserPage
	NavigateRequest   = api.BrowserNavigateRequest
	SnapshotRequest   = api.BrowserSnapshotRequest
	Snapshot          = api.BrowserSnapshot
	ClickRequest      = api.BrowserClickRequest
	TypeRequest       = api.BrowserTypeRequest
	PressRequest      = api.BrowserPressRequest
	ScrollRequest     = api.BrowserScrollRequest
	ScreenshotRequest = api.BrowserScreenshotRequest
	Screenshot        = api.BrowserScreenshot
	TabsRequest       = api.BrowserTabsRequest
	Tab               = api.BrowserTab
	Tabs              = api.BrowserTabs
	WaitRequest       = api.BrowserWaitRequest
	EvaluateRequest   = api.BrowserEvaluateRequest
	Evaluation        = api.BrowserEvaluation
)

// Image formats of a screenshot.
const (
	FormatPNG  = "png"
	FormatJPEG = "jpeg"
)

// Tab actions.
const (
	TabsList   = "list"
	TabsOpen   = "open"
	TabsSelect = "select"
	TabsClose  = "close"
)

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
