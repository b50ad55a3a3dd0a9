package server

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/httpjson"
)

// Restoring a home (computerd/archive.go describes what is refused). The
// archive is unpacked through an os.Root on the staging folder, so that no
// name, link or race reaches outside it, and every entry's parent is also
// checked to be a folder this restore made, so nothing is written through
// a symbolic link even inside it.

const (
	// decoderMaxWindow bounds the zstd window a restore accepts (the
	// archive's frames use 2 MiB; zstd -1 up to 8 MiB at most sizes).
	decoderMaxWindow = 64 << 20
	// maxTrailingBytes bounds what may follow the tar's end inside the
	// zstd stream: zero blocks, as tar pads its records.
	maxTrailingBytes = 1 << 20
	// headerAllowance is what a restore's compressed stream may hold per
	// entry beyond the file contents (headers, pax records, padding).
	headerAllowance = 8 << 10
)

// testHookBeforeSwap, when set, runs once the archive is unpacked, just
// before the swap; an error fails the restore there.
var testHookBeforeSwap func(staging string) error

// restoreLimits bound one restore.
type restoreLimits struct {
	bytes   int64 // file contents, holes not included
	entries int64
	holes   int64
}

func (s *Server) handleRestore(w http.ResponseWriter, r *http.Request) error {
	if !s.archiving.TryLock() {
		return errorf(http.StatusConflict, computerd.CodeBusy, "an archive or restore of the home is already running")
	}
	defer s.archiving.Unlock()
	start := time.Now()
	if f := r.Header.Get(computerd.ArchiveFormatHeader); f != "" && f != computerd.ArchiveFormat {
		return badArchive("format %q: this computerd restores %q", f, computerd.ArchiveFormat)
	}
	q := r.URL.Query()
	maxBytes, err := queryInt(q, "maxBytes")
	if err != nil {
		return err
	}
	maxEntries, err := queryInt(q, "maxEntries")
	if err != nil {
		return err
	}
	want := q.Get("sha256")
	if want != "" {
		if b, err := hex.DecodeString(want); err != nil || len(b) != sha256.Size {
			return badRequest("sha256: %q is not a hex SHA-256", want)
		}
	}
	home := s.cfg.Home
	var fsst unix.Statfs_t
	if err := unix.Statfs(home, &fsst); err != nil {
		return fileError("restore", home, err)
	}
	free := int64(fsst.Bavail) * fsst.Bsize
	lim := restoreLimits{bytes: free, entries: computerd.DefaultRestoreMaxEntries, holes: computerd.MaxRestoreHoleBytes}
	if maxBytes > 0 {
		lim.bytes = min(lim.bytes, maxBytes)
	}
	if maxEntries > 0 {
		lim.entries = min(lim.entries, maxEntries)
	}

	res, err := s.restore(home, r.Body, want, lim)
	if err != nil {
		s.log.Warn("restore failed; the home is unchanged", "home", home, "err", err)
		return err
	}
	res.Format = computerd.ArchiveFormat
	res.DurationMs = time.Since(start).Milliseconds()
	s.log.Info("restored the home", "bytes", res.Bytes, "entries", res.Entries, "dataBytes", res.DataBytes, "ms", res.DurationMs)
	httpjson.Write(w, http.StatusOK, res)
	return nil
}

func badArchive(format string, args ...any) *httpjson.Error {
	return errorf(http.StatusUnprocessableEntity, computerd.CodeBadArchive, format, args...)
}

func tooLarge(format string, args ...any) *httpjson.Error {
	return errorf(http.StatusRequestEntityTooLarge, computerd.CodeTooLarge, format, args...)
}

