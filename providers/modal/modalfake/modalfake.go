// Package modalfake is a local fake of Modal's API for the modal
// provider's tests: a real gRPC server (binary protobuf over HTTP/2, plain
// on loopback) implementing the service modal.client.ModalClient with the
// generated server interface of Modal's Go SDK
// (github.com/modal-labs/modal-client/go v0.11.1, proto/modal_proto, from
// modal_proto/api.proto). Like Modal's server it refuses what is not gRPC
// (a JSON or Connect call is answered 415, an HTTP/1 one gets no answer)
// and every call without the headers Modal's clients send: their client
// type (x-modal-client-type, a known ClientType) and version
// (x-modal-client-version), the token (x-modal-token-id,
// x-modal-token-secret), and but for AuthTokenGet the auth token that
// AuthTokenGet issued (x-modal-auth-token).
//
// It serves the calls the provider makes through the SDK:
//
//   - AuthTokenGet -> a JWT-shaped token with its expiry (exp);
//   - AppGetOrCreate {app_name, object_creation_type} -> {app_id};
//   - ImageFromId {image_id} -> {image_id}, NOT_FOUND for an unknown image;
//   - SecretGetOrCreate {object_creation_type EPHEMERAL or
//     ANONYMOUS_OWNED_BY_APP, env_dict} -> {secret_id};
//   - SandboxCreate {app_id, definition{entrypoint_args, image_id,
//     secret_ids, timeout_secs, open_ports}, tags} -> {sandbox_id}; a
//     repeated call (the same x-idempotency-key, as the SDK's retries send)
//     answers the sandbox the first one made;
//   - SandboxGetTaskId, SandboxGetTunnels, SandboxTagsGet;
//   - SandboxList {app_id, tags, before_timestamp} -> newest first, at most
//     PageSize created before before_timestamp;
//   - SandboxTerminate; NOT_FOUND for a sandbox that is gone.
//
// A sandbox runs the command its definition names (entrypoint_args), not
// its image's CMD: only a command that starts computerd (StartCommands)
// has port 7070 answer. Its tunnels (https://<id>-7070.modal.test:443) are
// served by a second listener (see Transport) that forwards to the
// sandbox's computerd, a real one running in-process with the sandbox's
// secrets as its environment (fakeapi).
//
// Faults apply to a whole call: the SDK retries UNAVAILABLE and INTERNAL
// with the same x-idempotency-key, and each of those attempts gets the
// same answer.
package modalfake

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/providers/internal/fakeapi"
)

// TunnelDomain is the domain of the fake's tunnel hosts.
const TunnelDomain = "modal.test"

// Service is the gRPC service the fake serves.
const Service = "modal.client.ModalClient"

// T is what the fake needs from a test.
type T = fakeapi.T

// Sandbox is a sandbox the fake holds: its definition as SandboxCreate
// gave it.
type Sandbox struct {
	ID             string
	AppID          string
	ImageID        string
	EntrypointArgs []string
	TimeoutSecs    int
	Tags           map[string]string
	Env            map[string]string
	Ports          []int // encrypted ports
	CreatedAt      float64
	// Serving says whether the command runs computerd, so that port 7070
	// answers.
	Serving  bool
	computer *fakeapi.Computer
}

// Call is one call the fake received.
type Call struct {
	Method   string // /modal.client.ModalClient/<Method>
	Metadata metadata.MD
	Code     codes.Code // the answer
}

// Fake is a running fake Modal.
type Fake struct {
	// URL is the server's address, http://127.0.0.1:PORT (plain HTTP/2).
	URL                  string
	TokenID, TokenSecret string
	Images               map[string]bool
	// StartCommands are the entrypoint args that start computerd.
	StartCommands [][]string
	// PageSize is the most sandboxes one SandboxList answers (default
	// 10; set it before the first call).
	PageSize int

	srv       *grpc.Server
	edge      *fakeapi.Edge
	dir       string
	sandboxes *fakeapi.Fleet[Sandbox]

	mu          sync.Mutex
	apps        map[string]string // id by name
	secrets     map[string]map[string]string
	tokens      map[string]time.Time // auth tokens issued, with their expiry
	created     map[string]string    // sandbox id by idempotency key
	lastCreated float64

	refuse      bool
	echo        bool
	loseCreates int
	failDeletes int
	failNext    []codes.Code
	failing     map[string]codes.Code // idempotency key: the answer of every attempt
	lost        map[string]bool       // idempotency key: replies lost
	calls       []Call
}

