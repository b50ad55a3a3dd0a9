package browser

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"github.com/berthdev/berth/internal/httpjson"
)

// Server serves the browser tools of a Tools (computerd's Launcher) at
// Paths, each a POST of the request as JSON answered with the tool's
// answer or the httpjson error envelope. Authentication is the mounting
// server's.
type Server struct {
	tools  Tools
	log    *slog.Logger
	routes map[string]func(ctx context.Context, w http.ResponseWriter, r *http.Request) (any, error)
}

// NewServer returns a Server for tools.
func NewServer(tools Tools, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{tools: tools, log: log.With("component", "browser")}
	s.routes = map[string]func(context.Context, http.ResponseWriter, *http.Request) (any, error){
		PathNavigate:   handle(tools.Navigate),
		PathSnapshot:   handle(tools.Snapshot),
		PathClick:      handle(tools.Click),
		PathType:       handle(tools.Type),
		PathPress:      handle(tools.Press),
		PathScroll:     handle(tools.Scroll),
		PathScreenshot: handle(tools.Screenshot),
		PathTabs:       handle(tools.Tabs),
		PathWait:       handle(tools.Wait),
		PathEvaluate:   handle(tools.Evaluate),
	}
	return s
}

// handle decodes a request (an empty body is the zero request) and calls
// the tool.
func handle[Req, Ans any](tool func(context.Context, Req) (Ans, error)) func(context.Context, http.ResponseWriter, *http.Request) (any, error) {
	return func(ctx context.Context, w http.ResponseWriter, r *http.Request) (any, error) {
		var req Req
		if err := httpjson.DecodeOptional(w, r, MaxRequestBytes, &req); err != nil {
			var de *httpjson.DecodeError
			if errors.As(err, &de) {
				return nil, &httpjson.Error{Status: de.Status(), Code: CodeBadRequest, Message: de.Message}
			}
			return nil, badRequest("%v", err)
		}
		return tool(ctx, req)
	}
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	h, ok := s.routes[r.URL.Path]
	if !ok {
		names := make([]string, 0, len(s.routes))
		for p := range s.routes {
			names = append(names, strings.TrimPrefix(p, PathPrefix))
		}
		slices.Sort(names)
		httpjson.WriteError(w, http.StatusNotFound, CodeBadRequest, "no browser tool "+strings.TrimPrefix(r.URL.Path, PathPrefix)+
			"; the tools are "+strings.Join(names, ", "))
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		httpjson.WriteError(w, http.StatusMethodNotAllowed, CodeBadRequest, r.Method+" "+r.URL.Path+": use POST")
		return
	}
	ans, err := h(r.Context(), w, r)
	if err != nil {
		var he *httpjson.Error
		if !errors.As(err, &he) {
			s.log.Error("browser tool failed", "path", r.URL.Path, "err", err)
			he = browserFailed("%v", err)
		}
		httpjson.WriteError(w, he.Status, he.Code, he.Message)
		return
	}
	httpjson.Write(w, http.StatusOK, ans)
}
