package computerd_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/computerd/server"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/internal/token"
)

// hugeAnswer answers every request with prefix, n bytes of 'a' and suffix,
// written from one reused buffer so that the server itself allocates
// little; it stops when the client hangs up. With declare set it sends a
// Content-Length, otherwise the answer is chunked.
func hugeAnswer(prefix, suffix string, n int, declare bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
		w.Header().Set("Content-Type", "application/json")
		if declare {
			w.Header().Set("Content-Length", strconv.Itoa(len(prefix)+n+len(suffix)))
		}
		io.WriteString(w, prefix)
		chunk := bytes.Repeat([]byte("a"), 1<<20)
		for left := n; left > 0; left -= len(chunk) {
			if _, err := w.Write(chunk[:min(left, len(chunk))]); err != nil {
				return
			}
		}
		io.WriteString(w, suffix)
	}
}

// TestExecHugeAnswerBoundedMemory: a computerd that answers an exec limited
// to 16 KiB per stream with 300 MB of stdout costs the supervisor's heap
// next to nothing, and the call fails with ErrAnswerTooLarge.
func TestExecHugeAnswerBoundedMemory(t *testing.T) {
	const answerBytes = 300 << 20
	const maxGrowth = 100 << 20
	ctx := testContext(t)
	c := fake(t, hugeAnswer(`{"exitCode":0,"stdout":"`, `","stderr":""}`, answerBytes, false))

	var before, during, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	res, err := c.Exec(ctx, computerd.ExecRequest{Command: "yes", TimeoutMs: 5000, MaxOutputBytes: 16 << 10})
	took := time.Since(start)
	runtime.ReadMemStats(&during)
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(res)

	heap := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	allocated := during.TotalAlloc - before.TotalAlloc
	t.Logf("300 MB exec answer: err=%v; heap after GC %+.1f MiB (%.1f -> %.1f MiB); allocated during the call %.1f MiB; %s",
		err, float64(heap)/(1<<20), float64(before.HeapAlloc)/(1<<20), float64(after.HeapAlloc)/(1<<20), float64(allocated)/(1<<20), took.Round(time.Millisecond))
	if !errors.Is(err, computerd.ErrAnswerTooLarge) {
		t.Errorf("err = %v, want ErrAnswerTooLarge", err)
	} else if !strings.Contains(err.Error(), "/v1/exec") {
		t.Errorf("err = %q, want it to name the call", err)
	}
	if heap > maxGrowth {
		t.Errorf("heap grew by %d MiB, want at most %d MiB", heap>>20, maxGrowth>>20)
	}
	if allocated > maxGrowth {
		t.Errorf("the call allocated %d MiB, want at most %d MiB", allocated>>20, maxGrowth>>20)
	}
}

