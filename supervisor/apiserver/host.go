package apiserver

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/berthdev/berth/egress"
	"github.com/berthdev/berth/internal/httpjson"
	"github.com/berthdev/berth/relay/relayserver"
	"github.com/berthdev/berth/supervisor"
)

// The routes whose parts the process hosting the supervisor sets on the
// Handler after New: lent machines, the relay's token check, the metrics
// and the live-view pages. A part left unset makes its route unknown, as
// if it were not there.
func (h *Handler) hostRoutes() {
	m := h.mux
	m.HandleFunc("GET /v1/lenders", h.lenders)
	m.HandleFunc("POST "+relayserver.AuthenticatePath, h.relayAuthenticate)
	m.HandleFunc("POST "+relayserver.ReportPath, h.relayReport)
	m.Handle("GET /metrics", h.Protect(http.HandlerFunc(h.metrics)))
	m.HandleFunc("/view/", h.viewer)
}

// Lender is a lender's machine as GET /v1/lenders shows it: its companion
// agent and its presence on the relay.
type Lender struct {
	ID          string    `json:"id"`
	Name        string    `json:"name,omitempty"`
	Online      bool      `json:"online"`
	ConnectedAt time.Time `json:"connectedAt,omitzero"`
	LastSeen    time.Time `json:"lastSeen,omitzero"`
	Version     string    `json:"version,omitempty"`
}

// lenders answers GET /v1/lenders: every lender the relay has seen, with
// its presence, so that an operator can name one in a local connection.
func (h *Handler) lenders(w http.ResponseWriter, r *http.Request) {
	if h.Lenders == nil {
		h.noRoute(w, r)
		return
	}
	r, ok := h.check(w, r, operatorOnly)
	if !ok {
		return
	}
	out, err := h.Lenders(r.Context())
	if err != nil {
		h.log.Warn("list lenders", "err", err)
		writeError(w, &supervisor.Error{Status: http.StatusServiceUnavailable, Code: supervisor.CodeUnavailable, Message: "the relay cannot be reached"})
		return
	}
	if out == nil {
		out = []Lender{}
	}
	httpjson.Write(w, http.StatusOK, out)
}

// relayAuthenticate answers a relay's check of a lending agent's token,
// guarded by RELAY_TOKEN. A wrong agent token is 401 and logged without the
// token.
func (h *Handler) relayAuthenticate(w http.ResponseWriter, r *http.Request) {
	if !h.relayCaller(w, r, h.RelayToken != "") {
		return
	}
	var in relayserver.AuthenticateRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&in); err != nil || in.Token == "" {
		writeError(w, &supervisor.Error{Status: http.StatusBadRequest, Code: supervisor.CodeBadRequest, Message: `body: want {"token": "..."}`})
		return
	}
	c, err := h.svc.AuthenticateCompanion(r.Context(), in.Token)
	if err != nil {
		writeError(w, supervisor.AsError(err))
		return
	}
	httpjson.Write(w, http.StatusOK, relayserver.AuthenticateAnswer{LenderID: c.ID})
}

// relayCaller reports whether r comes from a relay: the route is on
// (else it is unknown) and r carries RELAY_TOKEN (else 401, logged).
func (h *Handler) relayCaller(w http.ResponseWriter, r *http.Request, on bool) bool {
	if !on || h.RelayToken == "" {
		h.noRoute(w, r)
		return false
	}
	if subtle.ConstantTimeCompare([]byte(r.Header.Get(relayserver.TokenHeader)), []byte(h.RelayToken)) != 1 {
		h.log.Warn("relay call refused: wrong RELAY_TOKEN", "remote", r.RemoteAddr, "path", r.URL.Path)
		writeError(w, &supervisor.Error{Status: http.StatusUnauthorized, Code: supervisor.CodeUnauthorized, Message: "missing or wrong " + relayserver.TokenHeader})
		return false
	}
	return true
}

// relayReport records a relay's report of the lenders it holds, guarded
// by RELAY_TOKEN: 204, or 400 naming the field and its limit.
func (h *Handler) relayReport(w http.ResponseWriter, r *http.Request) {
	if !h.relayCaller(w, r, h.RelayReport != nil) {
		return
	}
	var in relayserver.Report
	if err := supervisor.BodyError(httpjson.Decode(w, r, relayserver.MaxReportBytes, &in)); err != nil {
		writeError(w, supervisor.AsError(err))
		return
	}
	if err := in.Check(); err != nil {
		writeError(w, &supervisor.Error{Status: http.StatusBadRequest, Code: supervisor.CodeBadRequest, Message: err.Error()})
		return
	}
	if err := h.RelayReport(r.Context(), in); err != nil {
		h.log.Warn("record a relay's report", "relay", in.Relay, "err", err)
		writeError(w, &supervisor.Error{Status: http.StatusServiceUnavailable, Code: supervisor.CodeUnavailable, Message: "the report could not be recorded"})
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// EgressStats is the egress proxy as GET /metrics reads it.
type EgressStats interface {
	Stats() egress.Stats
}

// metrics serves the counters in the Prometheus text format.
func (h *Handler) metrics(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	ps := h.svc.PoolStats()
	fmt.Fprintln(w, "# HELP berth_pool_waiting Warm-pool computers started and waiting for a session.")
	fmt.Fprintf(w, "# TYPE berth_pool_waiting gauge\nberth_pool_waiting %d\n", ps.Waiting)
	fmt.Fprintln(w, "# HELP berth_pool_creating Warm-pool computers being made.")
	fmt.Fprintf(w, "# TYPE berth_pool_creating gauge\nberth_pool_creating %d\n", ps.Creating)
	fmt.Fprintln(w, "# HELP berth_pool_claimed_total Starts served from the warm pool.")
	fmt.Fprintf(w, "# TYPE berth_pool_claimed_total counter\nberth_pool_claimed_total %d\n", ps.Claimed)
	if h.Egress == nil {
		return
	}
	st := h.Egress.Stats()
	fmt.Fprintln(w, "# HELP berth_egress_connections_total Egress proxy connections by verdict.")
	fmt.Fprintln(w, "# TYPE berth_egress_connections_total counter")
	for _, v := range slices.Sorted(maps.Keys(st.Verdicts)) {
		fmt.Fprintf(w, "berth_egress_connections_total{verdict=%q} %d\n", v, st.Verdicts[v])
	}
	fmt.Fprintf(w, "# TYPE berth_egress_active gauge\nberth_egress_active %d\n", st.Active)
	fmt.Fprintf(w, "# TYPE berth_egress_bytes_total counter\nberth_egress_bytes_total{direction=\"up\"} %d\nberth_egress_bytes_total{direction=\"down\"} %d\n", st.BytesUp, st.BytesDown)
	fmt.Fprintln(w, "# HELP berth_egress_buffer_bytes Memory the egress proxy holds in copy buffers.")
	fmt.Fprintf(w, "# TYPE berth_egress_buffer_bytes gauge\nberth_egress_buffer_bytes %d\n", st.Buffered)
}

// viewer serves the live-view pages (supervisor/liveview), authorized by
// the view token in their query, not by the operator token.
func (h *Handler) viewer(w http.ResponseWriter, r *http.Request) {
	if h.Views == nil {
		h.noRoute(w, r)
		return
	}
	h.Views.Handler().ServeHTTP(w, r)
}
