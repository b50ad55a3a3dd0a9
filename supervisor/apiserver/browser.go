package apiserver

import (
	"context"
	"net/http"
)

// browserRoutes serves the browser tools, POST
// /v1/agents/{agent}/computer/browser/{tool}. The actions are tool calls
// with an Idempotency-Key, as exec is; the reads (snapshot, screenshot,
// wait_for), whose answers can be large, are answered without a call
// record.
func (h *Handler) browserRoutes() {
	m := h.mux
	const base = "POST /v1/agents/{agent}/computer/browser/"
	m.Handle(base+"navigate", tool(h, "browser_navigate", true, h.svc.BrowserNavigate))
	m.Handle(base+"click", tool(h, "browser_click", true, h.svc.BrowserClick))
	m.Handle(base+"type", tool(h, "browser_type", true, h.svc.BrowserType))
	m.Handle(base+"press", tool(h, "browser_press", true, h.svc.BrowserPress))
	m.Handle(base+"scroll", tool(h, "browser_scroll", false, h.svc.BrowserScroll))
	m.Handle(base+"tabs", tool(h, "browser_tabs", false, h.svc.BrowserTabs))
	m.Handle(base+"evaluate", tool(h, "browser_evaluate", true, h.svc.BrowserEvaluate))
	m.Handle(base+"snapshot", read(h, h.svc.BrowserSnapshot))
	m.Handle(base+"screenshot", read(h, h.svc.BrowserScreenshot))
	m.Handle(base+"wait_for", read(h, h.svc.BrowserWait))
}

// read serves a tool that changes nothing: its answer is not recorded for
// retries, which simply ask again.
func read[Req, Resp any](h *Handler, run func(ctx context.Context, agent string, req Req) (Resp, error)) http.Handler {
	return h.auth(agentTool, func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var req Req
		if err := decodeOptional(w, r, &req); err != nil {
			return nil, 0, err
		}
		v, err := run(r.Context(), r.PathValue("agent"), req)
		return v, http.StatusOK, err
	})
}
