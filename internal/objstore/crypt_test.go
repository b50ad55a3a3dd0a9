package objstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/berthdev/berth/internal/secrets"
	"github.com/berthdev/berth/internal/testkit"
)

func newBox(t testing.TB) *secrets.Box {
	t.Helper()
	key := make([]byte, secrets.KeySize)
	rand.Read(key)
	b, err := secrets.NewBox(key)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newEncryptedLocal(t testing.TB) (*Encrypted, *Local) {
	t.Helper()
	l, err := NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEncrypted(l, newBox(t))
	if err != nil {
		t.Fatal(err)
	}
	return e, l
}

func TestEncryptedLocal(t *testing.T) {
	e, l := newEncryptedLocal(t)
	testStore(t, e, func(t *testing.T) {
		if left := tempFiles(t, l.Root()); len(left) > 0 {
			t.Errorf("a failed upload left temporary files: %v", left)
		}
	})
}

func TestEncryptedS3(t *testing.T) {
	s, _ := newMinIOStore(t, "sealed")
	e, err := NewEncrypted(s, newBox(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t)
	const size = 40 << 20 // three parts
	info, err := e.Put(ctx, "agents/a/home", newGen(9, size), map[string]string{"image": "berth/headless"})
	if err != nil {
		t.Fatal(err)
	}
	want := genSum(t, 9, size)
	if info.Size != size || info.Metadata[MetaSHA256] != hex.EncodeToString(want[:]) {
		t.Fatalf("put info %+v", info)
	}
	rc, ginfo, err := e.Get(ctx, "agents/a/home")
	if err != nil {
		t.Fatal(err)
	}
	got, n := sumOf(t, rc)
	rc.Close()
	if got != want || n != size || ginfo.Size != size || ginfo.Metadata["image"] != "berth/headless" {
		t.Fatalf("round trip through S3: %d bytes, info %+v", n, ginfo)
	}
	st, err := e.Stat(ctx, "agents/a/home")
	if err != nil || st.Size != size {
		t.Fatalf("stat: %+v %v", st, err)
	}
	// Ciphertext only on the service.
	raw, _ := getAll(t, ctx, s, "agents/a/home")
	start := make([]byte, 4096)
	io.ReadFull(newGen(9, size), start)
	if bytes.Contains(raw[:1<<20], start) {
		t.Fatal("plaintext stored in the bucket")
	}
	// One changed byte in the bucket is refused.
	raw[len(raw)/2] ^= 1
	if _, err := s.Put(ctx, "agents/a/home", bytes.NewReader(raw), map[string]string{MetaEncryption: formatName}); err != nil {
		t.Fatal(err)
	}
	rc, _, err = e.Get(ctx, "agents/a/home")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := io.Copy(io.Discard, rc); !errors.Is(err, ErrTampered) {
		t.Fatalf("read of a changed object: %v, want ErrTampered", err)
	}
}

func TestEncryptedRoundTripSizes(t *testing.T) {
	e, _ := newEncryptedLocal(t)
	ctx := testkit.Context(t)
	for _, n := range []int{0, 1, ChunkSize - 1, ChunkSize, ChunkSize + 1, 3*ChunkSize + 77} {
		data := make([]byte, n)
		rand.Read(data)
		info, err := e.Put(ctx, "obj", bytes.NewReader(data), nil)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		if info.Size != int64(n) || info.Metadata[MetaSHA256] != hex.EncodeToString(sum[:]) {
			t.Fatalf("%d bytes: put info %+v", n, info)
		}
		got, ginfo := getAll(t, ctx, e, "obj")
		if !bytes.Equal(got, data) || ginfo.Size != int64(n) {
			t.Fatalf("%d bytes: got %d, size %d", n, len(got), ginfo.Size)
		}
		infos, err := e.List(ctx, "")
		if err != nil || len(infos) != 1 || infos[0].Size != int64(n) {
			t.Fatalf("%d bytes: list %+v %v", n, infos, err)
		}
	}
	if _, err := e.Put(ctx, "obj", strings.NewReader("x"), map[string]string{"berth-sha256": "forged"}); !errors.Is(err, ErrInvalidMetadata) {
		t.Fatalf("reserved metadata name: %v", err)
	}
}

// tamperFixture is an encrypted object of several chunks and its raw form.
type tamperFixture struct {
	e     *Encrypted
	l     *Local
	ctx   context.Context
	key   string
	plain []byte
	raw   []byte
	meta  map[string]string
}

const tamperPlainSize = 3*ChunkSize + 1000 // chunks 0..3, then the final chunk 4

func newTamperFixture(t *testing.T) *tamperFixture {
	e, l := newEncryptedLocal(t)
	f := &tamperFixture{e: e, l: l, ctx: testkit.Context(t), key: "agents/a/home"}
	f.plain = make([]byte, tamperPlainSize)
	rand.Read(f.plain)
	if _, err := e.Put(f.ctx, f.key, bytes.NewReader(f.plain), nil); err != nil {
		t.Fatal(err)
	}
	var info Info
	f.raw, info = getAll(t, f.ctx, l, f.key)
	f.meta = info.Metadata
	if want := int(e.headerLen) + 3*dataFrameLen + frameHead + 1000 + tagSize + finalFrameLen; len(f.raw) != want {
		t.Fatalf("raw object of %d bytes, want %d", len(f.raw), want)
	}
	return f
}

// frame returns the offset of chunk i in raw (the final chunk is 4).
func (f *tamperFixture) frame(i int) int {
	if i == 4 {
		return len(f.raw) - finalFrameLen
	}
	return int(f.e.headerLen) + i*dataFrameLen
}

// chunk returns the bytes of chunk i.
func (f *tamperFixture) chunk(i int) []byte {
	end := len(f.raw)
	if i < 4 {
		end = f.frame(i + 1)
	}
	return f.raw[f.frame(i):end]
}

// refuses stores raw at key in the inner store and checks that reading it
// through the encrypted store fails with ErrTampered, after handing out
// only a prefix of the plaintext of at most limit bytes (-1: none at all,
// Get itself must fail).
func (f *tamperFixture) refuses(t *testing.T, e *Encrypted, key string, raw []byte, limit int, what string) {
	t.Helper()
	if _, err := f.l.Put(f.ctx, key, bytes.NewReader(raw), f.meta); err != nil {
		t.Fatal(err)
	}
	rc, _, err := e.Get(f.ctx, key)
	if err != nil {
		if !errors.Is(err, ErrTampered) {
			t.Errorf("%s: get: %v, want ErrTampered", what, err)
		}
		return
	}
	defer rc.Close()
	if limit < 0 {
		t.Errorf("%s: get succeeded, want ErrTampered", what)
		return
	}
	got, err := io.ReadAll(rc)
	switch {
	case err == nil:
		t.Errorf("%s: read to the end without an error", what)
	case !errors.Is(err, ErrTampered):
		t.Errorf("%s: read: %v, want ErrTampered", what, err)
	case len(got) > limit || !bytes.Equal(got, f.plain[:len(got)]):
		t.Errorf("%s: handed out %d bytes (limit %d) before failing", what, len(got), limit)
	}
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func TestEncryptedTampering(t *testing.T) {
	f := newTamperFixture(t)
	h := int(f.e.headerLen)
	// plainBefore is how much plaintext precedes the chunk holding raw
	// offset off: what may be handed out before the defect is seen.
	plainBefore := func(off int) int {
		switch {
		case off < h:
			return -1
		case off >= f.frame(4):
			return tamperPlainSize
		}
		return min((off-h)/dataFrameLen*ChunkSize, tamperPlainSize)
	}

	t.Run("FlippedByte", func(t *testing.T) {
		for off := range len(f.raw) {
			if off >= h && off < f.frame(4) && (off-h)%dataFrameLen > 24 && (off-h)%dataFrameLen < dataFrameLen-24 && off%4099 != 0 {
				continue // the middles of data chunks: sampled
			}
			raw := bytes.Clone(f.raw)
			raw[off] ^= 0x01
			lim := plainBefore(off)
			f.refuses(t, f.e, f.key, raw, lim, "flipped byte "+strconv.Itoa(off))
		}
	})
	t.Run("Truncated", func(t *testing.T) {
		cuts := []int{0, 1, 8, h - 1, h, h + 3, f.frame(1), f.frame(1) + 100, f.frame(4), f.frame(4) + 5, len(f.raw) - 1}
		for _, n := range cuts {
			f.refuses(t, f.e, f.key, f.raw[:n], plainBefore(n), "cut to "+strconv.Itoa(n)+" bytes")
		}
	})
	t.Run("Extended", func(t *testing.T) {
		f.refuses(t, f.e, f.key, cat(f.raw, []byte{0}), tamperPlainSize, "one byte appended")
		f.refuses(t, f.e, f.key, cat(f.raw, f.chunk(4)), tamperPlainSize, "final chunk repeated")
		f.refuses(t, f.e, f.key, cat(f.raw, f.chunk(0)), tamperPlainSize, "chunk appended")
	})
	t.Run("Reordered", func(t *testing.T) {
		hdr := f.raw[:h]
		f.refuses(t, f.e, f.key, cat(hdr, f.chunk(0), f.chunk(2), f.chunk(1), f.chunk(3), f.chunk(4)), ChunkSize, "chunks 1 and 2 swapped")
		f.refuses(t, f.e, f.key, cat(hdr, f.chunk(0), f.chunk(2), f.chunk(3), f.chunk(4)), ChunkSize, "chunk 1 dropped")
		f.refuses(t, f.e, f.key, cat(hdr, f.chunk(0), f.chunk(1), f.chunk(2), f.chunk(4)), 3*ChunkSize, "last data chunk dropped")
		f.refuses(t, f.e, f.key, cat(hdr, f.chunk(0), f.chunk(0), f.chunk(2), f.chunk(3), f.chunk(4)), ChunkSize, "chunk 0 twice")
		f.refuses(t, f.e, f.key, cat(hdr, f.chunk(4)), 0, "only the final chunk")
		// The final chunk's flag cleared, or a data chunk's set.
		raw := bytes.Clone(f.raw)
		raw[f.frame(4)] = flagData
		f.refuses(t, f.e, f.key, raw, tamperPlainSize, "final flag cleared")
		raw = bytes.Clone(f.raw)
		raw[f.frame(3)] = flagFinal
		f.refuses(t, f.e, f.key, raw, 3*ChunkSize, "final flag set early")
	})
	t.Run("Spliced", func(t *testing.T) {
		// Another object under the same key: another object key.
		other := bytes.Clone(f.plain)
		if _, err := f.e.Put(f.ctx, "other", bytes.NewReader(other), nil); err != nil {
			t.Fatal(err)
		}
		g := &tamperFixture{e: f.e, raw: nil}
		g.raw, _ = getAll(t, f.ctx, f.l, "other")
		f.refuses(t, f.e, f.key, cat(f.raw[:h], f.chunk(0), g.chunk(1), f.chunk(2), f.chunk(3), f.chunk(4)), ChunkSize, "chunk from another object")
		f.refuses(t, f.e, f.key, cat(g.raw[:h], f.raw[h:]), -1, "header of another object")
		f.refuses(t, f.e, f.key, cat(f.raw[:f.frame(4)], g.chunk(4)), tamperPlainSize, "final chunk of another object")
	})
	t.Run("MovedToAnotherKey", func(t *testing.T) {
		f.refuses(t, f.e, "agents/b/home", f.raw, -1, "object copied to another key")
	})
	t.Run("WrongSupervisorKey", func(t *testing.T) {
		other, err := NewEncrypted(f.l, newBox(t))
		if err != nil {
			t.Fatal(err)
		}
		f.refuses(t, other, f.key, f.raw, -1, "another supervisor key")
		_, _, err = other.Get(f.ctx, f.key)
		if err == nil || !strings.Contains(err.Error(), "supervisor's key") {
			t.Errorf("wrong key: %v, want an error that names the supervisor's key", err)
		}
	})
	t.Run("NotEncrypted", func(t *testing.T) {
		f.refuses(t, f.e, f.key, f.plain, -1, "a plain object")
		f.refuses(t, f.e, f.key, nil, -1, "an empty object")
	})
	// The untouched object still reads.
	if _, err := f.l.Put(f.ctx, f.key, bytes.NewReader(f.raw), f.meta); err != nil {
		t.Fatal(err)
	}
	if got, _ := getAll(t, f.ctx, f.e, f.key); !bytes.Equal(got, f.plain) {
		t.Fatal("the untouched object does not read back")
	}
}
