package server

import (
	"encoding/hex"
	"net/http"
	"strings"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/httpjson"
	"github.com/berthdev/berth/internal/token"
)

// binding is what a computer serves under: the hash of the one token it
// accepts and the environment its commands get on top of computerd's own.
// It is set once, at start (Config.TokenHash) or by the one bind
// (Config.BindHash), and never changes after.
type binding struct {
	tokenHash string
	env       map[string]string
}

// tokenHash returns the hash of the accepted token, "" while unbound.
func (s *Server) tokenHash() string {
	if b := s.binding.Load(); b != nil {
		return b.tokenHash
	}
	return ""
}

// boundEnv returns the environment the bind gave, nil when it gave none.
func (s *Server) boundEnv() map[string]string {
	if b := s.binding.Load(); b != nil {
		return b.env
	}
	return nil
}

// Bound reports whether the server accepts a token: it was started with
// one, or a bind gave it one.
func (s *Server) Bound() bool { return s.tokenHash() != "" }

// handleBind serves POST /v1/bind: the holder of the one-time bind secret
// gives a waiting computer its session's token hash and environment. The
// first bind wins; every later one is refused, whoever sends it.
func (s *Server) handleBind(w http.ResponseWriter, r *http.Request) error {
	if s.Bound() || s.cfg.BindHash == "" {
		return errorf(http.StatusConflict, computerd.CodeAlreadyBound, "this computer is bound already; it takes one bind only")
	}
	h := r.Header.Get("Authorization")
	const prefix = "bearer "
	if len(h) <= len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) ||
		!token.Check(strings.TrimSpace(h[len(prefix):]), s.cfg.BindHash) {
		return errorf(http.StatusUnauthorized, computerd.CodeUnauthorized, "missing or wrong bind secret")
	}
	var req computerd.BindRequest
	if err := decodeJSON(w, r, computerd.MaxBindBytes, &req); err != nil {
		return err
	}
	if b, err := hex.DecodeString(req.TokenHash); err != nil || len(b) != 32 || req.TokenHash != strings.ToLower(req.TokenHash) {
		return badRequest("tokenHash: want the hex SHA-256 of the session's token (64 lowercase hex digits)")
	}
	env := make(map[string]string, len(req.Env))
	for k, v := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			return badRequest("env: %q: want a name without '=' or NUL and a value without NUL", k)
		}
		if isHiddenEnv(k) {
			return badRequest("env: %s is computerd's own setting and cannot be set", k)
		}
		env[k] = v
	}
	if !s.binding.CompareAndSwap(nil, &binding{tokenHash: req.TokenHash, env: env}) {
		return errorf(http.StatusConflict, computerd.CodeAlreadyBound, "this computer is bound already; it takes one bind only")
	}
	s.log.Info("bound to a session", "env", len(env))
	httpjson.Write(w, http.StatusOK, computerd.BindResult{ComputerID: s.cfg.ComputerID})
	return nil
}

func isHiddenEnv(k string) bool {
	for _, h := range hiddenEnv {
		if k == h {
			return true
		}
	}
	return false
}