// TestOversizedAnswers: every call that reads an answer refuses one larger
// than its limit with ErrAnswerTooLarge, whether the answer declares its
// length or not.
func TestOversizedAnswers(t *testing.T) {
	const n = 64 << 20 // above every limit the calls below use
	obj := func(field string) (string, string) { return `{"` + field + `":"`, `"}` }
	cases := []struct {
		name    string
		prefix  string
		suffix  string
		declare bool
		call    func(context.Context, *computerd.Client) error
	}{
		{name: "exec 16 KiB", prefix: `{"stdout":"`, suffix: `"}`, call: func(ctx context.Context, c *computerd.Client) error {
			_, err := c.Exec(ctx, computerd.ExecRequest{Command: "x", TimeoutMs: 1000, MaxOutputBytes: 16 << 10})
			return err
		}},
		{name: "exec default output", prefix: `{"stderr":"`, suffix: `"}`, declare: true, call: func(ctx context.Context, c *computerd.Client) error {
			_, err := c.Exec(ctx, computerd.ExecRequest{Command: "x", TimeoutMs: 1000})
			return err
		}},
		{name: "read 24000", prefix: `{"content":"`, suffix: `"}`, call: func(ctx context.Context, c *computerd.Client) error {
			_, err := c.Read(ctx, "f", 0, 24000)
			return err
		}},
		{name: "read default", prefix: `{"content":"`, suffix: `"}`, declare: true, call: func(ctx context.Context, c *computerd.Client) error {
			_, err := c.Read(ctx, "f", 0, 0)
			return err
		}},
		{name: "stat", call: func(ctx context.Context, c *computerd.Client) error {
			_, err := c.Stat(ctx, "f")
			return err
		}},
		{name: "list", call: func(ctx context.Context, c *computerd.Client) error {
			_, err := c.List(ctx, "d")
			return err
		}},
		{name: "processes", prefix: `[{"command":"`, suffix: `"}]`, call: func(ctx context.Context, c *computerd.Client) error {
			_, err := c.Processes(ctx)
			return err
		}},
		{name: "health", declare: true, call: func(ctx context.Context, c *computerd.Client) error {
			_, err := c.Health(ctx)
			return err
		}},
		{name: "write", call: func(ctx context.Context, c *computerd.Client) error {
			_, err := c.Write(ctx, computerd.WriteRequest{Path: "f", Content: "x"})
			return err
		}},
		{name: "upload", call: func(ctx context.Context, c *computerd.Client) error {
			_, err := c.Upload(ctx, "f", strings.NewReader("x"), 0)
			return err
		}},
		{name: "bind", call: func(ctx context.Context, c *computerd.Client) error {
			_, err := c.Bind(ctx, computerd.BindRequest{TokenHash: "h"})
			return err
		}},
		{name: "kill", call: func(ctx context.Context, c *computerd.Client) error {
			return c.Kill(ctx, computerd.KillRequest{PID: 1})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			if tc.prefix == "" {
				tc.prefix, tc.suffix = obj("path")
			}
			c := fake(t, hugeAnswer(tc.prefix, tc.suffix, n, tc.declare))
			err := tc.call(ctx, c)
			if !errors.Is(err, computerd.ErrAnswerTooLarge) {
				t.Fatalf("err = %v, want ErrAnswerTooLarge", err)
			}
			if !strings.Contains(err.Error(), "bytes") {
				t.Errorf("err = %q, want it to state the limit", err)
			}
		})
	}
}