// restore unpacks the archive read from body into a staging folder in
// home and swaps it in. On any error the staging folder is removed and
// home is left as it was.
func (s *Server) restore(home string, body io.Reader, want string, lim restoreLimits) (computerd.RestoreResult, error) {
	s.removeStaging(home)
	var id [8]byte
	rand.Read(id[:])
	staging := filepath.Join(home, computerd.RestoreStagingPrefix+hex.EncodeToString(id[:]))
	if err := os.Mkdir(staging, 0o700); err != nil {
		return computerd.RestoreResult{}, fileError("restore", staging, err)
	}
	ok := false
	defer func() {
		if !ok {
			if err := removeTree(staging); err != nil {
				s.log.Warn("remove the staging folder of a failed restore", "dir", staging, "err", err)
			}
		}
	}()

	// The compressed stream may hold the file contents and a little per
	// entry; a stream of skippable frames or padding stops there too.
	// The stream is hashed only when its SHA-256 is to be checked: a
	// caller that has authenticated the archive itself (the supervisor's
	// sealed store) skips a pass over it.
	var h hash.Hash
	if want != "" {
		h = sha256.New()
	}
	in := &bodyReader{r: body, h: h, left: lim.bytes + lim.entries*headerAllowance + maxTrailingBytes + 1<<20}
	x, err := newExtractor(staging, lim)
	if err != nil {
		return computerd.RestoreResult{}, err
	}
	defer x.close()
	if err := x.extract(in); err != nil {
		if in.err != nil {
			return computerd.RestoreResult{}, badRequest("restore: reading the request body: %v", in.err)
		}
		if in.over {
			return computerd.RestoreResult{}, tooLarge("restore: the compressed stream is longer than its contents allow (%d bytes)", in.n)
		}
		return computerd.RestoreResult{}, err
	}
	if in.n == 0 {
		return computerd.RestoreResult{}, badArchive("restore: the stream is empty")
	}
	var sum string
	if in.h != nil {
		sum = hex.EncodeToString(in.h.Sum(nil))
	}
	if want != "" && !strings.EqualFold(want, sum) {
		return computerd.RestoreResult{}, badArchive("restore: the stream's SHA-256 is %s, not the %s asked for", sum, want)
	}
	if testHookBeforeSwap != nil {
		if err := testHookBeforeSwap(staging); err != nil {
			return computerd.RestoreResult{}, err
		}
	}
	if err := s.swapIn(home, staging); err != nil {
		return computerd.RestoreResult{}, err
	}
	ok = true
	return computerd.RestoreResult{Bytes: in.n, SHA256: sum, Entries: x.entries, DataBytes: x.written}, nil
}

// removeStaging removes what a crashed restore left in home.
func (s *Server) removeStaging(home string) {
	names, err := readNames(home)
	if err != nil {
		return
	}
	for _, n := range names {
		if strings.HasPrefix(n, computerd.RestoreStagingPrefix) {
			p := filepath.Join(home, n)
			if err := removeTree(p); err != nil {
				s.log.Warn("remove a restore's leftover", "path", p, "err", err)
			}
		}
	}
}

// swapIn replaces home's contents with staging's: it moves home's entries
// into a folder beside staging, then staging's into home, undoing the
// moves when one fails; then it removes the old contents.
func (s *Server) swapIn(home, staging string) error {
	old := staging + ".old"
	if err := os.Mkdir(old, 0o700); err != nil {
		return fileError("restore", old, err)
	}
	names, err := readNames(home)
	if err != nil {
		os.Remove(old)
		return fileError("restore", home, err)
	}
	var out []string // moved from home to old
	undoOut := func() {
		for _, n := range out {
			if err := os.Rename(filepath.Join(old, n), filepath.Join(home, n)); err != nil {
				s.log.Error("restore: put back a home entry", "name", n, "err", err)
			}
		}
	}
	for _, n := range names {
		if strings.HasPrefix(n, computerd.RestoreStagingPrefix) {
			continue
		}
		if err := os.Rename(filepath.Join(home, n), filepath.Join(old, n)); err != nil {
			undoOut()
			os.Remove(old)
			return fileError("restore: move aside", filepath.Join(home, n), err)
		}
		out = append(out, n)
	}
	news, err := readNames(staging)
	if err != nil {
		undoOut()
		os.Remove(old)
		return fileError("restore", staging, err)
	}
	var in []string // moved from staging to home
	for _, n := range news {
		if err := os.Rename(filepath.Join(staging, n), filepath.Join(home, n)); err != nil {
			for _, m := range in {
				os.Rename(filepath.Join(home, m), filepath.Join(staging, m))
			}
			undoOut()
			os.Remove(old)
			return fileError("restore: move in", filepath.Join(home, n), err)
		}
		in = append(in, n)
	}
	if err := removeTree(old); err != nil {
		s.log.Warn("restore: remove the home's old contents", "dir", old, "err", err)
	}
	if err := os.Remove(staging); err != nil {
		s.log.Warn("restore: remove the staging folder", "dir", staging, "err", err)
	}
	return nil
}

