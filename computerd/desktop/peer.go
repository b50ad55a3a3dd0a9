package desktop

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pion/interceptor"
	"github.com/pion/rtcp"
	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/httpjson"
)

// gatherTimeout bounds ICE gathering before an answer.
const gatherTimeout = 5 * time.Second

var capabilities = map[string]webrtc.RTPCodecCapability{
	CodecH264: {
		MimeType: webrtc.MimeTypeH264, ClockRate: 90000,
		SDPFmtpLine:  "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f",
		RTCPFeedback: feedback,
	},
	CodecVP8: {MimeType: webrtc.MimeTypeVP8, ClockRate: 90000, RTCPFeedback: feedback},
}

var feedback = []webrtc.RTCPFeedback{{Type: "nack"}, {Type: "nack", Parameter: "pli"}, {Type: "ccm", Parameter: "fir"}, {Type: "goog-remb"}}

// webrtcAPI builds pion's API on first use, so that a computer nobody
// watches never pays for it.
func (d *Desktop) webrtcAPI() (*webrtc.API, error) {
	d.apiOnce.Do(func() {
		m := &webrtc.MediaEngine{}
		for pt, c := range map[webrtc.PayloadType]string{102: CodecH264, 96: CodecVP8} {
			if err := m.RegisterCodec(webrtc.RTPCodecParameters{RTPCodecCapability: capabilities[c], PayloadType: pt}, webrtc.RTPCodecTypeVideo); err != nil {
				d.apiErr = err
				return
			}
		}
		reg := &interceptor.Registry{}
		if err := webrtc.RegisterDefaultInterceptors(m, reg); err != nil {
			d.apiErr = err
			return
		}
		var se webrtc.SettingEngine
		se.SetICETimeouts(3*time.Second, 6*time.Second, time.Second)
		se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4, webrtc.NetworkTypeTCP4})
		se.SetRelayAcceptanceMinWait(0)
		d.api = webrtc.NewAPI(webrtc.WithMediaEngine(m), webrtc.WithInterceptorRegistry(reg), webrtc.WithSettingEngine(se))
	})
	return d.api, d.apiErr
}

// viewer is one browser watching the screen.
type viewer struct {
	d     *Desktop
	id    string
	codec string
	pc    *webrtc.PeerConnection
	track *webrtc.TrackLocalStaticSample
	enc   *encoder

	writeMu sync.Mutex
	joined  bool
	once    sync.Once
}

func (v *viewer) write(data []byte, d time.Duration) {
	v.writeMu.Lock()
	defer v.writeMu.Unlock()
	v.writeLocked(data, d)
}

func (v *viewer) writeLocked(data []byte, d time.Duration) {
	v.track.WriteSample(media.Sample{Data: data, Duration: d})
}

// close leaves the encoder and ends the connection, once.
func (v *viewer) close() {
	v.once.Do(func() {
		v.enc.leave(v)
		v.d.mu.Lock()
		delete(v.d.viewers, v)
		v.d.mu.Unlock()
		v.d.release(v.codec)
		v.pc.Close()
		v.d.log.Info("viewer left", "viewer", v.id, "codec", v.codec)
	})
}

// pickCodec chooses H264 when the offer has it, VP8 otherwise.
func pickCodec(sdp string) string {
	if strings.Contains(strings.ToUpper(sdp), "H264/90000") {
		return CodecH264
	}
	return CodecVP8
}

// iceServers fills in the relay's URLs for servers that carry only
// credentials.
func (d *Desktop) iceServers(in []ICEServer) ([]webrtc.ICEServer, error) {
	var out []webrtc.ICEServer
	for _, s := range in {
		urls := s.URLs
		if len(urls) == 0 {
			if d.cfg.TURNHost == "" {
				return nil, fmt.Errorf("iceServers: no urls, and %s is not set on this computer", EnvTURNHost)
			}
			hp := d.cfg.TURNHost + ":" + strconv.Itoa(d.cfg.TURNPort)
			urls = []string{"turn:" + hp + "?transport=udp", "turn:" + hp + "?transport=tcp"}
		}
		for _, u := range urls {
			if !strings.HasPrefix(u, "turn:") && !strings.HasPrefix(u, "turns:") {
				return nil, fmt.Errorf("iceServers: %q is not a turn: or turns: URL (viewers are reached only through the relay)", u)
			}
		}
		out = append(out, webrtc.ICEServer{URLs: urls, Username: s.Username, Credential: s.Credential})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("iceServers: at least one TURN server with credentials is required")
	}
	return out, nil
}

func (d *Desktop) handleOffer(w http.ResponseWriter, r *http.Request) {
	var req OfferRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 2*maxSDPBytes)).Decode(&req); err != nil {
		httpjson.WriteError(w, http.StatusBadRequest, computerd.CodeBadRequest, "invalid JSON body: "+err.Error())
		return
	}
	if req.SDP == "" || len(req.SDP) > maxSDPBytes {
		httpjson.WriteError(w, http.StatusBadRequest, computerd.CodeBadRequest, fmt.Sprintf("sdp: required, at most %d bytes", maxSDPBytes))
		return
	}
	codec := req.Codec
	switch codec {
	case "":
		codec = pickCodec(req.SDP)
	case CodecH264, CodecVP8:
	default:
		httpjson.WriteError(w, http.StatusBadRequest, computerd.CodeBadRequest, fmt.Sprintf("codec: %q must be %q or %q", codec, CodecH264, CodecVP8))
		return
	}
	servers, err := d.iceServers(req.ICEServers)
	if err != nil {
		httpjson.WriteError(w, http.StatusBadRequest, computerd.CodeBadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), gatherTimeout+2*time.Second)
	defer cancel()
	answer, status, err := d.answer(ctx, req, codec, servers)
	if err != nil {
		code := computerd.CodeBadRequest
		switch status {
		case http.StatusTooManyRequests:
			code = computerd.CodeTooLarge
		case http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			code = computerd.CodeInternal
		}
		httpjson.WriteError(w, status, code, err.Error())
		return
	}
	httpjson.Write(w, http.StatusOK, answer)
}