// TestWorstCaseAnswersFit: the limits leave room for the largest answers
// a real computerd gives within a call's own bounds, every byte escaped.
func TestWorstCaseAnswersFit(t *testing.T) {
	ctx := testContext(t)
	home := t.TempDir()
	srv := server.New(server.Config{TokenHash: token.Hash("tok"), Home: home, Version: "v1"})
	ts := httptest.NewServer(srv)
	defer ts.Close()
	defer srv.Close()
	c := computerd.NewClient(ts.URL, "tok", computerd.WithHTTPClient(ts.Client()))

	// Each NUL is \u0000 and each \x01 is \u0001 on the wire: 6 bytes.
	cmd := "head -c 100000 /dev/zero; head -c 100000 /dev/zero | tr '\\0' '\\1' >&2"
	for _, limit := range []int{16 << 10, 0} {
		res, err := c.Exec(ctx, computerd.ExecRequest{Command: cmd, TimeoutMs: 10000, MaxOutputBytes: limit})
		if err != nil {
			t.Fatalf("exec with %d bytes per stream: %v", limit, err)
		}
		if !res.StdoutTruncated || !res.StderrTruncated || !strings.Contains(res.Stderr, "\x01\x01\x01") {
			t.Errorf("exec with %d bytes per stream: %+v", limit, res)
		}
	}
	// 24,000 characters that take 6 bytes each on the wire (control
	// characters and U+2028 are escaped).
	if err := os.WriteFile(filepath.Join(home, "f.txt"), bytes.Repeat([]byte("\x01\x02\u2028"), 9000), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := c.Read(ctx, "f.txt", 0, 24000)
	if err != nil || len([]rune(r.Content)) != 24000 || !r.Truncated {
		t.Fatalf("Read = %d characters, truncated %v, %v", len([]rune(r.Content)), r.Truncated, err)
	}
}

// stall accepts a request and never answers it, until release is closed
// or the client hangs up. With readBody unset it does not read the body
// either.
func stall(release <-chan struct{}, readBody bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if readBody {
			io.Copy(io.Discard, r.Body)
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}
}

// zeros is an endless body.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestNoAnswerEndsAtDeadline: with a context that has no deadline, a call
// to a computerd that accepts it and never answers ends at the client's
// default deadline for that kind of call, and leaves nothing running.
func TestNoAnswerEndsAtDeadline(t *testing.T) {
	const callTimeout = 300 * time.Millisecond
	const execMargin = 200 * time.Millisecond
	const execTimeout = 250 * time.Millisecond
	cases := []struct {
		name     string
		readBody bool
		want     time.Duration
		call     func(context.Context, *computerd.Client) error
	}{
		{name: "health", want: callTimeout, call: func(ctx context.Context, c *computerd.Client) error {
			_, err := c.Health(ctx)
			return err
		}},
		{name: "exec", readBody: true, want: execTimeout + execMargin, call: func(ctx context.Context, c *computerd.Client) error {
			_, err := c.Exec(ctx, computerd.ExecRequest{Command: "sleep 1", TimeoutMs: execTimeout.Milliseconds()})
			return err
		}},
		{name: "read", want: callTimeout, call: func(ctx context.Context, c *computerd.Client) error {
			_, err := c.Read(ctx, "f", 0, 0)
			return err
		}},
		{name: "write", readBody: true, want: callTimeout, call: func(ctx context.Context, c *computerd.Client) error {
			_, err := c.Write(ctx, computerd.WriteRequest{Path: "f", Content: "x"})
			return err
		}},
		{name: "upload never read", want: callTimeout, call: func(ctx context.Context, c *computerd.Client) error {
			_, err := c.Upload(ctx, "f", zeros{}, 0)
			return err
		}},
		{name: "upload never answered", readBody: true, want: callTimeout, call: func(ctx context.Context, c *computerd.Client) error {
			_, err := c.Upload(ctx, "f", strings.NewReader("x"), 0)
			return err
		}},
		{name: "download", want: callTimeout, call: func(ctx context.Context, c *computerd.Client) error {
			rc, err := c.Download(ctx, "f")
			if err == nil {
				rc.Close()
			}
			return err
		}},
		{name: "exec stream", want: callTimeout, call: func(ctx context.Context, c *computerd.Client) error {
			s, err := c.ExecStream(ctx, computerd.StreamStart{Command: "true"}, nil, nil)
			if err == nil {
				s.Close()
			}
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			ts := httptest.NewServer(stall(release, tc.readBody))
			c := computerd.NewClient(ts.URL, "tok", computerd.WithHTTPClient(ts.Client()),
				computerd.WithCallTimeout(callTimeout), computerd.WithExecMargin(execMargin))

			done := make(chan error, 1)
			start := time.Now()
			go func() { done <- tc.call(context.Background(), c) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(tc.want + 3*time.Second):
				t.Errorf("the call is still waiting %s after it started; want it to end at %s", time.Since(start).Round(time.Millisecond), tc.want)
				close(release)
				ts.CloseClientConnections()
				<-done
				ts.Close()
				return
			}
			took := time.Since(start)
			close(release)
			ts.Close()
			t.Logf("ended after %s: %v", took.Round(time.Millisecond), err)
			if took < tc.want {
				t.Errorf("ended after %s, before the deadline of %s", took, tc.want)
			}
			if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "within "+tc.want.String()) {
				t.Errorf("err = %v, want a deadline error that says so", err)
			}
			testkit.VerifyNone(t)
		})
	}
}

// TestCallerDeadlineWins: the client's defaults apply only to a context
// without a deadline, and an exec's default follows its timeout.
func TestCallerDeadlineWins(t *testing.T) {
	ctx := testContext(t)
	c := fake(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(300 * time.Millisecond)
		io.WriteString(w, `{"status":"ok","exitCode":3}`)
	}, computerd.WithCallTimeout(50*time.Millisecond), computerd.WithExecMargin(50*time.Millisecond))
	if _, err := c.Health(ctx); err != nil {
		t.Errorf("Health with the caller's deadline: %v", err)
	}
	res, err := c.Exec(context.Background(), computerd.ExecRequest{Command: "x", TimeoutMs: 1000})
	if err != nil || res.ExitCode != 3 {
		t.Errorf("Exec within its timeout = %+v, %v", res, err)
	}
	if _, err := c.Health(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Health past the default deadline: %v, want a deadline error", err)
	}
}

