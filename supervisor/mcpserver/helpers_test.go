package mcpserver

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/api/apitest"
	"github.com/berthdev/berth/internal/testkit"
)

func TestMain(m *testing.M) {
	testkit.VerifyTestMain(m)
}

const (
	testAgent = "a1"
	testToken = "sup-token"
	mcpToken  = "mcp-token"
)

// testContext returns a context that ends before the test's deadline.
func testContext(t *testing.T) context.Context {
	return testkit.ContextTimeout(t, 20*time.Second)
}

// call is one request the fake supervisor received.
type call = apitest.Request

// answer is the fake supervisor's reply to one request. With drop set it
// closes the connection instead; with hold set it waits for hold to close
// first, after closing held (when set).
type answer struct {
	status int
	body   string
	drop   bool
	held   chan struct{}
	hold   chan struct{}
}

// fakeSupervisor answers each "METHOD /path" route as set by on, and
// records the requests.
type fakeSupervisor struct{ *apitest.Server }

func newFakeSupervisor(t *testing.T) *fakeSupervisor {
	t.Helper()
	return &fakeSupervisor{apitest.New(t)}
}

// on sets the answers of route, given in turn; the last one repeats.
func (f *fakeSupervisor) on(route string, answers ...answer) {
	as := make([]apitest.Answer, len(answers))
	for i, a := range answers {
		as[i] = apitest.Answer{Status: a.status, Body: a.body, Drop: a.drop, Held: a.held, Hold: a.hold}
	}
	f.On(route, as...)
}

func (f *fakeSupervisor) ok(route, body string) { f.OK(route, body) }

func (f *fakeSupervisor) requests() []call { return f.Requests() }

// last returns the last request made, failing the test when there is none.
func (f *fakeSupervisor) last(t *testing.T) call {
	t.Helper()
	return f.Last(t)
}

// testLogger logs to t.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// newTestServer returns a Server of testAgent calling f.
func newTestServer(t *testing.T, f *fakeSupervisor, opts ...api.Option) *Server {
	t.Helper()
	opts = append([]api.Option{api.WithBackoff(time.Millisecond, 5*time.Millisecond)}, opts...)
	c, err := api.New(f.URL, testToken, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return New(c, testAgent, WithLogger(testLogger(t)), WithVersion("test"), WithShutdownTimeout(5*time.Second))
}

// connectInMemory runs s over an in-memory transport and returns a client
// session of it. Cleanup closes the session and checks that Run ended well.
func connectInMemory(t *testing.T, s *Server) *mcp.ClientSession {
	t.Helper()
	// Not the test's context: that ends before cleanup, where the client
	// leaves first.
	runCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	ct, st := mcp.NewInMemoryTransports()
	ran := make(chan error, 1)
	go func() { ran <- s.Run(runCtx, st) }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(testContext(t), ct, nil)
	if err != nil {
		cancel()
		<-ran
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer cancel()
		cs.Close()
		timer := time.NewTimer(10 * time.Second)
		defer timer.Stop()
		select {
		case err := <-ran:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-timer.C:
			t.Error("Run did not end after the client left")
		}
	})
	return cs
}

// bearer is a transport that adds a bearer token.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// httpServer is s served over streamable HTTP on loopback.
type httpServer struct {
	url    string // the MCP endpoint
	client *http.Client
	stop   func() error
}

// serveHTTP serves s on a loopback port with token until the test ends.
func serveHTTP(t *testing.T, s *Server, token string) *httpServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testContext(t))
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln, token) }()
	tr := &http.Transport{}
	hc := &http.Client{Transport: tr}
	if token != "" {
		hc.Transport = bearer{token, tr}
	}
	var once sync.Once
	var serveErr error
	shutdown := func() {
		cancel()
		// A connection that the client dialed but never used holds the
		// server's shutdown for 5 s: close those as they come.
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			tr.CloseIdleConnections()
			select {
			case serveErr = <-served:
				return
			case <-tick.C:
			}
		}
	}
	stop := func() error {
		once.Do(shutdown)
		return serveErr
	}
	t.Cleanup(func() {
		first := false
		once.Do(func() {
			first = true
			shutdown()
		})
		if first && serveErr != nil {
			t.Errorf("Serve: %v", serveErr)
		}
	})
	return &httpServer{url: "http://" + ln.Addr().String() + Path, client: hc, stop: stop}
}

// connectHTTP returns a client session of h.
func connectHTTP(t *testing.T, h *httpServer) *mcp.ClientSession {
	t.Helper()
	ctx := testContext(t)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: h.url, HTTPClient: h.client}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// transports runs test against a server connected in memory and over
// streamable HTTP.
func transports(t *testing.T, test func(t *testing.T, f *fakeSupervisor, cs *mcp.ClientSession)) {
	t.Run("inmemory", func(t *testing.T) {
		f := newFakeSupervisor(t)
		test(t, f, connectInMemory(t, newTestServer(t, f)))
	})
	t.Run("http", func(t *testing.T) {
		f := newFakeSupervisor(t)
		test(t, f, connectHTTP(t, serveHTTP(t, newTestServer(t, f), mcpToken)))
	})
}

// callTool calls a tool and fails the test on a protocol error.
func callTool(t *testing.T, cs *mcp.ClientSession, name string, args any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(testContext(t), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

// text returns the text of a result's content blocks, one per line.
func text(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// structured decodes a result's structured content into v.
func structured(t *testing.T, res *mcp.CallToolResult, v any) {
	t.Helper()
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("structured content %s: %v", raw, err)
	}
}

// jsonEqual fails the test when got and want are different JSON values.
func jsonEqual(t *testing.T, got, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Fatalf("JSON %q: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("want %q: %v", want, err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	if string(gb) != string(wb) {
		t.Errorf("JSON = %s, want %s", gb, wb)
	}
}
