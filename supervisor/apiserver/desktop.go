package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/supervisor"
)

// desktopRoutes serves the desktop tools of a desktop computer: the
// screenshot and one action of the computer-use vocabulary (the routes the
// SPEC names), and one route per family of actions.
// Each route takes a desktop seat for the request's holder (see
// desktopHolder).
func (h *Handler) desktopRoutes() {
	m := h.mux
	const base = "/v1/agents/{agent}/computer/desktop"
	handle := func(pattern string, next http.Handler) { m.Handle(pattern, desktopHolder(next)) }
	shot := h.guard(agentTool, http.HandlerFunc(h.desktopScreenshot))
	handle("GET "+base+"/screenshot", shot)
	handle("POST "+base+"/screenshot", shot)
	handle("POST "+base+"/action", tool(h, "desktop_action", true, h.svc.DesktopAction))
	handle("GET "+base+"/cursor", h.auth(agentTool, func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		v, err := h.svc.DesktopCursor(r.Context(), r.PathValue("agent"))
		return v, http.StatusOK, err
	}))
	handle("POST "+base+"/mouse", tool(h, "desktop_mouse", true, h.svc.DesktopMouse))
	handle("POST "+base+"/keyboard", tool(h, "desktop_keyboard", true, h.svc.DesktopKeyboard))
	handle("POST "+base+"/wait", tool(h, "desktop_wait", true, func(ctx context.Context, agent string, req api.WaitRequest) (api.DesktopResult, error) {
		return h.svc.DesktopWait(ctx, agent, req)
	}))
}

// desktopHolder names the holder of a desktop call from its
// api.HeaderDesktopHolder, refusing a malformed one; without the header the
// supervisor counts the caller's key as the holder.
func desktopHolder(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v, ok := r.Header[api.HeaderDesktopHolder]; ok {
			holder := strings.Join(v, ",")
			if !validHolder(holder) {
				writeError(w, &supervisor.Error{Status: http.StatusBadRequest, Code: supervisor.CodeBadRequest,
					Message: fmt.Sprintf("%s: want 1 to %d printable ASCII characters without spaces", api.HeaderDesktopHolder, api.MaxDesktopHolderChars)})
				return
			}
			r = r.WithContext(supervisor.WithDesktopHolder(r.Context(), holder))
		}
		next.ServeHTTP(w, r)
	})
}

func validHolder(s string) bool {
	if s == "" || len(s) > api.MaxDesktopHolderChars {
		return false
	}
	for i := range len(s) {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// desktopScreenshot answers the image itself, its size, the screen's and
// the scale in headers. The options come in the query (GET) or in a JSON
// body (POST).
func (h *Handler) desktopScreenshot(w http.ResponseWriter, r *http.Request) {
	var req api.ScreenshotRequest
	if r.Method == http.MethodPost {
		if err := decodeOptional(w, r, &req); err != nil {
			writeError(w, supervisor.AsError(err))
			return
		}
	} else {
		q := r.URL.Query()
		req.Format = q.Get("format")
		for _, f := range []struct {
			name string
			dst  *int
		}{{"quality", &req.Quality}, {"width", &req.Width}} {
			if v := q.Get(f.name); v != "" {
				n, err := strconv.Atoi(v)
				if err != nil {
					writeError(w, &supervisor.Error{Status: http.StatusBadRequest, Code: supervisor.CodeBadRequest, Message: fmt.Sprintf("%s: %q is not a number", f.name, v)})
					return
				}
				*f.dst = n
			}
		}
	}
	s, err := h.svc.DesktopScreenshot(r.Context(), r.PathValue("agent"), req)
	if err != nil {
		writeError(w, h.logged(r, err))
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "image/"+s.Format)
	hd.Set("Content-Length", strconv.Itoa(len(s.Data)))
	hd.Set(api.HeaderImageWidth, strconv.Itoa(s.Width))
	hd.Set(api.HeaderImageHeight, strconv.Itoa(s.Height))
	hd.Set(api.HeaderScreenWidth, strconv.Itoa(s.ScreenWidth))
	hd.Set(api.HeaderScreenHeight, strconv.Itoa(s.ScreenHeight))
	hd.Set(api.HeaderScale, strconv.FormatFloat(s.Scale, 'f', -1, 64))
	w.Write(s.Data)
}