// New starts a fake Modal accepting the token id and secret and knowing
// the image ids. It stops when the test ends.
func New(t T, tokenID, tokenSecret string, images ...string) *Fake {
	f := &Fake{TokenID: tokenID, TokenSecret: tokenSecret, Images: map[string]bool{}, dir: t.TempDir(),
		StartCommands: [][]string{{"computerd"}, {"desktop-start"}},
		apps:          map[string]string{}, secrets: map[string]map[string]string{}, tokens: map[string]time.Time{},
		created: map[string]string{}, failing: map[string]codes.Code{}, lost: map[string]bool{},
		sandboxes: fakeapi.NewFleet(t,
			func(s *Sandbox) *fakeapi.Computer { return s.computer },
			func(s *Sandbox) map[string]string { return s.Tags })}
	for _, im := range images {
		f.Images[im] = true
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("modalfake: listen: %v", err))
	}
	f.URL = "http://" + ln.Addr().String()
	f.srv = grpc.NewServer(grpc.UnaryInterceptor(f.intercept))
	pb.RegisterModalClientServer(f.srv, &service{f: f})
	go f.srv.Serve(ln)
	t.Cleanup(f.srv.Stop)
	f.edge = fakeapi.NewEdge(t, TunnelDomain, f.route)
	return f
}

// Transport sends requests for tunnel hosts to the fake's tunnel listener.
func (f *Fake) Transport() *http.Transport { return f.edge.Transport() }

// Sandboxes returns the running sandboxes.
func (f *Fake) Sandboxes() []Sandbox { return f.sandboxes.All() }

// Exists reports whether a running sandbox is tagged label=value.
func (f *Fake) Exists(label, value string) bool { return f.sandboxes.Exists(label, value) }

// DeleteApp removes the app named name, as `modal app stop` and its
// removal do; its sandboxes stay until they end.
func (f *Fake) DeleteApp(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.apps, name)
}

// Calls returns the calls received so far.
func (f *Fake) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// RefuseCredentials makes every call answer UNAUTHENTICATED while on.
func (f *Fake) RefuseCredentials(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuse = on
}

// EchoHeaders makes the errors the fake plays (refused credentials,
// FailNext, failing deletes) repeat the call's header values while on, as
// a careless API echoes the key it refused.
func (f *Fake) EchoHeaders(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.echo = on
}

// LoseNextCreateReply makes the next SandboxCreate make its sandbox and
// every reply of that call (the SDK's retries included) be lost.
func (f *Fake) LoseNextCreateReply() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.loseCreates++
}

// FailNextDeletes makes the next n SandboxTerminate calls answer INTERNAL
// without terminating.
func (f *Fake) FailNextDeletes(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failDeletes += n
}

// httpCodes are the gRPC codes that the HTTP statuses FailNext takes
// stand for.
var httpCodes = map[int]codes.Code{
	400: codes.InvalidArgument, 401: codes.Unauthenticated, 403: codes.PermissionDenied, 404: codes.NotFound,
	409: codes.AlreadyExists, 429: codes.ResourceExhausted, 500: codes.Internal, 502: codes.Unavailable,
	503: codes.Unavailable, 504: codes.DeadlineExceeded,
}

// FailNext makes the next calls answer, in order, the gRPC codes that the
// HTTP statuses stand for (429 RESOURCE_EXHAUSTED, 500 INTERNAL, 502 and
// 503 UNAVAILABLE, 401 UNAUTHENTICATED, ...) without reaching the API.
func (f *Fake) FailNext(statuses ...int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range statuses {
		c, ok := httpCodes[s]
		if !ok {
			c = codes.Unknown
		}
		f.failNext = append(f.failNext, c)
	}
}

func first(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// intercept records each call and plays the checks and faults before the
// method.
func (f *Fake) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	resp, err := f.serve(ctx, md, req, info.FullMethod, handler)
	f.mu.Lock()
	f.calls = append(f.calls, Call{Method: info.FullMethod, Metadata: md.Copy(), Code: status.Code(err)})
	f.mu.Unlock()
	return resp, err
}

