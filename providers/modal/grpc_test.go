package modal_test

import (
	"bytes"
	"net/http"
	"slices"
	"strconv"
	"testing"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/modal"
)

// TestCommand: a sandbox runs the command it is given, not its image's
// CMD, so the provider gives the CMD of Berth's image: computerd for the
// headless image, and for the desktop kind too where no desktop image of
// its own is configured. A sandbox without it never answers on 7070.
func TestCommand(t *testing.T) {
	f, p, creds := newFake(t, nil)
	s := spec(creds)
	s.Image = providers.ImageHeadless
	if _, err := p.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	only, err := modal.New(modal.Options{ServerURL: f.URL, HeadlessImage: headless, Scheme: "http", Transport: f.Transport()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(only.Close)
	s.Image, s.AttemptID = providers.ImageDesktop, "a_2"
	if _, err := only.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	for _, sb := range f.Sandboxes() {
		if sb.ImageID != headless || !slices.Equal(sb.EntrypointArgs, modal.CommandHeadless) || !sb.Serving {
			t.Errorf("sandbox of %s runs %q, want computerd", sb.ImageID, sb.EntrypointArgs)
		}
	}

	f.StartCommands = nil // as if the command started no computerd
	s.AttemptID = "a_3"
	m, err := p.Create(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	c := computerd.NewClient(m.Endpoint, "tok", computerd.WithTransport(p.Transport(m, creds)))
	if _, err := c.Processes(t.Context()); err == nil {
		t.Errorf("a sandbox whose command is not computerd answered on port 7070")
	}
}

// TestJSONRefused: the fake is a gRPC server; a JSON (Connect-style) call
// is refused over HTTP/1.1 and over HTTP/2, and makes no sandbox.
func TestJSONRefused(t *testing.T) {
	f, _, creds := newFake(t, nil)
	body := []byte(`{"appId":"ap-1","definition":{"imageId":"` + headless + `","timeoutSecs":60}}`)
	h2 := new(http.Protocols)
	h2.SetUnencryptedHTTP2(true)
	for name, tr := range map[string]*http.Transport{"HTTP/1.1": {}, "HTTP/2": {Protocols: h2}} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, f.URL+"/"+modal.Service+"/SandboxCreate", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Connect-Protocol-Version", "1")
		req.Header.Set("x-modal-token-id", creds[modal.CredTokenID])
		req.Header.Set("x-modal-token-secret", creds[modal.CredTokenSecret])
		resp, err := tr.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Errorf("%s: a JSON call was answered 200", name)
			}
			t.Logf("%s: %s", name, resp.Status)
		} else {
			t.Logf("%s: %v", name, err)
		}
		tr.CloseIdleConnections()
	}
	if n := len(f.Sandboxes()); n != 0 || len(f.Calls()) != 0 {
		t.Errorf("%d sandboxes, %d calls after JSON calls, want none", n, len(f.Calls()))
	}
}

// TestAuthRefused: gRPC calls without the auth token from AuthTokenGet,
// without the token, or without the client's type and version are
// refused as Modal's server refuses them.
func TestAuthRefused(t *testing.T) {
	f, _, creds := newFake(t, nil)
	conn, err := grpc.NewClient(f.URL[len("http://"):], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	api := pb.NewModalClientClient(conn)
	client := []string{"x-modal-client-type", strconv.Itoa(int(pb.ClientType_CLIENT_TYPE_LIBMODAL_GO)), "x-modal-client-version", "1.0.0"}
	token := []string{"x-modal-token-id", creds[modal.CredTokenID], "x-modal-token-secret", creds[modal.CredTokenSecret]}
	call := func(md ...string) error {
		ctx := metadata.AppendToOutgoingContext(t.Context(), md...)
		_, err := api.AppGetOrCreate(ctx, pb.AppGetOrCreateRequest_builder{AppName: "x",
			ObjectCreationType: pb.ObjectCreationType_OBJECT_CREATION_TYPE_CREATE_IF_MISSING}.Build())
		return err
	}
	if err := call(append(client, token...)...); status.Code(err) != codes.Unauthenticated {
		t.Errorf("without the auth token: %v, want UNAUTHENTICATED", err)
	}
	if err := call(append(append(client, token...), "x-modal-auth-token", "x.e30.forged")...); status.Code(err) != codes.Unauthenticated {
		t.Errorf("with an auth token the server did not issue: %v, want UNAUTHENTICATED", err)
	}
	res, err := api.AuthTokenGet(metadata.AppendToOutgoingContext(t.Context(), append(client, token...)...), &pb.AuthTokenGetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	auth := []string{"x-modal-auth-token", res.GetToken()}
	if err := call(append(client, auth...)...); status.Code(err) != codes.Unauthenticated {
		t.Errorf("without the token id and secret: %v, want UNAUTHENTICATED", err)
	}
	if err := call(append(token, auth...)...); status.Code(err) != codes.InvalidArgument {
		t.Errorf("without the client type and version: %v, want INVALID_ARGUMENT", err)
	}
	if err := call(append(append(client, token...), auth...)...); err != nil {
		t.Errorf("with every header: %v", err)
	}
	if _, err := api.AuthTokenGet(metadata.AppendToOutgoingContext(t.Context(), client...), &pb.AuthTokenGetRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("AuthTokenGet without the token: %v, want UNAUTHENTICATED", err)
	}
}