// readNames lists a folder's names.
func readNames(dir string) ([]string, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Readdirnames(-1)
}

// removeTree removes a folder tree, first making read-only folders in it
// writable so that a user who is not root can empty them.
func removeTree(dir string) error {
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}

// bodyReader counts (and with a hash, hashes) a restore's body, stops past a limit, and
// remembers a read error, to tell a broken body from a corrupt archive.
type bodyReader struct {
	r    io.Reader
	h    hash.Hash
	n    int64
	left int64
	over bool
	err  error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		b.over = true
		return 0, errors.New("over the limit")
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	if b.h != nil {
		b.h.Write(p[:n])
	}
	b.n += int64(n)
	b.left -= int64(n)
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}

// extractor unpacks one archive into a staging folder.
type extractor struct {
	dir     string   // the staging folder
	root    *os.Root // opened on dir
	lim     restoreLimits
	asRoot  bool // restore owners
	buf     []byte
	entries int64
	written int64
	holes   int64
	dirs    []dirMeta      // to set once their contents are in, deepest last
	implied map[string]int // folders made for an entry beneath them, index in dirs
	checked string         // the last parent found to be a folder of ours
}

type dirMeta struct {
	name     string
	mode     fs.FileMode
	uid, gid int
	mtime    time.Time
}

func newExtractor(dir string, lim restoreLimits) (*extractor, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fileError("restore", dir, err)
	}
	return &extractor{
		dir:     dir,
		root:    root,
		lim:     lim,
		asRoot:  os.Geteuid() == 0,
		buf:     make([]byte, copyBufferBytes),
		implied: make(map[string]int),
	}, nil
}

func (x *extractor) close() { x.root.Close() }

// extract reads the stream and unpacks every entry, then checks that the
// stream ends where the tar does, and sets the folders' metadata.
func (x *extractor) extract(in io.Reader) error {
	dec, err := zstd.NewReader(in, zstd.WithDecoderConcurrency(2), zstd.WithDecoderMaxWindow(decoderMaxWindow),
		zstd.WithDecoderMaxMemory(decoderMaxWindow))
	if err != nil {
		return err
	}
	defer dec.Close()
	tr := tar.NewReader(endRequired{dec})
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return badArchive("restore: the archive is corrupt or cut short after %d entries: %v", x.entries, err)
		}
		if x.entries++; x.entries > x.lim.entries {
			return tooLarge("restore: the archive holds more than %d entries", x.lim.entries)
		}
		if err := x.entry(hdr, tr); err != nil {
			return err
		}
	}
	// Only zeros may follow the tar's end, and the zstd stream must end
	// whole (its checksum is checked at its end).
	n, err := io.CopyBuffer(zeroChecker{}, io.LimitReader(dec, maxTrailingBytes+1), x.buf)
	switch {
	case errors.Is(err, errNotZero), n > maxTrailingBytes:
		return badArchive("restore: data follows the end of the archive")
	case err != nil:
		return badArchive("restore: the archive is corrupt or cut short at its end: %v", err)
	}
	for i := len(x.dirs) - 1; i >= 0; i-- {
		if err := x.setMeta(x.dirs[i]); err != nil {
			return err
		}
	}
	return nil
}

// endRequired makes the end of the stream unexpected to the tar reader,
// which otherwise takes a stream that stops between two entries for a
// whole archive. The archive is a series of zstd frames, so a stream cut
// between frames decompresses without error: only the tar's own end (two
// zero blocks) marks it whole.
type endRequired struct{ r io.Reader }

