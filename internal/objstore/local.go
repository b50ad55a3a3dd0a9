package objstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Local is a Store in a folder of this machine. Each object is one file
// that holds a small header (its metadata) followed by the object's bytes;
// it is written to a hidden temporary file in the same folder, synced, and
// renamed over the old one, so that a crash leaves either the old object or
// the new one, with its metadata, never a mix. A key's segments map to
// folders ending in ".d" and the object to a file ending in ".obj", so that
// "a" and "a/b" can both exist, as in S3.
type Local struct {
	root string
}

const (
	objSuffix  = ".obj"
	dirSuffix  = ".d"
	tmpPrefix  = ".put-"
	fileMagic  = "BERTHOB1"
	maxHeader  = 16 << 10
	staleAfter = 24 * time.Hour
)

// NewLocal returns a Local store rooted at dir, creating it (mode 0700)
// when missing. Temporary files older than a day, left by a process that
// died while writing, are removed.
func NewLocal(dir string) (*Local, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: the local object store needs a folder", ErrSettings)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("objstore: local folder %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("objstore: local folder: %w", err)
	}
	l := &Local{root: abs}
	l.sweep(time.Now().Add(-staleAfter))
	return l, nil
}

// Root returns the store's folder.
func (l *Local) Root() string { return l.root }

func (l *Local) String() string { return "local folder " + l.root }

// path returns the file of key (already validated).
func (l *Local) path(key string) string {
	segs := strings.Split(key, "/")
	for i := range segs[:len(segs)-1] {
		segs[i] += dirSuffix
	}
	segs[len(segs)-1] += objSuffix
	return filepath.Join(append([]string{l.root}, segs...)...)
}

