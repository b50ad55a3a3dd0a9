package mcpserver

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/berthdev/berth/api"
)

// The browser tools' names.
const (
	ToolBrowserNavigate   = "browser_navigate"
	ToolBrowserSnapshot   = "browser_snapshot"
	ToolBrowserClick      = "browser_click"
	ToolBrowserType       = "browser_type"
	ToolBrowserPress      = "browser_press"
	ToolBrowserScroll     = "browser_scroll"
	ToolBrowserScreenshot = "browser_screenshot"
	ToolBrowserTabs       = "browser_tabs"
	ToolBrowserWaitFor    = "browser_wait_for"
	ToolBrowserEvaluate   = "browser_evaluate"
)

// browserNote is said in every browser tool's description.
const browserNote = "The browser is the computer's own Chromium (started on the first browser tool call and kept for the session), " +
	"or the hosted browser of a browser session. "

const refNote = "ref is an element reference from the last browser_snapshot, such as e42."

// BrowserPageInfo is the structured answer of the browser tools that act
// on a page: the selected tab after the action.
type BrowserPageInfo = api.BrowserPage

// BrowserSnapshotInfo is browser_snapshot's structured answer; the tree
// itself is the text.
type BrowserSnapshotInfo struct {
	api.BrowserPage
	Nodes     int  `json:"nodes"`
	Truncated bool `json:"truncated,omitempty"`
}

func (s *Server) addBrowserTools() {
	str := func(what string) *jsonschema.Schema { return &jsonschema.Schema{Type: "string", Description: what} }
	num := func(what string) *jsonschema.Schema { return &jsonschema.Schema{Type: "integer", Description: what} }
	flag := func(what string) *jsonschema.Schema { return &jsonschema.Schema{Type: "boolean", Description: what} }
	timeout := num("Milliseconds to wait at most: default 30000, at most 60000.")
	ref := str(refNote)
	act := &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(true)}
	look := &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(true)}

	addTool(s, &mcp.Tool{
		Name: ToolBrowserNavigate, Title: "Open a web page",
		Description: "Load a URL in the browser's selected tab and wait for it to load; url may also be back, forward or reload. " +
			browserNote + "Then call browser_snapshot to read the page.",
		InputSchema: objectSchema(map[string]*jsonschema.Schema{"url": str("The http(s) URL, or back, forward, reload."), "timeoutMs": timeout}, "url"),
		Annotations: act,
	}, pageTool(s, "navigate", func(r api.BrowserNavigateRequest) string { return "Loaded" }))
	addTool(s, &mcp.Tool{
		Name: ToolBrowserSnapshot, Title: "Read the page",
		Description: "Return the selected tab's accessibility tree as text, one element a line (role, name, value, state), " +
			"with a ref such as [ref=e42] on every element the other browser tools can act on. Refs stay valid while the element stays in the page. " +
			browserNote + "maxBytes bounds the text (default 65536, at most 1048576).",
		InputSchema: objectSchema(map[string]*jsonschema.Schema{"maxBytes": num("Bytes of tree at most.")}),
		Annotations: look,
	}, s.browserSnapshot)
	addTool(s, &mcp.Tool{
		Name: ToolBrowserClick, Title: "Click an element",
		Description: "Click an element of the page by its ref (scrolled into view first). button is left (default), right or middle; clicks 1 to 3. " + browserNote,
		InputSchema: objectSchema(map[string]*jsonschema.Schema{"ref": ref, "button": {Type: "string", Enum: []any{"left", "right", "middle"}},
			"clicks": num("1 (default), 2 for a double click, 3 for a triple click.")}, "ref"),
		Annotations: act,
	}, pageTool(s, "click", func(r api.BrowserClickRequest) string { return "Clicked " + r.Ref }))
	addTool(s, &mcp.Tool{
		Name: ToolBrowserType, Title: "Type into an element",
		Description: "Focus an element by its ref and type text into it (any Unicode, at most 10000 characters). " +
			"clear empties the field first; submit presses Enter after. " + browserNote,
		InputSchema: objectSchema(map[string]*jsonschema.Schema{"ref": ref, "text": str("The text."),
			"clear": flag("Empty the field first."), "submit": flag("Press Enter after the text.")}, "ref", "text"),
		Annotations: act,
	}, pageTool(s, "type", func(r api.BrowserTypeRequest) string { return "Typed into " + r.Ref }))
	addTool(s, &mcp.Tool{
		Name: ToolBrowserPress, Title: "Press a key",
		Description: "Press a key or a combination, such as Enter, Tab, Escape, ArrowDown, Control+a or Shift+Tab, in the focused element or in ref's. " + browserNote,
		InputSchema: objectSchema(map[string]*jsonschema.Schema{"key": str("The key or combination."), "ref": ref}, "key"),
		Annotations: act,
	}, pageTool(s, "press", func(r api.BrowserPressRequest) string { return "Pressed " + r.Key }))
	addTool(s, &mcp.Tool{
		Name: ToolBrowserScroll, Title: "Scroll",
		Description: "Scroll an element into view (ref), or the page by deltaX and deltaY pixels (positive: right and down). " + browserNote,
		InputSchema: objectSchema(map[string]*jsonschema.Schema{"ref": ref, "deltaX": num("Pixels to the right."), "deltaY": num("Pixels down.")}),
		Annotations: act,
	}, pageTool(s, "scroll", func(r api.BrowserScrollRequest) string { return "Scrolled" }))
	addContentTool(s, &mcp.Tool{
		Name: ToolBrowserScreenshot, Title: "Screenshot the page",
		Description: "Return an image of the selected tab: the viewport, the whole page (fullPage), or one element (ref). format png (default) or jpeg with quality 1-100. " + browserNote,
		InputSchema: objectSchema(map[string]*jsonschema.Schema{"format": {Type: "string", Enum: []any{"png", "jpeg"}}, "quality": num("JPEG quality 1-100."),
			"fullPage": flag("The whole page, not only what the viewport shows."), "ref": ref}),
		Annotations: look,
	}, s.browserScreenshot)
	addTool(s, &mcp.Tool{
		Name: ToolBrowserTabs, Title: "List, open, select or close tabs",
		Description: "action list (default), open (a new tab, with url or blank, which becomes the selected one), select (index) or close (index). " +
			"The other browser tools act on the selected tab. " + browserNote,
		InputSchema: objectSchema(map[string]*jsonschema.Schema{"action": {Type: "string", Enum: []any{"list", "open", "select", "close"}},
			"url": str("open: the URL to load."), "index": num("select and close: the tab's index in the list.")}),
		Annotations: act,
	}, s.browserTabs)
	addTool(s, &mcp.Tool{
		Name: ToolBrowserWaitFor, Title: "Wait for text",
		Description: "Wait until text appears in the selected tab, until textGone is no longer there, or, with neither, for timeoutMs. " + browserNote,
		InputSchema: objectSchema(map[string]*jsonschema.Schema{"text": str("Text to wait for."), "textGone": str("Text to wait to disappear."), "timeoutMs": timeout}),
		Annotations: look,
	}, pageTool(s, "wait_for", func(r api.BrowserWaitRequest) string { return "Waited" }))
	addTool(s, &mcp.Tool{
		Name: ToolBrowserEvaluate, Title: "Run JavaScript in the page",
		Description: "Evaluate a JavaScript expression in the selected tab and return its value as JSON (a promise is awaited). " +
			"Only connections made with browserEvaluate allow it. " + browserNote,
		InputSchema: objectSchema(map[string]*jsonschema.Schema{"expression": str("The expression."), "timeoutMs": timeout}, "expression"),
		Annotations: act,
	}, s.browserEvaluate)
}