// answer makes the viewer's connection: it starts (or joins) the encoder
// while pion gathers relay candidates, then answers with all of them.
func (d *Desktop) answer(ctx context.Context, req OfferRequest, codec string, servers []webrtc.ICEServer) (OfferAnswer, int, error) {
	d.mu.Lock()
	d.seq++
	id := req.Viewer
	if id == "" {
		id = "v" + strconv.Itoa(d.seq)
	}
	// A viewer that connects again replaces its old connection.
	var old []*viewer
	for v := range d.viewers {
		if v.id == id {
			old = append(old, v)
		}
	}
	n := len(d.viewers) - len(old)
	d.mu.Unlock()
	for _, v := range old {
		v.close()
	}
	if n >= d.cfg.MaxViewers {
		return OfferAnswer{}, http.StatusTooManyRequests, fmt.Errorf("viewers: %d already watch this computer (at most %d)", n, d.cfg.MaxViewers)
	}
	api, err := d.webrtcAPI()
	if err != nil {
		return OfferAnswer{}, http.StatusServiceUnavailable, err
	}
	enc, err := d.acquire(codec)
	if err != nil {
		return OfferAnswer{}, http.StatusServiceUnavailable, err
	}
	pc, err := api.NewPeerConnection(webrtc.Configuration{ICEServers: servers, ICETransportPolicy: webrtc.ICETransportPolicyRelay})
	if err != nil {
		d.release(codec)
		return OfferAnswer{}, http.StatusServiceUnavailable, err
	}
	v := &viewer{d: d, id: id, codec: codec, pc: pc, enc: enc}
	fail := func(status int, err error) (OfferAnswer, int, error) {
		v.once.Do(func() {}) // the viewer never was: nothing to leave
		pc.Close()
		d.release(codec)
		return OfferAnswer{}, status, err
	}
	v.track, err = webrtc.NewTrackLocalStaticSample(capabilities[codec], "video", "berth-desktop")
	if err != nil {
		return fail(http.StatusServiceUnavailable, err)
	}
	sender, err := pc.AddTrack(v.track)
	if err != nil {
		return fail(http.StatusBadRequest, fmt.Errorf("sdp: %w", err))
	}
	go func() { // RTCP must be read for NACKs and reports to work
		var last time.Time
		for {
			pkts, _, err := sender.ReadRTCP()
			if err != nil {
				return
			}
			for _, p := range pkts {
				switch p.(type) {
				case *rtcp.PictureLossIndication, *rtcp.FullIntraRequest:
					// The viewer cannot decode: send it the last keyframe
					// and what followed, at most twice a second.
					if time.Since(last) > 500*time.Millisecond {
						last = time.Now()
						go enc.replay(v)
					}
				}
			}
		}
	}()
	pc.OnConnectionStateChange(func(s webrtc.PeerConnectionState) {
		switch s {
		case webrtc.PeerConnectionStateConnected:
			v.writeMu.Lock()
			joined := v.joined
			v.joined = true
			v.writeMu.Unlock()
			if !joined {
				enc.join(v)
				d.log.Info("viewer connected", "viewer", id, "codec", codec)
			}
		case webrtc.PeerConnectionStateFailed, webrtc.PeerConnectionStateClosed:
			go v.close()
		}
	})
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeOffer, SDP: req.SDP}); err != nil {
		return fail(http.StatusBadRequest, fmt.Errorf("sdp: %w", err))
	}
	ans, err := pc.CreateAnswer(nil)
	if err != nil {
		return fail(http.StatusBadRequest, fmt.Errorf("sdp: %w", err))
	}
	gathered := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(ans); err != nil {
		return fail(http.StatusBadRequest, fmt.Errorf("sdp: %w", err))
	}
	select {
	case <-gathered:
	case <-ctx.Done():
		return fail(http.StatusGatewayTimeout, fmt.Errorf("ICE gathering through the relay did not finish: %w", ctx.Err()))
	case <-time.After(gatherTimeout):
		return fail(http.StatusGatewayTimeout, fmt.Errorf("ICE gathering through the relay took over %v", gatherTimeout))
	}
	local := pc.LocalDescription()
	if !strings.Contains(local.SDP, "typ relay") {
		return fail(http.StatusServiceUnavailable, fmt.Errorf("no relay candidate: the computer could not allocate on the TURN relay %v", servers[0].URLs))
	}
	d.mu.Lock()
	d.viewers[v] = struct{}{}
	d.mu.Unlock()
	// Remove the viewer if it never connects.
	time.AfterFunc(gatherTimeout+10*time.Second, func() {
		v.writeMu.Lock()
		joined := v.joined
		v.writeMu.Unlock()
		if !joined {
			v.close()
		}
	})
	return OfferAnswer{SDP: local.SDP, Codec: codec, Viewer: id}, http.StatusOK, nil
}
