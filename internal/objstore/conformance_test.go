package objstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"
)

// testStore is the contract every Store keeps; each implementation's
// test runs it. leftovers, when set, fails the test when a failed upload
// left something behind (a temporary file, an incomplete upload).
func testStore(t *testing.T, s Store, leftovers func(t *testing.T)) {
	if leftovers == nil {
		leftovers = func(*testing.T) {}
	}
	t.Run("RoundTrip", func(t *testing.T) { testRoundTrip(t, s) })
	t.Run("Overwrite", func(t *testing.T) { testOverwrite(t, s) })
	t.Run("Empty", func(t *testing.T) { testEmpty(t, s) })
	t.Run("NestedKeys", func(t *testing.T) { testNestedKeys(t, s) })
	t.Run("List", func(t *testing.T) { testList(t, s) })
	t.Run("InvalidKeys", func(t *testing.T) { testInvalidKeys(t, s) })
	t.Run("FailedUploadKeepsOld", func(t *testing.T) { testFailedUpload(t, s); leftovers(t) })
	t.Run("CancelledUploadKeepsOld", func(t *testing.T) { testCancelledUpload(t, s); leftovers(t) })
	t.Run("Stream200MB", func(t *testing.T) { testStream200MB(t, s) })
}

// gen is a deterministic stream of n pseudo-random bytes that exists only
// a buffer at a time; after failAt bytes (when >= 0) it fails.
type gen struct {
	state, n, off, failAt int64
	err                   error
	onFail                func()
}

func newGen(seed, n int64) *gen { return &gen{state: seed*0x2545F4914F6CDD1D + 1, n: n, failAt: -1} }

var errSource = errors.New("the source broke")

func (g *gen) Read(p []byte) (int, error) {
	if g.failAt >= 0 && g.off >= g.failAt {
		if g.onFail != nil {
			g.onFail()
			g.onFail = nil
		}
		if g.err != nil {
			return 0, g.err
		}
		return 0, errSource
	}
	if g.off >= g.n {
		return 0, io.EOF
	}
	if rem := g.n - g.off; int64(len(p)) > rem {
		p = p[:rem]
	}
	if g.failAt >= 0 && int64(len(p)) > g.failAt-g.off {
		p = p[:g.failAt-g.off]
	}
	i := 0
	for ; i+8 <= len(p); i += 8 {
		g.state ^= g.state << 13
		g.state ^= int64(uint64(g.state) >> 7)
		g.state ^= g.state << 17
		v := uint64(g.state)
		p[i], p[i+1], p[i+2], p[i+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
		p[i+4], p[i+5], p[i+6], p[i+7] = byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56)
	}
	for ; i < len(p); i++ {
		p[i] = byte(g.off + int64(i))
	}
	g.off += int64(len(p))
	return len(p), nil
}

func sumOf(t testing.TB, r io.Reader) ([32]byte, int64) {
	t.Helper()
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	var s [32]byte
	copy(s[:], h.Sum(nil))
	return s, n
}

func genSum(t testing.TB, seed, n int64) [32]byte {
	s, _ := sumOf(t, newGen(seed, n))
	return s
}