func (f *Fake) serve(ctx context.Context, md metadata.MD, req any, method string, handler grpc.UnaryHandler) (any, error) {
	f.mu.Lock()
	echo := f.echo
	code, msg := f.check(md, method)
	key := first(md, "x-idempotency-key")
	if code == codes.OK {
		var failing bool
		if code, failing = f.failing[key]; !failing {
			switch {
			case len(f.failNext) > 0:
				code, msg = f.failNext[0], "failure played by the fake"
				f.failNext = f.failNext[1:]
			case method == "/"+Service+"/SandboxTerminate" && f.failDeletes > 0:
				f.failDeletes--
				code, msg = codes.Internal, "internal error while terminating"
			}
			if code != codes.OK && key != "" {
				f.failing[key] = code
			}
		} else {
			msg = "failure played by the fake"
		}
	}
	lose := f.lost[key]
	if code == codes.OK && !lose && method == "/"+Service+"/SandboxCreate" && f.loseCreates > 0 {
		f.loseCreates--
		lose = true
		if key != "" {
			f.lost[key] = true
		}
	}
	f.mu.Unlock()
	if code != codes.OK {
		if echo {
			var sent []string
			for _, v := range md {
				sent = append(sent, v...)
			}
			msg += " (sent " + strings.Join(sent, ", ") + ")"
		}
		return nil, status.Error(code, msg)
	}
	resp, err := handler(ctx, req)
	if lose {
		return nil, status.Error(codes.Unavailable, "connection reset before the reply")
	}
	return resp, err
}

// check answers what Modal's server answers a call without the headers
// its clients send. f.mu is held.
func (f *Fake) check(md metadata.MD, method string) (codes.Code, string) {
	if f.refuse {
		return codes.Unauthenticated, "invalid credentials"
	}
	ct, err := strconv.Atoi(first(md, "x-modal-client-type"))
	if _, known := pb.ClientType_name[int32(ct)]; err != nil || !known || ct == 0 {
		return codes.InvalidArgument, "missing or unknown x-modal-client-type"
	}
	if first(md, "x-modal-client-version") == "" {
		return codes.InvalidArgument, "missing x-modal-client-version"
	}
	if first(md, "x-modal-token-id") != f.TokenID || first(md, "x-modal-token-secret") != f.TokenSecret {
		return codes.Unauthenticated, "Token missing or invalid"
	}
	if method == "/"+Service+"/AuthTokenGet" {
		return codes.OK, ""
	}
	exp, ok := f.tokens[first(md, "x-modal-auth-token")]
	if !ok || time.Now().After(exp) {
		return codes.Unauthenticated, "missing or expired x-modal-auth-token"
	}
	return codes.OK, ""
}

// service implements the gRPC service; methods it does not serve answer
// UNIMPLEMENTED.
type service struct {
	pb.UnimplementedModalClientServer
	f *Fake
}

func randomID(prefix string) string { return prefix + fakeapi.RandomHex(11) }

