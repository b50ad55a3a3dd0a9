package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/berthdev/berth/computerd"
)

// warmTimeout bounds Warm's command.
const warmTimeout = 10 * time.Second

// Warm runs, before the server takes its first call, the code that a
// computer's first calls run: it decodes a bind request and runs `true`
// through the exec handler, as a session's first exec does. A new process
// pays for the first run of each code path (its pages faulted in, the
// runtime's type tables filled), and on a virtual machine those faults
// cost cross-CPU TLB flushes; a warm-pool computer pays them here, while
// it waits in the pool, instead of in its session's first call. Call it
// before Serve and before ReapOrphans, whose wait would otherwise take the
// command's exit status.
func (s *Server) Warm(ctx context.Context) error {
	decodeBind := func(w http.ResponseWriter, r *http.Request) error {
		var bind computerd.BindRequest
		return decodeJSON(w, r, computerd.MaxBindBytes, &bind)
	}
	if _, err := warmCall(ctx, "/v1/bind", `{"tokenHash":"","env":{"A":"b"}}`, decodeBind); err != nil {
		return fmt.Errorf("warm: decode a bind request: %w", err)
	}
	w, err := warmCall(ctx, "/v1/exec", fmt.Sprintf(`{"command":"true","timeoutMs":%d}`, warmTimeout.Milliseconds()), s.handleExec)
	if err != nil {
		return fmt.Errorf("warm: run true: %w", err)
	}
	if w.status != http.StatusOK || !strings.Contains(w.body.String(), `"exitCode":0`) {
		return fmt.Errorf("warm: run true: status %d: %.200s", w.status, w.body.String())
	}
	return nil
}

// warmCall hands handle a POST of body to path, as the server's routes
// would, and returns what it wrote.
func warmCall(ctx context.Context, path, body string, handle func(http.ResponseWriter, *http.Request) error) (*warmWriter, error) {
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, path, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	w := &warmWriter{header: http.Header{}}
	return w, handle(w, r)
}

// warmWriter is the http.ResponseWriter of Warm's calls: it keeps the
// status and body for Warm to check.
type warmWriter struct {
	header http.Header
	status int
	body   strings.Builder
}

func (w *warmWriter) Header() http.Header { return w.header }

func (w *warmWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *warmWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(p)
}
