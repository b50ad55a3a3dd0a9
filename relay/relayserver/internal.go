package relayserver

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/berthdev/berth/internal/httpjson"
)

// The relay's internal API, for the supervisor when the relay runs as its
// own process (`berth relay`). Every call carries the shared RELAY_TOKEN in
// the TokenHeader header (not Authorization, which a proxied request keeps
// for the agent's computer).
const (
	// InternalPrefix is where the internal API is served.
	InternalPrefix = "/v1/internal"
	// TokenHeader carries RELAY_TOKEN on internal calls.
	TokenHeader = "Berth-Relay-Token"
	// ErrorHeader marks an answer the relay made itself (not the agent):
	// its value is the error code, such as CodeLenderOffline.
	ErrorHeader = "Berth-Relay-Error"
	// CodeLenderOffline answers (503) a request for a lender whose agent
	// has no link. The wire string predates the name and stays.
	CodeLenderOffline = "agent_offline"
)

// PresenceInfo is a lending agent's presence on the internal API; its JSON
// keeps the name agentId for the lender's id.
type PresenceInfo struct {
	LenderID    string    `json:"agentId"`
	Online      bool      `json:"online"`
	ConnectedAt time.Time `json:"connectedAt,omitzero"`
	LastSeen    time.Time `json:"lastSeen,omitzero"`
	Version     string    `json:"version,omitempty"`
}

func info(p Presence) PresenceInfo {
	return PresenceInfo(p)
}

// InternalHandler serves the internal API, guarded by token:
//
//	GET  /v1/internal/agents                     every agent's presence
//	GET  /v1/internal/agents/{id}                one agent's presence (404: never seen)
//	DELETE /v1/internal/agents/{id}              drop the agent's link (404: none)
//	ANY  /v1/internal/agents/{id}/http/{path...} an HTTP request to the agent's API, as /{path}
//
// A request for an agent that is offline answers 503 with ErrorHeader set
// to CodeLenderOffline and the agent's last-seen time in the body.
func (s *Server) InternalHandler(token string) http.Handler {
	if len(token) < 16 {
		panic("relayserver: internal API token shorter than 16 characters")
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+InternalPrefix+"/agents", func(w http.ResponseWriter, r *http.Request) {
		ps := s.Lenders()
		out := make([]PresenceInfo, 0, len(ps))
		for _, p := range ps {
			out = append(out, info(p))
		}
		httpjson.Write(w, http.StatusOK, out)
	})
	mux.HandleFunc("GET "+InternalPrefix+"/agents/{id}", func(w http.ResponseWriter, r *http.Request) {
		p, ok := s.Presence(r.PathValue("id"))
		if !ok {
			writeErr(w, http.StatusNotFound, "not_found", fmt.Sprintf("agent %s has never connected to this relay", r.PathValue("id")), time.Time{})
			return
		}
		httpjson.Write(w, http.StatusOK, info(p))
	})
	mux.HandleFunc("DELETE "+InternalPrefix+"/agents/{id}", func(w http.ResponseWriter, r *http.Request) {
		if !s.Drop(r.PathValue("id")) {
			writeErr(w, http.StatusNotFound, "not_found", fmt.Sprintf("agent %s has no link to this relay", r.PathValue("id")), time.Time{})
			return
		}
		httpjson.Write(w, http.StatusOK, map[string]any{"agent": r.PathValue("id"), "dropped": true})
	})
	mux.HandleFunc(InternalPrefix+"/agents/{id}/http/{path...}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		p, _ := s.Presence(id)
		if !p.Online {
			oe := &OfflineError{LenderID: id, LastSeen: p.LastSeen}
			writeErr(w, http.StatusServiceUnavailable, CodeLenderOffline, oe.Error(), p.LastSeen)
			return
		}
		rest := "/" + r.PathValue("path")
		rp := &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.Out.URL.Scheme, pr.Out.URL.Host = "http", "agent"
				pr.Out.URL.Path, pr.Out.URL.RawPath = rest, ""
				pr.Out.Host = "agent"
				pr.Out.Header.Del(TokenHeader)
			},
			Transport:     s.Transport(id),
			FlushInterval: -1,
			ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
				var oe *OfflineError
				if errors.As(err, &oe) {
					writeErr(w, http.StatusServiceUnavailable, CodeLenderOffline, oe.Error(), oe.LastSeen)
					return
				}
				s.log.Warn("relayed request failed", "agent", id, "path", rest, "err", err)
				writeErr(w, http.StatusBadGateway, "agent_link", "the link to the agent failed mid-request", time.Time{})
			},
		}
		rp.ServeHTTP(w, r)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := r.Header.Get(TokenHeader)
		if subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			s.log.Warn("internal API call refused: wrong relay token", "remote", r.RemoteAddr, "path", r.URL.Path)
			writeErr(w, http.StatusUnauthorized, "unauthorized", "missing or wrong "+TokenHeader, time.Time{})
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// errorBody is the shared error envelope with, for CodeAgentOffline, when
// the agent was last seen.
type errorBody struct {
	Error struct {
		httpjson.Error
		LastSeen time.Time `json:"lastSeen,omitzero"`
	} `json:"error"`
}

func writeErr(w http.ResponseWriter, status int, code, msg string, lastSeen time.Time) {
	var b errorBody
	b.Error.Code, b.Error.Message, b.Error.LastSeen = code, msg, lastSeen
	w.Header().Set(ErrorHeader, code)
	httpjson.Write(w, status, b)
}