func (s *service) AuthTokenGet(context.Context, *pb.AuthTokenGetRequest) (*pb.AuthTokenGetResponse, error) {
	exp := time.Now().Add(time.Hour)
	enc := base64.RawURLEncoding
	head := enc.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`))
	claims, _ := json.Marshal(map[string]any{"exp": exp.Unix(), "sub": s.f.TokenID})
	token := head + "." + enc.EncodeToString(claims) + "." + fakeapi.RandomHex(16)
	s.f.mu.Lock()
	s.f.tokens[token] = exp
	s.f.mu.Unlock()
	return pb.AuthTokenGetResponse_builder{Token: token}.Build(), nil
}

func (s *service) AppGetOrCreate(_ context.Context, req *pb.AppGetOrCreateRequest) (*pb.AppGetOrCreateResponse, error) {
	if req.GetAppName() == "" {
		return nil, status.Error(codes.InvalidArgument, "app_name is required")
	}
	f := s.f
	f.mu.Lock()
	defer f.mu.Unlock()
	id, ok := f.apps[req.GetAppName()]
	if !ok {
		if req.GetObjectCreationType() != pb.ObjectCreationType_OBJECT_CREATION_TYPE_CREATE_IF_MISSING {
			return nil, status.Errorf(codes.NotFound, "App '%s' not found", req.GetAppName())
		}
		id = randomID("ap-")
		f.apps[req.GetAppName()] = id
	}
	return pb.AppGetOrCreateResponse_builder{AppId: id}.Build(), nil
}

func (s *service) ImageFromId(_ context.Context, req *pb.ImageFromIdRequest) (*pb.ImageFromIdResponse, error) {
	if !s.f.Images[req.GetImageId()] {
		return nil, status.Errorf(codes.NotFound, "Image %s not found", req.GetImageId())
	}
	return pb.ImageFromIdResponse_builder{ImageId: req.GetImageId()}.Build(), nil
}

// knownApp reports whether id is an app's. f.mu is held.
func (f *Fake) knownApp(id string) bool {
	for _, a := range f.apps {
		if a == id {
			return true
		}
	}
	return false
}

func (s *service) SecretGetOrCreate(_ context.Context, req *pb.SecretGetOrCreateRequest) (*pb.SecretGetOrCreateResponse, error) {
	f := s.f
	f.mu.Lock()
	defer f.mu.Unlock()
	switch req.GetObjectCreationType() {
	case pb.ObjectCreationType_OBJECT_CREATION_TYPE_EPHEMERAL:
	case pb.ObjectCreationType_OBJECT_CREATION_TYPE_ANONYMOUS_OWNED_BY_APP:
		if !f.knownApp(req.GetAppId()) {
			return nil, status.Error(codes.NotFound, "app not found")
		}
	default:
		return nil, status.Error(codes.InvalidArgument, "the fake makes ephemeral and app-owned secrets only")
	}
	id := randomID("st-")
	f.secrets[id] = req.GetEnvDict()
	return pb.SecretGetOrCreateResponse_builder{SecretId: id}.Build(), nil
}

func (s *service) SandboxCreate(ctx context.Context, req *pb.SandboxCreateRequest) (*pb.SandboxCreateResponse, error) {
	f := s.f
	md, _ := metadata.FromIncomingContext(ctx)
	key := first(md, "x-idempotency-key")
	def := req.GetDefinition()
	f.mu.Lock()
	if id, ok := f.created[key]; ok && key != "" {
		f.mu.Unlock()
		return pb.SandboxCreateResponse_builder{SandboxId: id}.Build(), nil
	}
	if !f.knownApp(req.GetAppId()) {
		f.mu.Unlock()
		return nil, status.Error(codes.NotFound, "App not found")
	}
	if !f.Images[def.GetImageId()] {
		f.mu.Unlock()
		return nil, status.Errorf(codes.NotFound, "Image %s not found", def.GetImageId())
	}
	env := map[string]string{}
	for _, id := range def.GetSecretIds() {
		sec, ok := f.secrets[id]
		if !ok {
			f.mu.Unlock()
			return nil, status.Errorf(codes.NotFound, "Secret %s not found", id)
		}
		for k, v := range sec {
			env[k] = v
		}
	}
	f.mu.Unlock()
	if t := def.GetTimeoutSecs(); t == 0 || t > 24*3600 {
		return nil, status.Error(codes.InvalidArgument, "timeout_secs must be between 1 and 86400")
	}
	c, err := fakeapi.StartComputer(f.dir, env[computerd.EnvTokenHash], env)
	if err != nil {
		return nil, status.Error(codes.Internal, "sandbox failed to start")
	}
	sb := &Sandbox{ID: randomID("sb-"), AppID: req.GetAppId(), ImageID: def.GetImageId(),
		EntrypointArgs: def.GetEntrypointArgs(), TimeoutSecs: int(def.GetTimeoutSecs()),
		Tags: map[string]string{}, Env: env, computer: c}
	for _, cmd := range f.StartCommands {
		sb.Serving = sb.Serving || slices.Equal(cmd, sb.EntrypointArgs)
	}
	for _, p := range def.GetOpenPorts().GetPorts() {
		if !p.GetUnencrypted() {
			sb.Ports = append(sb.Ports, int(p.GetPort()))
		}
	}
	for _, t := range req.GetTags() {
		sb.Tags[t.GetTagName()] = t.GetTagValue()
	}
	f.mu.Lock()
	// Distinct times, so that a batch boundary never splits a tie.
	sb.CreatedAt = max(float64(time.Now().UnixMicro())/1e6, f.lastCreated+1e-6)
	f.lastCreated = sb.CreatedAt
	if key != "" {
		f.created[key] = sb.ID
	}
	f.mu.Unlock()
	f.sandboxes.Add(sb.ID, sb)
	return pb.SandboxCreateResponse_builder{SandboxId: sb.ID}.Build(), nil
}

func (f *Fake) get(id string) (Sandbox, error) {
	sb, ok := f.sandboxes.Get(id)
	if !ok {
		return Sandbox{}, status.Errorf(codes.NotFound, "Sandbox %s not found", id)
	}
	return sb, nil
}

func (s *service) SandboxGetTaskId(_ context.Context, req *pb.SandboxGetTaskIdRequest) (*pb.SandboxGetTaskIdResponse, error) {
	sb, err := s.f.get(req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	task := "ta-" + strings.TrimPrefix(sb.ID, "sb-")
	return pb.SandboxGetTaskIdResponse_builder{TaskId: &task}.Build(), nil
}

func tunnels(sb Sandbox) []*pb.TunnelData {
	var out []*pb.TunnelData
	for _, p := range sb.Ports {
		out = append(out, pb.TunnelData_builder{Host: strings.TrimPrefix(sb.ID, "sb-") + "-" + strconv.Itoa(p) + "." + TunnelDomain,
			Port: 443, ContainerPort: uint32(p)}.Build())
	}
	return out
}

func (s *service) SandboxGetTunnels(_ context.Context, req *pb.SandboxGetTunnelsRequest) (*pb.SandboxGetTunnelsResponse, error) {
	sb, err := s.f.get(req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	return pb.SandboxGetTunnelsResponse_builder{
		Result:  pb.GenericResult_builder{Status: pb.GenericResult_GENERIC_STATUS_UNSPECIFIED}.Build(),
		Tunnels: tunnels(sb),
	}.Build(), nil
}

func tagsOf(m map[string]string) []*pb.SandboxTag {
	out := make([]*pb.SandboxTag, 0, len(m))
	for k, v := range m {
		out = append(out, pb.SandboxTag_builder{TagName: k, TagValue: v}.Build())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetTagName() < out[j].GetTagName() })
	return out
}

func (s *service) SandboxTagsGet(_ context.Context, req *pb.SandboxTagsGetRequest) (*pb.SandboxTagsGetResponse, error) {
	sb, err := s.f.get(req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	return pb.SandboxTagsGetResponse_builder{Tags: tagsOf(sb.Tags)}.Build(), nil
}

func (s *service) SandboxList(_ context.Context, req *pb.SandboxListRequest) (*pb.SandboxListResponse, error) {
	f := s.f
	want := map[string]string{}
	for _, t := range req.GetTags() {
		want[t.GetTagName()] = t.GetTagValue()
	}
	matching := f.sandboxes.Matching(want)
	sort.Slice(matching, func(i, j int) bool { return matching[i].CreatedAt > matching[j].CreatedAt })
	page := f.PageSize
	if page <= 0 {
		page = 10
	}
	var out []*pb.SandboxInfo
	for _, sb := range matching {
		if req.GetAppId() != "" && sb.AppID != req.GetAppId() || req.GetBeforeTimestamp() > 0 && sb.CreatedAt >= req.GetBeforeTimestamp() {
			continue
		}
		if len(out) == page {
			break
		}
		out = append(out, pb.SandboxInfo_builder{Id: sb.ID, AppId: sb.AppID, ImageId: sb.ImageID, Tags: tagsOf(sb.Tags),
			CreatedAt: sb.CreatedAt, TimeoutSecs: uint32(sb.TimeoutSecs), Tunnels: tunnels(sb),
			TaskInfo: pb.TaskInfo_builder{Id: "ta-" + strings.TrimPrefix(sb.ID, "sb-"), SandboxId: sb.ID}.Build()}.Build())
	}
	return pb.SandboxListResponse_builder{Sandboxes: out}.Build(), nil
}

func (s *service) SandboxTerminate(_ context.Context, req *pb.SandboxTerminateRequest) (*pb.SandboxTerminateResponse, error) {
	if _, ok := s.f.sandboxes.Remove(req.GetSandboxId()); !ok {
		return nil, status.Errorf(codes.NotFound, "Sandbox %s not found", req.GetSandboxId())
	}
	return pb.SandboxTerminateResponse_builder{}.Build(), nil
}

// route serves a tunnel, https://<sandbox>-<port>.<domain>: port 7070 of
// a running sandbox whose command started computerd.
func (f *Fake) route(w http.ResponseWriter, r *http.Request, label string) string {
	id, port, ok := strings.Cut(label, "-")
	sb, known := f.sandboxes.Get("sb-" + id)
	if !ok || !known || port != strconv.Itoa(computerd.Port) || !slices.Contains(sb.Ports, computerd.Port) {
		http.Error(w, "no such tunnel", http.StatusNotFound)
		return ""
	}
	if !sb.Serving {
		http.Error(w, "nothing listens on port 7070 in the sandbox", http.StatusBadGateway)
		return ""
	}
	return sb.computer.URL
}