func getAll(t testing.TB, ctx context.Context, s Store, key string) ([]byte, Info) {
	t.Helper()
	rc, info, err := s.Get(ctx, key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return b, info
}

// uniqueKey gives each subtest its own keys, the store being shared.
func uniqueKey(t *testing.T, rest string) string {
	name := strings.NewReplacer("/", "-", "#", "-").Replace(t.Name())
	return "t/" + name + "/" + rest
}

func testRoundTrip(t *testing.T, s Store) {
	ctx := testkit.Context(t)
	key := uniqueKey(t, "agent-1/home.tar.zst")
	data := bytes.Repeat([]byte("berth "), 50_000)
	meta := map[string]string{"image": "berth/headless:1", "made-by": "test"}
	before := time.Now().Add(-5 * time.Second)
	info, err := s.Put(ctx, key, bytes.NewReader(data), meta)
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	if info.Key != key || info.Size != int64(len(data)) {
		t.Fatalf("put info = %+v, want key %s size %d", info, key, len(data))
	}
	for k, v := range meta {
		if info.Metadata[k] != v {
			t.Errorf("put info metadata[%s] = %q, want %q", k, info.Metadata[k], v)
		}
	}
	got, ginfo := getAll(t, ctx, s, key)
	if !bytes.Equal(got, data) {
		t.Fatalf("get returned %d bytes, not the %d put", len(got), len(data))
	}
	st, err := s.Stat(ctx, key)
	if err != nil {
		t.Fatalf("stat: %v", err)
	}
	for _, i := range []Info{ginfo, st} {
		if i.Key != key || i.Size != int64(len(data)) || i.Modified.Before(before) || i.Modified.After(time.Now().Add(5*time.Second)) {
			t.Errorf("info = key %s size %d modified %v; want %s, %d, about now", i.Key, i.Size, i.Modified, key, len(data))
		}
		if len(i.Metadata) != len(meta) {
			t.Errorf("metadata = %v, want %v", i.Metadata, meta)
		}
		for k, v := range meta {
			if i.Metadata[k] != v {
				t.Errorf("metadata[%s] = %q, want %q", k, i.Metadata[k], v)
			}
		}
	}
	if err := s.Delete(ctx, key); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := s.Stat(ctx, key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("stat after delete: %v, want ErrNotFound", err)
	}
	if _, _, err := s.Get(ctx, key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get after delete: %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, key); err != nil {
		t.Fatalf("delete of a missing object: %v, want nil", err)
	}
}

func testOverwrite(t *testing.T, s Store) {
	ctx := testkit.Context(t)
	key := uniqueKey(t, "obj")
	for i, body := range []string{"first version, longer than the second", "second"} {
		if _, err := s.Put(ctx, key, strings.NewReader(body), map[string]string{"n": fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	got, info := getAll(t, ctx, s, key)
	if string(got) != "second" || info.Metadata["n"] != "1" {
		t.Fatalf("after overwrite: %q %v", got, info.Metadata)
	}
}

func testEmpty(t *testing.T, s Store) {
	ctx := testkit.Context(t)
	key := uniqueKey(t, "empty")
	info, err := s.Put(ctx, key, strings.NewReader(""), nil)
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != 0 {
		t.Fatalf("size %d", info.Size)
	}
	got, ginfo := getAll(t, ctx, s, key)
	if len(got) != 0 || ginfo.Size != 0 {
		t.Fatalf("got %d bytes, size %d", len(got), ginfo.Size)
	}
}

func testNestedKeys(t *testing.T, s Store) {
	ctx := testkit.Context(t)
	a, ab := uniqueKey(t, "a"), uniqueKey(t, "a/b")
	for _, k := range []string{ab, a} {
		if _, err := s.Put(ctx, k, strings.NewReader(k), nil); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
	}
	for _, k := range []string{a, ab} {
		if got, _ := getAll(t, ctx, s, k); string(got) != k {
			t.Fatalf("get %s = %q", k, got)
		}
	}
}

func testList(t *testing.T, s Store) {
	ctx := testkit.Context(t)
	base := uniqueKey(t, "")
	keys := []string{"x/1", "x/2", "x/sub/3", "x2/1", "x.y", "y"}
	for i, k := range keys {
		if _, err := s.Put(ctx, base+k, strings.NewReader(strings.Repeat("z", i)), map[string]string{"k": k}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		prefix string
		want   []string
	}{
		{"", []string{"x.y", "x/1", "x/2", "x/sub/3", "x2/1", "y"}},
		{"x/", []string{"x/1", "x/2", "x/sub/3"}},
		{"x", []string{"x.y", "x/1", "x/2", "x/sub/3", "x2/1"}},
		{"x/s", []string{"x/sub/3"}},
		{"x/sub/", []string{"x/sub/3"}},
		{"nothing/", nil},
		{"no", nil},
	} {
		got, err := s.List(ctx, base+c.prefix)
		if err != nil {
			t.Fatalf("list %q: %v", c.prefix, err)
		}
		var names []string
		for _, i := range got {
			k := strings.TrimPrefix(i.Key, base)
			names = append(names, k)
			idx := -1
			for j, kk := range keys {
				if kk == k {
					idx = j
				}
			}
			if i.Size != int64(idx) || i.Modified.IsZero() {
				t.Errorf("list %q: %s has size %d, modified %v; want %d", c.prefix, k, i.Size, i.Modified, idx)
			}
		}
		if fmt.Sprint(names) != fmt.Sprint(c.want) {
			t.Errorf("list %q = %v, want %v", c.prefix, names, c.want)
		}
	}
}

func testInvalidKeys(t *testing.T, s Store) {
	ctx := testkit.Context(t)
	for _, k := range badKeys {
		if _, err := s.Put(ctx, k, strings.NewReader("x"), nil); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("put %q: %v, want ErrInvalidKey", k, err)
		}
		if _, _, err := s.Get(ctx, k); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("get %q: %v, want ErrInvalidKey", k, err)
		}
		if _, err := s.Stat(ctx, k); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("stat %q: %v, want ErrInvalidKey", k, err)
		}
		if err := s.Delete(ctx, k); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("delete %q: %v, want ErrInvalidKey", k, err)
		}
	}
	for _, p := range []string{"../", "/x", "a//", "a/../", "a b"} {
		if _, err := s.List(ctx, p); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("list %q: %v, want ErrInvalidKey", p, err)
		}
	}
	if _, err := s.Put(ctx, uniqueKey(t, "m"), strings.NewReader("x"), map[string]string{"Bad Name": "v"}); !errors.Is(err, ErrInvalidMetadata) {
		t.Errorf("put with a bad metadata name: %v, want ErrInvalidMetadata", err)
	}
}