func (e endRequired) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

var errNotZero = errors.New("not zero")

// zeroChecker accepts only zero bytes.
type zeroChecker struct{}

func (zeroChecker) Write(p []byte) (int, error) {
	for i, c := range p {
		if c != 0 {
			return i, errNotZero
		}
	}
	return len(p), nil
}

// entry unpacks one entry.
func (x *extractor) entry(hdr *tar.Header, r io.Reader) error {
	name, err := archiveName(hdr.Name)
	if err != nil {
		return badArchive("restore: entry %q: %v", truncate(hdr.Name), err)
	}
	if name == "" {
		if hdr.Typeflag == tar.TypeDir {
			return nil // the home itself keeps its own metadata
		}
		return badArchive("restore: entry %q: the home itself can only be a folder", hdr.Name)
	}
	if top, _, _ := strings.Cut(name, "/"); strings.HasPrefix(top, computerd.RestoreStagingPrefix) {
		return badArchive("restore: entry %q: names starting with %s are reserved", truncate(name), computerd.RestoreStagingPrefix)
	}
	if err := x.parent(path.Dir(name), true); err != nil {
		return badArchive("restore: entry %q: %v", truncate(name), err)
	}
	// Setuid and setgid bits are dropped; the sticky bit is kept.
	meta := dirMeta{name: name, mode: fs.FileMode(hdr.Mode) & fs.ModePerm, uid: hdr.Uid, gid: hdr.Gid, mtime: hdr.ModTime}
	if hdr.Mode&0o1000 != 0 {
		meta.mode |= fs.ModeSticky
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		return x.folder(meta)
	case tar.TypeReg:
		return x.file(name, hdr, meta, r)
	case tar.TypeSymlink:
		return x.symlink(name, hdr, meta)
	case tar.TypeLink:
		return x.link(name, hdr)
	default:
		return badArchive("restore: entry %q is %s, which a restore does not make", truncate(name), typeName(hdr.Typeflag))
	}
}

// parent makes sure that dir (a clean relative name, "." for the top) is
// a folder of the staging tree and no link: each element was made by this
// restore as a folder. With create, missing folders are made.
func (x *extractor) parent(dir string, create bool) error {
	if dir == "." || dir == x.checked || strings.HasPrefix(x.checked, dir+"/") {
		return nil
	}
	elems := strings.Split(dir, "/")
	for i := range elems {
		p := strings.Join(elems[:i+1], "/")
		fi, err := x.root.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist) && create:
			if err := x.root.Mkdir(p, 0o700); err != nil {
				return fmt.Errorf("make folder %s: %w", p, err)
			}
			x.implied[p] = len(x.dirs)
			x.dirs = append(x.dirs, dirMeta{name: p, mode: 0o755, uid: -1, gid: -1, mtime: time.Now()})
		case err != nil:
			return fmt.Errorf("%s: %w", p, err)
		case fi.Mode()&fs.ModeSymlink != 0:
			return fmt.Errorf("beneath the symbolic link %s", p)
		case !fi.IsDir():
			return fmt.Errorf("beneath %s, which is not a folder", p)
		}
	}
	x.checked = dir
	return nil
}

func (x *extractor) folder(meta dirMeta) error {
	if i, ok := x.implied[meta.name]; ok {
		delete(x.implied, meta.name)
		x.dirs[i] = meta
		return nil
	}
	if err := x.root.Mkdir(meta.name, 0o700); err != nil {
		return x.exists(meta.name, err)
	}
	x.dirs = append(x.dirs, meta)
	return nil
}

// exists explains a failure to make an entry.
func (x *extractor) exists(name string, err error) error {
	if errors.Is(err, fs.ErrExist) {
		return badArchive("restore: entry %q comes twice", truncate(name))
	}
	return fileError("restore", filepath.Join(x.dir, name), err)
}

