package lender

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"

	"github.com/berthdev/berth/internal/httpjson"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/lending"
	"github.com/berthdev/berth/relay"
)

// maxCreateBody bounds a create request.
const maxCreateBody = 1 << 20

// Handler returns the API the supervisor reaches over the relay link.
func (l *Lender) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+lending.PathComputers, l.handleCreate)
	mux.HandleFunc("GET "+lending.PathComputers, func(w http.ResponseWriter, r *http.Request) {
		httpjson.Write(w, http.StatusOK, l.Computers())
	})
	mux.HandleFunc("DELETE "+lending.PathComputer, func(w http.ResponseWriter, r *http.Request) {
		if err := l.Destroy(r.Context(), r.PathValue("id")); err != nil {
			writeError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc(lending.PathComputer+lending.ComputerdPrefix+"/{rest...}", l.handleComputerd)
	mux.HandleFunc("GET "+lending.PathState, func(w http.ResponseWriter, r *http.Request) {
		httpjson.Write(w, http.StatusOK, l.State())
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errorf(http.StatusNotFound, lending.CodeNotFound, "no route %s %s", r.Method, r.URL.Path))
	})
	return mux
}

func (l *Lender) handleCreate(w http.ResponseWriter, r *http.Request) {
	var req lending.CreateRequest
	// Unknown fields are ignored, so that a newer supervisor can still
	// start computers on an older agent.
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxCreateBody))
	if err := dec.Decode(&req); err != nil {
		writeError(w, badRequest("body: %v", err))
		return
	}
	c, err := l.Create(r.Context(), req)
	if err != nil {
		writeError(w, err)
		return
	}
	httpjson.Write(w, http.StatusCreated, c)
}

// handleComputerd proxies a request to the computer's computerd. The
// supervisor's bearer token for the computer passes through untouched; when
// it matches the computer's token hash the agent keeps it in memory, to
// take screenshots for the owner. A proxied call runs to its end even when
// the relay link drops mid-call, so that a command is never cut half-way
// by the link; its answer is then lost and the supervisor reports it as
// uncertain.
func (l *Lender) handleComputerd(w http.ResponseWriter, r *http.Request) {
	c, err := l.lookup(r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	target, err := url.Parse(c.endpoint)
	if err != nil || c.endpoint == "" {
		writeError(w, errorf(http.StatusServiceUnavailable, lending.CodeUnavailable, "computer %s has no address", c.s.ComputerID))
		return
	}
	if tok := relay.BearerToken(r.Header.Get("Authorization")); tok != "" && c.s.TokenHash != "" && token.Check(tok, c.s.TokenHash) {
		c.mu.Lock()
		c.token = tok
		c.mu.Unlock()
	}
	rest := "/" + r.PathValue("rest")
	upgrade := r.Header.Get("Upgrade") != ""
	if !upgrade {
		r = r.WithContext(context.WithoutCancel(r.Context()))
	}
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.URL.Path = strings.TrimSuffix(target.Path, "/") + rest
			pr.Out.URL.RawPath = ""
			pr.Out.Host = target.Host
		},
		Transport:     l.transport,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			l.log.Warn("computerd unreachable", "computer", c.s.ComputerID, "path", rest, "err", err)
			writeError(w, errorf(http.StatusBadGateway, lending.CodeUnavailable, "computer %s did not answer", c.s.ComputerID))
		},
	}
	p.ServeHTTP(w, r)
}

func writeError(w http.ResponseWriter, err error) {
	if errors.Is(err, ErrClosed) {
		err = errorf(http.StatusServiceUnavailable, lending.CodeUnavailable, "the agent is shutting down")
	}
	e := AsError(err)
	httpjson.WriteError(w, e.Status, e.Code, e.Message)
}