// pageTool is a browser tool that answers the selected tab after acting.
func pageTool[In any](s *Server, tool string, done func(In) string) func(context.Context, In) (BrowserPageInfo, []string, error) {
	return func(ctx context.Context, in In) (BrowserPageInfo, []string, error) {
		var p api.BrowserPage
		if err := s.c.Browser(ctx, s.agent, tool, in, &p); err != nil {
			return p, nil, err
		}
		return p, []string{fmt.Sprintf("%s. Tab %d: %s (%s)", done(in), p.Tab, oneLine(p.Title), p.URL)}, nil
	}
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if s == "" {
		return "untitled"
	}
	return s
}

func (s *Server) browserSnapshot(ctx context.Context, in api.BrowserSnapshotRequest) (BrowserSnapshotInfo, []string, error) {
	var snap api.BrowserSnapshot
	if err := s.c.Browser(ctx, s.agent, "snapshot", in, &snap); err != nil {
		return BrowserSnapshotInfo{}, nil, err
	}
	head := fmt.Sprintf("Tab %d: %s (%s), %d elements", snap.Tab, oneLine(snap.Title), snap.URL, snap.Nodes)
	if snap.Truncated {
		head += "; the tree was cut at maxBytes"
	}
	return BrowserSnapshotInfo{BrowserPage: snap.BrowserPage, Nodes: snap.Nodes, Truncated: snap.Truncated},
		[]string{head + ":\n" + snap.Tree}, nil
}

func (s *Server) browserScreenshot(ctx context.Context, in api.BrowserScreenshotRequest) ([]mcp.Content, any, error) {
	var shot api.BrowserScreenshot
	if err := s.c.Browser(ctx, s.agent, "screenshot", in, &shot); err != nil {
		return nil, nil, err
	}
	return []mcp.Content{
		&mcp.ImageContent{Data: shot.Data, MIMEType: "image/" + shot.Format},
		&mcp.TextContent{Text: fmt.Sprintf("Screenshot of the page, %dx%d (%s).", shot.Width, shot.Height, shot.Format)},
	}, nil, nil
}

func (s *Server) browserTabs(ctx context.Context, in api.BrowserTabsRequest) (api.BrowserTabs, []string, error) {
	var tabs api.BrowserTabs
	if err := s.c.Browser(ctx, s.agent, "tabs", in, &tabs); err != nil {
		return tabs, nil, err
	}
	var b strings.Builder
	for _, t := range tabs.Tabs {
		mark := " "
		if t.Index == tabs.Selected {
			mark = "*"
		}
		fmt.Fprintf(&b, "%s %d: %s (%s)\n", mark, t.Index, oneLine(t.Title), t.URL)
	}
	return tabs, []string{strings.TrimRight(b.String(), "\n")}, nil
}

func (s *Server) browserEvaluate(ctx context.Context, in api.BrowserEvaluateRequest) (any, []string, error) {
	var ev api.BrowserEvaluation
	if err := s.c.Browser(ctx, s.agent, "evaluate", in, &ev); err != nil {
		return nil, nil, err
	}
	// The value is any JSON, so it is given as text only.
	return nil, []string{string(ev.Value)}, nil
}