type fileHeader struct {
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Put implements Store.
func (l *Local) Put(ctx context.Context, key string, r io.Reader, meta map[string]string) (Info, error) {
	if err := ValidateKey(key); err != nil {
		return Info{}, err
	}
	if err := ValidateMetadata(meta); err != nil {
		return Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return Info{}, fmt.Errorf("objstore: put %s: %w", key, err)
	}
	dst := l.path(key)
	dir := filepath.Dir(dst)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Info{}, fmt.Errorf("objstore: put %s: %w", key, err)
	}
	f, err := os.CreateTemp(dir, tmpPrefix+"*")
	if err != nil {
		return Info{}, fmt.Errorf("objstore: put %s: %w", key, err)
	}
	committed := false
	defer func() {
		if !committed {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	hdr, err := encodeHeader(fileHeader{Metadata: meta})
	if err != nil {
		return Info{}, fmt.Errorf("objstore: put %s: %w", key, err)
	}
	if _, err := f.Write(hdr); err != nil {
		return Info{}, fmt.Errorf("objstore: put %s: %w", key, err)
	}
	n, err := io.CopyBuffer(&writeBehind{f: f, off: int64(len(hdr))}, ctxReader{ctx, r}, make([]byte, copyBytes))
	if err != nil {
		return Info{}, fmt.Errorf("objstore: put %s: after %d bytes: %w", key, n, err)
	}
	if err := f.Sync(); err != nil {
		return Info{}, fmt.Errorf("objstore: put %s: sync: %w", key, err)
	}
	st, err := f.Stat()
	if err != nil {
		return Info{}, fmt.Errorf("objstore: put %s: %w", key, err)
	}
	if err := f.Close(); err != nil {
		return Info{}, fmt.Errorf("objstore: put %s: %w", key, err)
	}
	if err := ctx.Err(); err != nil {
		return Info{}, fmt.Errorf("objstore: put %s: %w", key, err)
	}
	if err := os.Rename(f.Name(), dst); err != nil {
		return Info{}, fmt.Errorf("objstore: put %s: %w", key, err)
	}
	committed = true
	if err := syncDir(dir); err != nil {
		return Info{}, fmt.Errorf("objstore: put %s: sync folder: %w", key, err)
	}
	return Info{Key: key, Size: n, Modified: st.ModTime(), Metadata: cloneMeta(meta)}, nil
}

func encodeHeader(h fileHeader) ([]byte, error) {
	js, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	if len(js) > maxHeader {
		return nil, fmt.Errorf("%w: header of %d bytes", ErrInvalidMetadata, len(js))
	}
	out := make([]byte, 0, len(fileMagic)+4+len(js))
	out = append(out, fileMagic...)
	out = binary.BigEndian.AppendUint32(out, uint32(len(js)))
	return append(out, js...), nil
}

// readHeader reads the header at the start of f and returns it with its
// length in bytes.
func readHeader(f io.Reader) (fileHeader, int64, error) {
	var pre [len(fileMagic) + 4]byte
	if _, err := io.ReadFull(f, pre[:]); err != nil {
		return fileHeader{}, 0, fmt.Errorf("header: %w", err)
	}
	if !bytes.Equal(pre[:len(fileMagic)], []byte(fileMagic)) {
		return fileHeader{}, 0, errors.New("not an object file (bad magic)")
	}
	n := binary.BigEndian.Uint32(pre[len(fileMagic):])
	if n > maxHeader {
		return fileHeader{}, 0, fmt.Errorf("header of %d bytes is too large", n)
	}
	js := make([]byte, n)
	if _, err := io.ReadFull(f, js); err != nil {
		return fileHeader{}, 0, fmt.Errorf("header: %w", err)
	}
	var h fileHeader
	if err := json.Unmarshal(js, &h); err != nil {
		return fileHeader{}, 0, fmt.Errorf("header: %w", err)
	}
	return h, int64(len(pre)) + int64(n), nil
}

// open opens key's file positioned after its header.
func (l *Local) open(key string) (*os.File, Info, error) {
	f, err := os.Open(l.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, Info{}, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	if err != nil {
		return nil, Info{}, fmt.Errorf("objstore: %s: %w", key, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, Info{}, fmt.Errorf("objstore: %s: %w", key, err)
	}
	h, hlen, err := readHeader(f)
	if err != nil {
		f.Close()
		return nil, Info{}, fmt.Errorf("objstore: %s: %w", key, err)
	}
	return f, Info{Key: key, Size: st.Size() - hlen, Modified: st.ModTime(), Metadata: h.Metadata}, nil
}

// Get implements Store.
func (l *Local) Get(ctx context.Context, key string) (io.ReadCloser, Info, error) {
	if err := ValidateKey(key); err != nil {
		return nil, Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return nil, Info{}, fmt.Errorf("objstore: get %s: %w", key, err)
	}
	f, info, err := l.open(key)
	if err != nil {
		return nil, Info{}, err
	}
	return ctxReadCloser{ctxReader{ctx, f}, f}, info, nil
}

// Stat implements Store.
func (l *Local) Stat(ctx context.Context, key string) (Info, error) {
	if err := ValidateKey(key); err != nil {
		return Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return Info{}, fmt.Errorf("objstore: stat %s: %w", key, err)
	}
	f, info, err := l.open(key)
	if err != nil {
		return Info{}, err
	}
	f.Close()
	return info, nil
}

// Delete implements Store.
func (l *Local) Delete(ctx context.Context, key string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("objstore: delete %s: %w", key, err)
	}
	p := l.path(key)
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("objstore: delete %s: %w", key, err)
	}
	return syncDir(filepath.Dir(p))
}

// List implements Store.
func (l *Local) List(ctx context.Context, prefix string) ([]Info, error) {
	if err := ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	// Walk from the deepest folder the prefix names in full.
	start, keyBase := l.root, ""
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		for seg := range strings.SplitSeq(prefix[:i], "/") {
			start = filepath.Join(start, seg+dirSuffix)
		}
		keyBase = prefix[:i+1]
	}
	var out []Info
	err := filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == start && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p == start {
			return nil
		}
		rel, err := filepath.Rel(start, p)
		if err != nil {
			return err
		}
		key, ok := keyOf(keyBase, rel, d.IsDir())
		if !ok {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			// Descend only where keys can still start with prefix.
			if !strings.HasPrefix(key+"/", prefix) && !strings.HasPrefix(prefix, key+"/") {
				return fs.SkipDir
			}
			return nil
		}
		if !strings.HasPrefix(key, prefix) {
			return nil
		}
		if len(out) >= MaxList {
			return ErrTooMany
		}
		info, err := l.statFile(key, p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // deleted meanwhile
		}
		if err != nil {
			return err
		}
		out = append(out, info)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("objstore: list %q: %w", prefix, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// keyOf turns a path relative to the walk's start into a key (for a
// folder, the key prefix it holds), or false for a file that is not an
// object (a temporary file, say).
func keyOf(base, rel string, dir bool) (string, bool) {
	segs := strings.Split(filepath.ToSlash(rel), "/")
	for i, s := range segs {
		suffix := dirSuffix
		if i == len(segs)-1 && !dir {
			suffix = objSuffix
		}
		name, ok := strings.CutSuffix(s, suffix)
		if !ok || name == "" || name[0] == '.' {
			return "", false
		}
		segs[i] = name
	}
	key := base + strings.Join(segs, "/")
	if !dir && ValidateKey(key) != nil {
		return "", false
	}
	return key, true
}

func (l *Local) statFile(key, p string) (Info, error) {
	f, err := os.Open(p)
	if err != nil {
		return Info{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Info{}, err
	}
	_, hlen, err := readHeader(f)
	if err != nil {
		return Info{}, fmt.Errorf("%s: %w", key, err)
	}
	return Info{Key: key, Size: st.Size() - hlen, Modified: st.ModTime()}, nil
}

// sweep removes temporary files last written before cutoff.
func (l *Local) sweep(cutoff time.Time) {
	filepath.WalkDir(l.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasPrefix(d.Name(), tmpPrefix) {
			return nil
		}
		if fi, err := d.Info(); err == nil && fi.ModTime().Before(cutoff) {
			os.Remove(p)
		}
		return nil
	})
}

const (
	// copyBytes is the buffer an object's bytes are written through.
	copyBytes = 1 << 20
	// writebackBytes is how much is written between two requests to the
	// kernel to start writing to disk.
	writebackBytes = 8 << 20
)

// writeBehind writes to f and has the kernel start writing each
// writebackBytes to disk as they come, so that the disk works while the
// object streams in rather than all at the final Sync.
type writeBehind struct {
	f       *os.File
	off     int64 // where the next write lands
	flushed int64 // the end of what the kernel was asked to write
}

func (w *writeBehind) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.off += int64(n)
	if w.off-w.flushed >= writebackBytes {
		startWriteback(w.f, w.flushed, w.off-w.flushed)
		w.flushed = w.off
	}
	return n, err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// ctxReader fails its reads once ctx has ended.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

type ctxReadCloser struct {
	ctxReader
	io.Closer
}

var _ Store = (*Local)(nil)
