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
	var bind computerd.BindRequest
	w := &warmWriter{header: http.Header{}}
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, "/v1/bind", strings.NewReader(`{"tokenHash":"","env":{"A":"b"}}`))
	if err != nil {
		return err
	}
	if err := decodeJSON(w, r, computerd.MaxBindBytes, &bind); err != nil {
		return fmt.Errorf("warm: decode a bind request: %w", err)
	}
	body := fmt.Sprintf(`{"command":"true","timeoutMs":%d}`, warmTimeout.Milliseconds())
	if r, err = http.NewRequestWithContext(ctx, http.MethodPost, "/v1/exec", strings.NewReader(body)); err != nil {
		return err
	}
	w = &warmWriter{header: http.Header{}}
	if err := s.handleExec(w, r); err != nil {
		return fmt.Errorf("warm: run true: %w", err)
	}
	if w.status != http.StatusOK || !strings.Contains(w.body.String(), `"exitCode":0`) {
		return fmt.Errorf("warm: run true: status %d: %.200s", w.status, w.body.String())
	}
	return nil
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