// Remote is the supervisor's side of a relay that runs as its own process:
// it reads presence and sends HTTP requests to agents through the relay's
// internal API.
type Remote struct {
	base  string
	token string
	hc    *http.Client
}

// NewRemote returns a client for the relay's internal API at base (such as
// http://relay.internal:8081) with the shared token; hc nil uses a client
// of its own.
func NewRemote(base, token string, hc *http.Client) (*Remote, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("RELAY_URL=%q: want http(s)://HOST:PORT of the relay's internal API", base)
	}
	if len(token) < 16 {
		return nil, errors.New("RELAY_TOKEN: must be at least 16 characters")
	}
	if hc == nil {
		hc = internalClient()
	}
	return &Remote{base: strings.TrimRight(base, "/"), token: token, hc: hc}, nil
}

// internalClient is the client for relays' internal APIs when the caller
// gives none: requests to agents may stream for long, so callers bound
// them with contexts.
func internalClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32, IdleConnTimeout: 90 * time.Second, DisableCompression: true}}
}

// Presence returns an agent's presence; ok is false for an agent the
// relay has never seen.
func (r *Remote) Presence(ctx context.Context, lenderID string) (p Presence, ok bool, err error) {
	var pi PresenceInfo
	status, err := r.get(ctx, "/agents/"+url.PathEscape(lenderID), &pi)
	if err != nil {
		return Presence{}, false, err
	}
	if status == http.StatusNotFound {
		return Presence{LenderID: lenderID}, false, nil
	}
	return Presence(pi), true, nil
}

// Lenders returns every lending agent the relay has seen.
func (r *Remote) Lenders(ctx context.Context) ([]Presence, error) {
	var pis []PresenceInfo
	if _, err := r.get(ctx, "/agents", &pis); err != nil {
		return nil, err
	}
	out := make([]Presence, 0, len(pis))
	for _, pi := range pis {
		out = append(out, Presence(pi))
	}
	return out, nil
}

func (r *Remote) get(ctx context.Context, path string, out any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.base+InternalPrefix+path, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set(TokenHeader, r.token)
	resp, err := r.hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("relay %s: %w", r.base, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return resp.StatusCode, nil
	case resp.StatusCode == http.StatusUnauthorized:
		return 0, fmt.Errorf("relay %s refused RELAY_TOKEN", r.base)
	case resp.StatusCode != http.StatusOK:
		return 0, fmt.Errorf("relay %s answered %d", r.base, resp.StatusCode)
	}
	return resp.StatusCode, json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(out)
}

// Transport returns a RoundTripper whose requests go to the agent's API
// through the relay. A request for an agent that is offline fails with an
// *OfflineError.
func (r *Remote) Transport(lenderID string) http.RoundTripper {
	return &remoteTransport{r: r, prefix: r.base + InternalPrefix + "/agents/" + url.PathEscape(lenderID) + "/http"}
}

type remoteTransport struct {
	r      *Remote
	prefix string
}

func (t *remoteTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	u, err := url.Parse(t.prefix + req.URL.EscapedPath())
	if err != nil {
		return nil, err
	}
	u.RawQuery = req.URL.RawQuery
	out := req.Clone(req.Context())
	out.URL, out.Host = u, ""
	out.Header.Set(TokenHeader, t.r.token)
	rt := t.r.hc.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	resp, err := rt.RoundTrip(out)
	if err != nil {
		return nil, err
	}
	if resp.Header.Get(ErrorHeader) == CodeLenderOffline {
		var b errorBody
		json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&b)
		resp.Body.Close()
		id := strings.TrimPrefix(t.prefix, t.r.base+InternalPrefix+"/agents/")
		id = strings.TrimSuffix(id, "/http")
		if uid, err := url.PathUnescape(id); err == nil {
			id = uid
		}
		return nil, &OfflineError{LenderID: id, LastSeen: b.Error.LastSeen}
	}
	return resp, nil
}

// AuthenticatePath is the supervisor's endpoint where a relay that runs as
// its own process checks an agent's token: POST {"token"} with
// RELAY_TOKEN in TokenHeader, answered {"agentId"} or 401.
const AuthenticatePath = "/v1/internal/relay/authenticate"

// AuthenticateRequest and AuthenticateAnswer are AuthenticatePath's bodies.
type AuthenticateRequest struct {
	Token string `json:"token"`
}

// AuthenticateAnswer names the lender a lending agent's token belongs to
// (JSON agentId).
type AuthenticateAnswer struct {
	LenderID string `json:"agentId"`
}

// SupervisorAuth returns a Config.Authenticate that asks the supervisor at
// base (AuthenticatePath) with the shared relay token. A supervisor that
// cannot be reached refuses the agent, which retries with backoff.
func SupervisorAuth(base, relayToken string, hc *http.Client, log func(msg string, args ...any)) func(string) (string, bool) {
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	base = strings.TrimRight(base, "/")
	return func(tok string) (string, bool) {
		body, _ := json.Marshal(AuthenticateRequest{Token: tok})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+AuthenticatePath, strings.NewReader(string(body)))
		if err != nil {
			return "", false
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(TokenHeader, relayToken)
		resp, err := hc.Do(req)
		if err != nil {
			if log != nil {
				log("supervisor unreachable for an agent's token check", "err", err)
			}
			return "", false
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			if log != nil && resp.StatusCode != http.StatusUnauthorized {
				log("supervisor refused the token check", "status", resp.StatusCode)
			}
			return "", false
		}
		var a AuthenticateAnswer
		if json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&a) != nil || a.LenderID == "" {
			return "", false
		}
		return a.LenderID, true
	}
}