func (x *extractor) file(name string, hdr *tar.Header, meta dirMeta, r io.Reader) error {
	sparse := false
	for k := range hdr.PAXRecords {
		sparse = sparse || strings.HasPrefix(k, "GNU.sparse.")
	}
	if !sparse && hdr.Size > x.lim.bytes-x.written {
		return tooLarge("restore: the archive's files hold more than %d bytes (at %q)", x.lim.bytes, truncate(name))
	}
	f, err := x.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return x.exists(name, err)
	}
	defer f.Close()
	if sparse {
		err = x.copySparse(f, r, hdr.Size, name)
	} else {
		var n int64
		n, err = io.CopyBuffer(onlyWriter{f}, r, x.buf)
		x.written += n
		if err == nil && n != hdr.Size {
			err = io.ErrUnexpectedEOF
		}
		err = x.copyError(name, err)
	}
	if err != nil {
		return err
	}
	if x.asRoot {
		if err := f.Chown(meta.uid, meta.gid); err != nil {
			return fileError("restore", f.Name(), err)
		}
	}
	if err := f.Chmod(meta.mode); err != nil {
		return fileError("restore", f.Name(), err)
	}
	if err := f.Close(); err != nil {
		return fileError("restore", f.Name(), err)
	}
	return x.setTimes(name, meta.mtime)
}

// onlyWriter hides a file's ReadFrom, so that io.CopyBuffer uses the
// buffer and the tar reader's errors stay the reader's.
type onlyWriter struct{ w io.Writer }

func (o onlyWriter) Write(p []byte) (int, error) { return o.w.Write(p) }

// copyError explains an error copying an entry's contents: the archive's
// when reading failed, the disk's when writing did.
func (x *extractor) copyError(name string, err error) error {
	var pe *fs.PathError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pe):
		return fileError("restore", filepath.Join(x.dir, name), err)
	default:
		return badArchive("restore: entry %q: the archive is corrupt or cut short: %v", truncate(name), err)
	}
}

// copySparse writes a sparse file of size bytes: runs of zeros are left as
// holes, and count against the restore's hole limit.
func (x *extractor) copySparse(f *os.File, r io.Reader, size int64, name string) error {
	if err := f.Truncate(size); err != nil {
		return fileError("restore", f.Name(), err)
	}
	const chunk = 64 << 10
	var off int64
	for {
		n, err := io.ReadFull(r, x.buf)
		if n > 0 {
			b := x.buf[:n]
			for len(b) > 0 {
				c := b[:min(chunk, len(b))]
				if isZero(c) {
					if x.holes += int64(len(c)); x.holes > x.lim.holes {
						return tooLarge("restore: the sparse files' holes pass %d bytes (at %q)", x.lim.holes, truncate(name))
					}
				} else {
					if int64(len(c)) > x.lim.bytes-x.written {
						return tooLarge("restore: the archive's files hold more than %d bytes (at %q)", x.lim.bytes, truncate(name))
					}
					if _, err := f.WriteAt(c, off); err != nil {
						return fileError("restore", f.Name(), err)
					}
					x.written += int64(len(c))
				}
				off += int64(len(c))
				b = b[len(c):]
			}
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return x.copyError(name, err)
		}
	}
	if off != size {
		return x.copyError(name, io.ErrUnexpectedEOF)
	}
	return nil
}