// TestStreamsOutliveTheirOpening: the default deadline of a download or a
// streamed exec bounds only its start; the stream itself lasts.
func TestStreamsOutliveTheirOpening(t *testing.T) {
	// Long enough for a busy machine to open a file or start a process.
	const callTimeout = 400 * time.Millisecond
	home := t.TempDir()
	srv := server.New(server.Config{TokenHash: token.Hash("tok"), Home: home, Version: "v1"})
	ts := httptest.NewServer(srv)
	defer ts.Close()
	defer srv.Close()
	c := computerd.NewClient(ts.URL, "tok", computerd.WithHTTPClient(ts.Client()), computerd.WithCallTimeout(callTimeout))
	if err := os.WriteFile(filepath.Join(home, "f.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}

	rc, err := c.Download(context.Background(), "f.txt")
	if err != nil {
		t.Fatalf("Download: %v", err)
	}
	time.Sleep(3 * callTimeout)
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(b) != "hello" {
		t.Errorf("download read past the call timeout = %q, %v", b, err)
	}

	var out bytes.Buffer
	s, err := c.ExecStream(context.Background(), computerd.StreamStart{Command: "sleep 1.2; echo hi", TimeoutMs: 10000}, &out, nil)
	if err != nil {
		t.Fatalf("ExecStream: %v", err)
	}
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		code, _, err := s.Wait()
		done <- result{code, err}
	}()
	select {
	case r := <-done:
		if r.err != nil || r.code != 0 || out.String() != "hi\n" {
			t.Errorf("stream past the call timeout: exit %d, %v, output %q", r.code, r.err, out.String())
		}
	case <-time.After(10 * time.Second):
		s.Close()
		t.Fatal("the stream did not end")
	}
}

// slowReader yields n chunks of data, one every pause.
type slowReader struct {
	n     int
	pause time.Duration
}

func (s *slowReader) Read(p []byte) (int, error) {
	if s.n == 0 {
		return 0, io.EOF
	}
	time.Sleep(s.pause)
	s.n--
	return copy(p, "chunk\n"), nil
}

// TestUploadDeadlineIsSilence: without a deadline in its context, an
// upload that keeps moving may take longer than the call timeout, and an
// in-memory body keeps its length.
func TestUploadDeadlineIsSilence(t *testing.T) {
	// The upload takes 10 pauses of an eighth of the timeout: longer than
	// the timeout in all, with room in each silence for a machine busy
	// with other tests: the last silence holds the server's fsync of the
	// file and its folder, which once took more than 600 ms in CI.
	const callTimeout = 3 * time.Second
	home := t.TempDir()
	srv := server.New(server.Config{TokenHash: token.Hash("tok"), Home: home, Version: "v1"})
	ts := httptest.NewServer(srv)
	defer ts.Close()
	defer srv.Close()
	c := computerd.NewClient(ts.URL, "tok", computerd.WithHTTPClient(ts.Client()), computerd.WithCallTimeout(callTimeout))

	start := time.Now()
	res, err := c.Upload(context.Background(), "slow.txt", &slowReader{n: 10, pause: callTimeout / 8}, 0)
	if err != nil || res.Bytes != 60 {
		t.Fatalf("slow upload over %s = %+v, %v", time.Since(start).Round(time.Millisecond), res, err)
	}

	var length int64 = -2
	f := fake(t, func(w http.ResponseWriter, r *http.Request) {
		length = r.ContentLength
		io.WriteString(w, `{"bytes":5}`)
	}, computerd.WithCallTimeout(callTimeout))
	if _, err := f.Upload(context.Background(), "f", strings.NewReader("hello"), 0); err != nil || length != 5 {
		t.Errorf("upload of 5 bytes in memory: Content-Length %d, %v", length, err)
	}
}
