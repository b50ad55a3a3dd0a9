package liveview

import (
	_ "embed"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"time"

	"github.com/berthdev/berth/computerd/desktop"
	"github.com/berthdev/berth/internal/httpjson"
	"github.com/berthdev/berth/relay/turnserver"
	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/store"
)

//go:embed viewer.html
var viewerHTML string

var viewerPage = template.Must(template.New("viewer").Parse(viewerHTML))

// maxBody bounds a signalling request (an SDP offer is a few KB).
const maxBody = 128 << 10

// ICEConfig is what the page builds its RTCPeerConnection from.
type ICEConfig struct {
	ICEServers         []ICEServer `json:"iceServers"`
	ICETransportPolicy string      `json:"iceTransportPolicy"`
	// RenewSeconds is when the page should renew its view token.
	RenewSeconds int `json:"renewSeconds"`
}

// ICEServer is one entry of RTCConfiguration.iceServers.
type ICEServer struct {
	URLs       []string `json:"urls"`
	Username   string   `json:"username"`
	Credential string   `json:"credential"`
}

// OfferRequest is the page's offer.
type OfferRequest struct {
	SDP   string `json:"sdp"`
	Codec string `json:"codec,omitempty"`
}

// OfferAnswer is the computer's answer, as the page gets it.
type OfferAnswer struct {
	SDP   string `json:"sdp"`
	Codec string `json:"codec"`
}

func writeError(w http.ResponseWriter, err error) {
	e := supervisor.AsError(err)
	httpjson.WriteError(w, e.Status, e.Code, e.Message)
}

// authorize checks the view token of a request for its session.
func (m *Manager) authorize(r *http.Request) (session, viewer string, exp time.Time, err error) {
	session = r.PathValue("session")
	viewer, exp, err = m.check(r.Context(), session, r.URL.Query().Get("token"))
	return session, viewer, exp, err
}

func (m *Manager) page(w http.ResponseWriter, r *http.Request) {
	session, _, _, err := m.authorize(r)
	if err != nil {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintln(w, supervisor.AsError(err).Message)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; media-src 'self' blob:; img-src 'self' data:; frame-src 'self'")
	viewerPage.Execute(w, map[string]string{"Session": session})
}

// config hands the viewer TURN credentials of its own.
func (m *Manager) config(w http.ResponseWriter, r *http.Request) {
	_, viewer, exp, err := m.authorize(r)
	if err != nil {
		writeError(w, err)
		return
	}
	c, err := turnserver.Issue(m.cfg.TURNSecret, "v."+viewer, m.cfg.Clock.Now(), turnTTL)
	if err != nil {
		writeError(w, err)
		return
	}
	renew := max(int(exp.Sub(m.cfg.Clock.Now()).Seconds()/2), 5)
	httpjson.Write(w, http.StatusOK, ICEConfig{
		ICEServers:         []ICEServer{{URLs: m.cfg.ViewerTURN, Username: c.Username, Credential: c.Password}},
		ICETransportPolicy: "relay", RenewSeconds: renew,
	})
}

// offer forwards the page's offer to the computer with TURN credentials
// for the computer's side, and answers with the computer's answer.
func (m *Manager) offer(w http.ResponseWriter, r *http.Request) {
	session, viewer, _, err := m.authorize(r)
	if err != nil {
		writeError(w, err)
		return
	}
	var req OfferRequest
	if err := decode(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	if req.SDP == "" || len(req.SDP) > 64<<10 {
		writeError(w, &supervisor.Error{Status: http.StatusBadRequest, Code: supervisor.CodeBadRequest, Message: "sdp: required, at most 65536 bytes"})
		return
	}
	if req.Codec != "" && req.Codec != desktop.CodecH264 && req.Codec != desktop.CodecVP8 {
		writeError(w, &supervisor.Error{Status: http.StatusBadRequest, Code: supervisor.CodeBadRequest, Message: fmt.Sprintf("codec: %q must be %q or %q", req.Codec, desktop.CodecH264, desktop.CodecVP8)})
		return
	}
	x, err := m.cfg.Store.GetSession(r.Context(), session)
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, &supervisor.Error{Status: http.StatusNotFound, Code: supervisor.CodeNotFound, Message: fmt.Sprintf("session %s does not exist", session)})
		return
	}
	if err == nil {
		err = m.viewable(x)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	c, err := turnserver.Issue(m.cfg.TURNSecret, "c."+x.ComputerID+"."+viewer, m.cfg.Clock.Now(), turnTTL)
	if err != nil {
		writeError(w, err)
		return
	}
	dc, err := m.desktopClient(r.Context(), x)
	if err != nil {
		writeError(w, err)
		return
	}
	a, err := dc.Offer(r.Context(), desktop.OfferRequest{
		SDP: req.SDP, Codec: req.Codec, Viewer: viewer,
		ICEServers: []desktop.ICEServer{{Username: c.Username, Credential: c.Password}},
	})
	if err != nil {
		var re *desktop.RemoteError
		if errors.As(err, &re) && re.Status/100 == 4 {
			writeError(w, &supervisor.Error{Status: re.Status, Code: supervisor.CodeBadRequest, Message: "computer: " + re.Message})
			return
		}
		m.log.Warn("offer to the computer failed", "session", session, "viewer", viewer, "err", err)
		writeError(w, &supervisor.Error{Status: http.StatusBadGateway, Code: supervisor.CodeProvider, Message: "the computer's streamer did not answer; retrying may help"})
		return
	}
	httpjson.Write(w, http.StatusOK, OfferAnswer{SDP: a.SDP, Codec: a.Codec})
}

// renew answers a fresh token for the same seat.
func (m *Manager) renew(w http.ResponseWriter, r *http.Request) {
	session, viewer, _, err := m.authorize(r)
	if err != nil {
		writeError(w, err)
		return
	}
	now := m.cfg.Clock.Now()
	exp := now.Add(m.cfg.TokenTTL)
	if err := m.cfg.Store.RenewSeat(r.Context(), session, viewer, exp, now); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			err = &supervisor.Error{Status: http.StatusForbidden, Code: supervisor.CodeUnauthorized, Message: "view token: this viewer has left; ask for a new link"}
		} else {
			m.log.Warn("renew a viewer seat", "session", session, "viewer", viewer, "err", err)
		}
		writeError(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"token": m.sign(session, viewer, exp), "expiresAt": exp.UTC()})
}

// leave frees the viewer's seat at once.
func (m *Manager) leave(w http.ResponseWriter, r *http.Request) {
	session, viewer, _, err := m.authorize(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := m.cfg.Store.LeaveSeat(r.Context(), session, viewer); err != nil {
		m.log.Warn("free a viewer seat", "session", session, "viewer", viewer, "err", err)
		writeError(w, err)
		return
	}
	m.log.Info("viewer left", "session", session, "viewer", viewer)
	w.WriteHeader(http.StatusNoContent)
}

func decode(w http.ResponseWriter, r *http.Request, v any) error {
	return supervisor.BodyError(httpjson.Decode(w, r, maxBody, v))
}
