package apiserver

import (
	"net/http"

	"github.com/berthdev/berth/api"
)

// The routes of paired lenders (operator only).
func (h *Handler) companionRoutes() {
	m := h.mux
	m.Handle("GET /v1/companions", h.auth(operatorOnly, h.companions))
	m.Handle("DELETE /v1/companions/{id}", h.auth(operatorOnly, h.revokeCompanion))
}

// companions lists paired lenders, online from the relay's presence when
// the supervisor reaches a relay (offline otherwise).
func (h *Handler) companions(w http.ResponseWriter, r *http.Request) (any, int, error) {
	var online func(string) bool
	if h.Lenders != nil {
		if ls, err := h.Lenders(r.Context()); err != nil {
			h.log.Warn("list companions: relay presence", "err", err)
		} else {
			up := map[string]bool{}
			for _, l := range ls {
				up[l.ID] = l.Online
			}
			online = func(id string) bool { return up[id] }
		}
	}
	cs, err := h.svc.Companions(r.Context(), online)
	return api.CompanionList{Companions: cs}, http.StatusOK, err
}

// revokeCompanion unpairs a lender at once: its token is refused, its
// live sessions ended and its relay link dropped.
func (h *Handler) revokeCompanion(w http.ResponseWriter, r *http.Request) (any, int, error) {
	id := r.PathValue("id")
	n, err := h.svc.RevokeCompanion(r.Context(), id)
	return map[string]any{"id": id, "revoked": true, "endedSessions": n}, http.StatusOK, err
}