// failedUploadSize is past the S3 store's first part (16 MiB), so that parts are
// already uploaded when the source fails.
const failedUploadSize = 24 << 20

func checkOld(t *testing.T, ctx context.Context, s Store, key string, want [32]byte, wantSize int64) {
	t.Helper()
	rc, _, err := s.Get(ctx, key)
	if err != nil {
		t.Fatalf("get the previous object: %v", err)
	}
	defer rc.Close()
	got, n := sumOf(t, rc)
	if got != want || n != wantSize {
		t.Fatalf("the previous object changed: %d bytes, sha256 %x", n, got)
	}
}

func testFailedUpload(t *testing.T, s Store) {
	ctx := testkit.Context(t)
	key := uniqueKey(t, "archive")
	const oldSize = 3 << 20
	if _, err := s.Put(ctx, key, newGen(1, oldSize), nil); err != nil {
		t.Fatal(err)
	}
	g := newGen(2, 4*failedUploadSize)
	g.failAt = failedUploadSize
	_, err := s.Put(ctx, key, g, nil)
	if !errors.Is(err, errSource) {
		t.Fatalf("put from a failing source: %v, want its error", err)
	}
	checkOld(t, ctx, s, key, genSum(t, 1, oldSize), oldSize)
}

func testCancelledUpload(t *testing.T, s Store) {
	ctx := testkit.Context(t)
	key := uniqueKey(t, "archive")
	const oldSize = 1 << 20
	if _, err := s.Put(ctx, key, newGen(3, oldSize), nil); err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g := newGen(4, 4*failedUploadSize)
	g.failAt = failedUploadSize
	g.err = context.Canceled
	g.onFail = cancel
	if _, err := s.Put(pctx, key, g, nil); err == nil {
		t.Fatal("a cancelled put succeeded")
	}
	checkOld(t, ctx, s, key, genSum(t, 3, oldSize), oldSize)
}

// heapPeak samples the live heap until stop is called, and returns the
// peak above the heap at the start.
func heapPeak() (stop func() uint64) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	base := read()
	var peak uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			if v := read(); v > peak {
				peak = v
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 {
		close(done)
		wg.Wait()
		if peak < base {
			return 0
		}
		return peak - base
	}
}

// streamLimit bounds the heap a 200 MB Put or Get may grow by: a part of
// the S3 store and its buffers, far below the object.
const streamLimit = 64 << 20

func testStream200MB(t *testing.T, s Store) {
	if testing.Short() {
		t.Skip("streams 200 MB")
	}
	ctx := testkit.Context(t)
	key := uniqueKey(t, "big")
	const size = 200 << 20
	stop := heapPeak()
	begin := time.Now()
	info, err := s.Put(ctx, key, newGen(5, size), nil)
	peak := stop()
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != size {
		t.Fatalf("put size %d", info.Size)
	}
	t.Logf("put 200 MB in %v, heap grew by at most %d MB", time.Since(begin).Round(time.Millisecond), peak>>20)
	if peak > streamLimit {
		t.Errorf("put: heap grew by %d MB, want at most %d MB", peak>>20, streamLimit>>20)
	}
	stop = heapPeak()
	begin = time.Now()
	rc, _, err := s.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got, n := sumOf(t, rc)
	rc.Close()
	peak = stop()
	t.Logf("got 200 MB in %v, heap grew by at most %d MB", time.Since(begin).Round(time.Millisecond), peak>>20)
	if n != size || got != genSum(t, 5, size) {
		t.Fatalf("got %d bytes, sha256 %x: not what was put", n, got)
	}
	if peak > streamLimit {
		t.Errorf("get: heap grew by %d MB, want at most %d MB", peak>>20, streamLimit>>20)
	}
	if err := s.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
}
