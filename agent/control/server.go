package control

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/berthdev/berth/internal/httpjson"
)

// Backend is what the control API serves; agent/lender's Lender is one.
// Errors that carry their own status and code (an *httpjson.Error, such as
// a *lending.Error) are answered with them; any other error is a 500 whose details stay in the
// agent's log.
type Backend interface {
	Status(ctx context.Context) Status
	Sessions(ctx context.Context) []Session
	StopSession(ctx context.Context, id string) (Session, error)
	Screenshot(ctx context.Context, id string) (image []byte, contentType string, err error)
	Approvals() []Approval
	Decide(id string, approve bool) (Approval, error)
	Settings() Settings
	SetSettings(Settings) (Settings, error)
	UpdateSettings(SettingsUpdate) (Settings, error)
	Usage(ctx context.Context, days int) (Usage, error)
	Cleanups() []CleanupPrompt
	ResolveCleanup(ctx context.Context, id string, remove bool) (CleanupPrompt, error)
}

// maxBody bounds a request body.
const maxBody = 64 << 10

// Handler returns the control API over b.
func Handler(b Backend, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &handler{b: b, log: log.With("component", "control")}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PathStatus, func(w http.ResponseWriter, r *http.Request) {
		h.ok(w, b.Status(r.Context()))
	})
	mux.HandleFunc("GET "+PathSessions, func(w http.ResponseWriter, r *http.Request) {
		h.ok(w, b.Sessions(r.Context()))
	})
	mux.HandleFunc("POST "+PathSessionStop, func(w http.ResponseWriter, r *http.Request) {
		s, err := b.StopSession(r.Context(), r.PathValue("id"))
		h.answer(w, s, err)
	})
	mux.HandleFunc("GET "+PathScreenshot, func(w http.ResponseWriter, r *http.Request) {
		img, ct, err := b.Screenshot(r.Context(), r.PathValue("id"))
		if err != nil {
			h.fail(w, err)
			return
		}
		w.Header().Set("Content-Type", ct)
		w.Header().Set("Content-Length", strconv.Itoa(len(img)))
		w.Write(img)
	})
	mux.HandleFunc("GET "+PathApprovals, func(w http.ResponseWriter, r *http.Request) {
		h.ok(w, b.Approvals())
	})
	mux.HandleFunc("POST "+PathApprove, func(w http.ResponseWriter, r *http.Request) {
		a, err := b.Decide(r.PathValue("id"), true)
		h.answer(w, a, err)
	})
	mux.HandleFunc("POST "+PathDeny, func(w http.ResponseWriter, r *http.Request) {
		a, err := b.Decide(r.PathValue("id"), false)
		h.answer(w, a, err)
	})
	mux.HandleFunc("GET "+PathSettings, func(w http.ResponseWriter, r *http.Request) {
		h.ok(w, b.Settings())
	})
	mux.HandleFunc("PUT "+PathSettings, func(w http.ResponseWriter, r *http.Request) {
		var s Settings
		if !h.decode(w, r, &s) {
			return
		}
		out, err := b.SetSettings(s)
		h.answer(w, out, err)
	})
	mux.HandleFunc("PATCH "+PathSettings, func(w http.ResponseWriter, r *http.Request) {
		var u SettingsUpdate
		if !h.decode(w, r, &u) {
			return
		}
		out, err := b.UpdateSettings(u)
		h.answer(w, out, err)
	})
	mux.HandleFunc("GET "+PathUsage, func(w http.ResponseWriter, r *http.Request) {
		days := 0
		if v := r.URL.Query().Get("days"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				h.fail(w, &httpjson.Error{Status: http.StatusBadRequest, Code: CodeBadRequest, Message: fmt.Sprintf("days: %q is not a whole number of days (1..90)", v)})
				return
			}
			days = n
		}
		u, err := b.Usage(r.Context(), days)
		h.answer(w, u, err)
	})
	mux.HandleFunc("GET "+PathCleanups, func(w http.ResponseWriter, r *http.Request) {
		h.ok(w, b.Cleanups())
	})
	mux.HandleFunc("POST "+PathCleanupRemove, func(w http.ResponseWriter, r *http.Request) {
		p, err := b.ResolveCleanup(r.Context(), r.PathValue("id"), true)
		h.answer(w, p, err)
	})
	mux.HandleFunc("POST "+PathCleanupKeep, func(w http.ResponseWriter, r *http.Request) {
		p, err := b.ResolveCleanup(r.Context(), r.PathValue("id"), false)
		h.answer(w, p, err)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, &httpjson.Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: fmt.Sprintf("no route %s %s", r.Method, r.URL.Path)})
	})
	return mux
}

type handler struct {
	b   Backend
	log *slog.Logger
}

func (h *handler) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := httpjson.Decode(w, r, maxBody, v); err != nil {
		h.fail(w, &httpjson.Error{Status: http.StatusBadRequest, Code: CodeBadRequest, Message: err.Error()})
		return false
	}
	return true
}

func (h *handler) ok(w http.ResponseWriter, v any) { httpjson.Write(w, http.StatusOK, v) }

func (h *handler) answer(w http.ResponseWriter, v any, err error) {
	if err != nil {
		h.fail(w, err)
		return
	}
	h.ok(w, v)
}

func (h *handler) fail(w http.ResponseWriter, err error) {
	var e *httpjson.Error
	if !errors.As(err, &e) {
		h.log.Error("control request failed", "err", err)
		e = &httpjson.Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error; see the agent's log"}
	}
	httpjson.WriteError(w, e.Status, e.Code, e.Message)
}

// Listen opens the control socket at path, readable and writable by the
// owner only (0600), in a folder only the owner can enter. A stale socket
// left by an agent that died is replaced; any other file there is an error.
func Listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("control socket %s: a file that is not a socket is in the way", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("control socket %s: another agent is serving it", path)
		}
		os.Remove(path)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	return ln, nil
}

// Serve serves the control API on ln until ctx ends.
func Serve(ctx context.Context, ln net.Listener, b Backend, log *slog.Logger) error {
	srv := &http.Server{Handler: Handler(b, log), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	<-errc
	return nil
}
