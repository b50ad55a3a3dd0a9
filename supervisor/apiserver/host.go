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
	if h.RelayToken == "" {
		h.noRoute(w, r)
		return
	}
	if subtle.ConstantTimeCompare([]byte(r.Header.Get(relayserver.TokenHeader)), []byte(h.RelayToken)) != 1 {
		h.log.Warn("relay token check refused: wrong RELAY_TOKEN", "remote", r.RemoteAddr)
		writeError(w, &supervisor.Error{Status: http.StatusUnauthorized, Code: supervisor.CodeUnauthorized, Message: "missing or wrong " + relayserver.TokenHeader})
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