func isZero(b []byte) bool {
	var zero [4096]byte
	for len(b) > 0 {
		n := min(len(b), len(zero))
		if !bytes.Equal(b[:n], zero[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

func (x *extractor) symlink(name string, hdr *tar.Header, meta dirMeta) error {
	t := hdr.Linkname
	switch {
	case t == "":
		return badArchive("restore: symbolic link %q has no target", truncate(name))
	case len(t) > computerd.MaxArchiveNameBytes:
		return badArchive("restore: symbolic link %q: its target is longer than %d bytes", truncate(name), computerd.MaxArchiveNameBytes)
	case strings.IndexByte(t, 0) >= 0:
		return badArchive("restore: symbolic link %q: its target holds a NUL byte", truncate(name))
	}
	if err := x.root.Symlink(t, name); err != nil {
		return x.exists(name, err)
	}
	if x.asRoot {
		if err := x.root.Lchown(name, meta.uid, meta.gid); err != nil {
			return fileError("restore", filepath.Join(x.dir, name), err)
		}
	}
	return x.setTimes(name, meta.mtime)
}

// link makes a hard link to a regular file unpacked before it.
func (x *extractor) link(name string, hdr *tar.Header) error {
	target, err := archiveName(hdr.Linkname)
	if err == nil && target == "" {
		err = errors.New("the home itself")
	}
	if err == nil {
		err = x.parent(path.Dir(target), false)
	}
	if err != nil {
		return badArchive("restore: hard link %q to %q: %v", truncate(name), truncate(hdr.Linkname), err)
	}
	fi, err := x.root.Lstat(target)
	if err != nil || !fi.Mode().IsRegular() {
		return badArchive("restore: hard link %q to %q: not a file that came before it in the archive", truncate(name), truncate(target))
	}
	if err := x.root.Link(target, name); err != nil {
		return x.exists(name, err)
	}
	return nil
}

// setMeta sets a folder's owner, mode and time.
func (x *extractor) setMeta(m dirMeta) error {
	if x.asRoot && m.uid >= 0 {
		if err := x.root.Lchown(m.name, m.uid, m.gid); err != nil {
			return fileError("restore", filepath.Join(x.dir, m.name), err)
		}
	}
	if err := x.root.Chmod(m.name, m.mode); err != nil {
		return fileError("restore", filepath.Join(x.dir, m.name), err)
	}
	return x.setTimes(m.name, m.mtime)
}

// setTimes sets an entry's modification time (and its access time to the
// same), not following a symbolic link. The entry's parents were checked
// to be folders of the staging tree.
func (x *extractor) setTimes(name string, mtime time.Time) error {
	ts := []unix.Timespec{unix.NsecToTimespec(mtime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
	p := filepath.Join(x.dir, name)
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fileError("restore", p, &fs.PathError{Op: "utimes", Path: p, Err: err})
	}
	return nil
}

// archiveName checks an entry's name and returns it clean and relative,
// "" for the home itself. It accepts what tar writes ("a/b", "./a/b",
// "a/" for a folder) and refuses the rest: absolute names, ".." elements,
// empty or "." elements inside the name, NUL bytes, and names or elements
// over the limits.
func archiveName(name string) (string, error) {
	switch {
	case name == "":
		return "", errors.New("an empty name")
	case len(name) > computerd.MaxArchiveNameBytes:
		return "", fmt.Errorf("a name longer than %d bytes", computerd.MaxArchiveNameBytes)
	case strings.IndexByte(name, 0) >= 0:
		return "", errors.New("a name with a NUL byte")
	case name[0] == '/':
		return "", errors.New("an absolute name")
	}
	n := strings.TrimRight(name, "/")
	for strings.HasPrefix(n, "./") {
		n = strings.TrimLeft(n[2:], "/")
	}
	if n == "." || n == "" {
		return "", nil
	}
	for e := range strings.SplitSeq(n, "/") {
		switch {
		case e == "..":
			return "", errors.New("a name with a \"..\" element, which climbs out")
		case e == "" || e == ".":
			return "", errors.New("a name that is not clean (an empty or . element)")
		case len(e) > computerd.MaxArchiveNameElement:
			return "", fmt.Errorf("a name element longer than %d bytes", computerd.MaxArchiveNameElement)
		}
	}
	return n, nil
}

// truncate shortens a name for an error message.
func truncate(s string) string {
	const most = 200
	if len(s) > most {
		return s[:most] + "..."
	}
	return s
}

// typeName names a tar entry type for an error message.
func typeName(t byte) string {
	switch t {
	case tar.TypeChar:
		return "a character device"
	case tar.TypeBlock:
		return "a block device"
	case tar.TypeFifo:
		return "a fifo"
	case tar.TypeCont:
		return "a contiguous file"
	case tar.TypeXGlobalHeader:
		return "a global pax header"
	case tar.TypeGNUSparse:
		return "an old GNU sparse file"
	}
	return "of type " + strconv.Quote(string(t))
}
