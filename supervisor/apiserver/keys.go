package apiserver

import (
	"net/http"
	"strconv"
	"time"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/supervisor"
)

// The routes of API keys and the audit log (SPEC section 10).
func (h *Handler) keyRoutes() {
	m := h.mux
	m.Handle("POST /v1/keys", h.auth(workspaceOK, h.createKey))
	m.Handle("GET /v1/keys", h.auth(workspaceOK, h.listKeys))
	m.Handle("DELETE /v1/keys/{id}", h.auth(workspaceOK, h.revokeKey))
	m.Handle("GET /v1/audit", h.auth(workspaceOK, h.audit))
}

func (h *Handler) createKey(w http.ResponseWriter, r *http.Request) (any, int, error) {
	var req api.CreateKeyRequest
	if err := decode(w, r, &req); err != nil {
		return nil, 0, err
	}
	k, err := h.svc.CreateKey(r.Context(), req)
	return k, http.StatusCreated, err
}

func (h *Handler) listKeys(w http.ResponseWriter, r *http.Request) (any, int, error) {
	ks, err := h.svc.Keys(r.Context())
	return api.KeyList{Keys: ks}, http.StatusOK, err
}

func (h *Handler) revokeKey(w http.ResponseWriter, r *http.Request) (any, int, error) {
	id := r.PathValue("id")
	err := h.svc.RevokeKey(r.Context(), id)
	return map[string]any{"id": id, "revoked": true}, http.StatusOK, err
}

func (h *Handler) audit(w http.ResponseWriter, r *http.Request) (any, int, error) {
	q := r.URL.Query()
	var before time.Time
	if s := q.Get("before"); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return nil, 0, &supervisor.Error{Status: http.StatusBadRequest, Code: supervisor.CodeBadRequest, Message: "before: want an RFC 3339 time"}
		}
		before = t
	}
	limit := 0
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return nil, 0, &supervisor.Error{Status: http.StatusBadRequest, Code: supervisor.CodeBadRequest, Message: "limit: want a positive number"}
		}
		limit = n
	}
	es, err := h.svc.Audit(r.Context(), before, limit)
	return api.AuditLog{Entries: es}, http.StatusOK, err
}
