package server

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/httpjson"
)

// maxWriteBody bounds the JSON body of a write. JSON may spend up to six
// bytes on one byte of content (\u0000), so any content of MaxWriteBytes
// fits.
const maxWriteBody = 6*computerd.MaxWriteBytes + 64<<10

// testHookBeforeRename, when set, runs after a new file's content is
// written and synced, just before it replaces the old file; an error fails
// the write there.
var testHookBeforeRename func(tmp string) error

func (s *Server) handleRead(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	path, err := s.resolve("path", q.Get("path"))
	if err != nil {
		return err
	}
	offset, err := queryInt(q, "offset")
	if err != nil {
		return err
	}
	limit, err := queryInt(q, "limit")
	if err != nil {
		return err
	}
	if limit == 0 {
		limit = computerd.DefaultReadChars
	}
	if limit > computerd.MaxReadChars {
		return errorf(http.StatusUnprocessableEntity, computerd.CodeTooLarge, "limit: %d characters, at most %d", limit, computerd.MaxReadChars)
	}
	f, fi, err := openRegular(path)
	if err != nil {
		return err
	}
	defer f.Close()
	res, err := readChars(bufio.NewReaderSize(f, 64<<10), offset, limit)
	if err != nil {
		var nu *notUTF8Error
		if errors.As(err, &nu) {
			return errorf(http.StatusUnprocessableEntity, computerd.CodeNotUTF8,
				"%s is not UTF-8 text: invalid byte at byte offset %d; download it instead", path, nu.offset)
		}
		return fileError("read", path, err)
	}
	res.Path = path
	res.Size = fi.Size()
	httpjson.Write(w, http.StatusOK, res)
	s.trimSoon(len(res.Content))
	return nil
}

// queryInt parses a non-negative integer query parameter; absent is 0.
func queryInt(q url.Values, name string) (int64, error) {
	v := q.Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, badRequest("%s: %q is not a non-negative integer", name, v)
	}
	return n, nil
}

// notUTF8Error reports the byte offset of the first byte that is not part
// of valid UTF-8.
type notUTF8Error struct{ offset int64 }

func (e *notUTF8Error) Error() string {
	return fmt.Sprintf("invalid UTF-8 at byte offset %d", e.offset)
}

// readChars skips offset characters of r, then returns up to limit more.
// Every byte it reads must be valid UTF-8.
func readChars(r *bufio.Reader, offset, limit int64) (computerd.ReadResult, error) {
	res := computerd.ReadResult{Offset: offset}
	var pos, chars int64 // bytes and characters consumed
	next := func() (rune, int, error) {
		c, size, err := r.ReadRune()
		if err != nil {
			return 0, 0, err
		}
		if c == utf8.RuneError && size == 1 {
			return 0, 0, &notUTF8Error{offset: pos}
		}
		return c, size, nil
	}
	for chars < offset {
		_, size, err := next()
		if err == io.EOF {
			res.NextOffset = chars
			return res, nil
		}
		if err != nil {
			return res, err
		}
		pos += int64(size)
		chars++
	}
	var b strings.Builder
	for n := int64(0); n < limit; n++ {
		c, size, err := next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return res, err
		}
		b.WriteRune(c)
		pos += int64(size)
		chars++
	}
	if _, err := r.Peek(1); err == nil {
		res.Truncated = true
	} else if err != io.EOF {
		return res, err
	}
	res.Content = b.String()
	res.NextOffset = chars
	return res, nil
}

// openRegular opens a regular file for reading. It never blocks on a FIFO.
func openRegular(path string) (*os.File, fs.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, fileError("open", path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fileError("stat", path, err)
	}
	if fi.IsDir() {
		f.Close()
		return nil, nil, errorf(http.StatusUnprocessableEntity, computerd.CodeIsDir, "%s is a directory", path)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, badRequest("%s is not a regular file", path)
	}
	return f, fi, nil
}

func (s *Server) handleWrite(w http.ResponseWriter, r *http.Request) error {
	var req computerd.WriteRequest
	if err := decodeJSON(w, r, maxWriteBody, &req); err != nil {
		return err
	}
	path, err := s.resolve("path", req.Path)
	if err != nil {
		return err
	}
	if len(req.Content) > computerd.MaxWriteBytes {
		return errorf(http.StatusRequestEntityTooLarge, computerd.CodeTooLarge,
			"content: %d bytes, at most %d; upload larger files", len(req.Content), computerd.MaxWriteBytes)
	}
	if req.Mode > 0o777 {
		return badRequest("mode: %#o has bits beyond the permissions (0777)", req.Mode)
	}
	defer s.trimSoon(len(req.Content))
	res, err := s.writeAtomic(path, strings.NewReader(req.Content), fs.FileMode(req.Mode), req.MkdirAll)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, res)
	return nil
}

func (s *Server) handleUpload(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	path, err := s.resolve("path", q.Get("path"))
	if err != nil {
		return err
	}
	var mode uint64
	if m := q.Get("mode"); m != "" {
		mode, err = strconv.ParseUint(m, 8, 32)
		if err != nil || mode > 0o777 {
			return badRequest("mode: %q is not octal permissions (at most 0777)", m)
		}
	}
	res, err := s.writeAtomic(path, r.Body, fs.FileMode(mode), true)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, res)
	return nil
}

// writeAtomic replaces the file at path with src's bytes: it writes a
// temporary file in the same folder, syncs it, sets its mode and renames
// it over the old file, then syncs the folder. Until the rename the old
// file is untouched; on any failure the temporary file is removed. The
// answer's size and checksum are read back from the new file.
//
// A zero mode keeps the old file's permissions, or 0644 for a new file.
// A symbolic link is followed, so the file it points to is replaced.
func (s *Server) writeAtomic(path string, src io.Reader, mode fs.FileMode, mkdir bool) (computerd.WriteResult, error) {
	target, old, err := writeTarget(path)
	if err != nil {
		return computerd.WriteResult{}, err
	}
	dir := filepath.Dir(target)
	if mkdir {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return computerd.WriteResult{}, fileError("create folder", dir, err)
		}
	}
	if mode == 0 {
		mode = 0o644
		if old != nil {
			mode = old.Mode().Perm()
		}
	}

	tmp, err := os.CreateTemp(dir, tempPattern(target))
	if err != nil {
		return computerd.WriteResult{}, fileError("write", path, err)
	}
	committed := false
	defer func() {
		if !committed {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	body := &errReader{r: src}
	if _, err := io.Copy(tmp, body); err != nil {
		if body.err != nil {
			return computerd.WriteResult{}, badRequest("write %s: reading the request body: %v", path, body.err)
		}
		return computerd.WriteResult{}, fileError("write", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return computerd.WriteResult{}, fileError("sync", path, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		return computerd.WriteResult{}, fileError("chmod", path, err)
	}
	if err := tmp.Close(); err != nil {
		return computerd.WriteResult{}, fileError("write", path, err)
	}
	if testHookBeforeRename != nil {
		if err := testHookBeforeRename(tmp.Name()); err != nil {
			return computerd.WriteResult{}, err
		}
	}
	if err := os.Rename(tmp.Name(), target); err != nil {
		return computerd.WriteResult{}, fileError("replace", path, err)
	}
	committed = true
	if err := syncDir(dir); err != nil {
		s.log.Warn("sync folder after write", "dir", dir, "err", err)
	}

	f, err := os.Open(target)
	if err != nil {
		return computerd.WriteResult{}, fileError("verify", path, err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return computerd.WriteResult{}, fileError("verify", path, err)
	}
	return computerd.WriteResult{Path: path, Bytes: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// writeTarget returns the file a write to path replaces (path, or where
// its symbolic link points) and its current info (nil when it does not
// exist yet).
func writeTarget(path string) (string, fs.FileInfo, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return path, nil, nil
	}
	if err != nil {
		return "", nil, fileError("write", path, err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		real, err := filepath.EvalSymlinks(path)
		if err != nil {
			return path, nil, nil // a dangling link is replaced itself
		}
		if fi, err = os.Lstat(real); err != nil {
			return "", nil, fileError("write", path, err)
		}
		path = real
	}
	if fi.IsDir() {
		return "", nil, errorf(http.StatusUnprocessableEntity, computerd.CodeIsDir, "%s is a directory", path)
	}
	if !fi.Mode().IsRegular() {
		return "", nil, badRequest("%s is not a regular file", path)
	}
	return path, fi, nil
}

// tempPattern names the temporary file of a write to path: hidden, beside
// it, and recognisable.
func tempPattern(path string) string {
	base := filepath.Base(path)
	if len(base) > 64 {
		base = base[:64]
	}
	return "." + base + ".*.berth-tmp"
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return err
	}
	return nil
}

// errReader remembers the error of the reader it wraps, to tell a broken
// request body from a failing disk.
type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF {
		e.err = err
	}
	return n, err
}

func (s *Server) handleStat(w http.ResponseWriter, r *http.Request) error {
	path, err := s.resolve("path", r.URL.Query().Get("path"))
	if err != nil {
		return err
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return fileError("stat", path, err)
	}
	httpjson.Write(w, http.StatusOK, fileInfo(path, fi))
	return nil
}

func (s *Server) handleList(w http.ResponseWriter, r *http.Request) error {
	path, err := s.resolve("path", r.URL.Query().Get("path"))
	if err != nil {
		return err
	}
	// O_DIRECTORY refuses what is not a folder before it is opened, and
	// O_NONBLOCK keeps a named pipe from holding the call forever.
	d, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ENOTDIR) {
		return badRequest("%s is not a directory", path)
	}
	if err != nil {
		return fileError("list", path, err)
	}
	defer d.Close()
	if fi, err := d.Stat(); err != nil {
		return fileError("list", path, err)
	} else if !fi.IsDir() {
		return badRequest("%s is not a directory", path)
	}

	// Keep the first names in order, whatever the folder's size.
	keep := s.maxList
	var names []string
	total := 0
	for {
		batch, err := d.Readdirnames(1024)
		total += len(batch)
		names = append(names, batch...)
		if len(names) >= 2*keep {
			slices.Sort(names)
			names = slices.Clip(names[:keep])
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return fileError("list", path, err)
		}
	}
	slices.Sort(names)
	res := computerd.ListResult{Path: path, Entries: []computerd.FileInfo{}, Total: total, Truncated: total > keep}
	if len(names) > keep {
		names = names[:keep]
	}
	for _, name := range names {
		p := filepath.Join(path, name)
		fi, err := os.Lstat(p)
		if err != nil {
			continue // gone since the listing
		}
		res.Entries = append(res.Entries, fileInfo(p, fi))
	}
	httpjson.Write(w, http.StatusOK, res)
	return nil
}

func (s *Server) handleDownload(w http.ResponseWriter, r *http.Request) error {
	path, err := s.resolve("path", r.URL.Query().Get("path"))
	if err != nil {
		return err
	}
	f, fi, err := openRegular(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(fi.Size(), 10))
	w.WriteHeader(http.StatusOK)
	if n, err := io.CopyN(w, f, fi.Size()); err != nil {
		// The answer is cut short of its Content-Length; the client sees it.
		s.log.Warn("download cut short", "path", path, "sent", n, "size", fi.Size(), "err", err)
	}
	return nil
}

// fileInfo describes fi, found at path.
func fileInfo(path string, fi fs.FileInfo) computerd.FileInfo {
	typ := "other"
	switch m := fi.Mode(); {
	case m.IsRegular():
		typ = "file"
	case m.IsDir():
		typ = "dir"
	case m&fs.ModeSymlink != 0:
		typ = "symlink"
	}
	mode := uint32(fi.Mode().Perm())
	if fi.Mode()&fs.ModeSetuid != 0 {
		mode |= syscall.S_ISUID
	}
	if fi.Mode()&fs.ModeSetgid != 0 {
		mode |= syscall.S_ISGID
	}
	if fi.Mode()&fs.ModeSticky != 0 {
		mode |= syscall.S_ISVTX
	}
	return computerd.FileInfo{
		Name:    fi.Name(),
		Path:    path,
		Type:    typ,
		Size:    fi.Size(),
		Mode:    mode,
		ModTime: fi.ModTime().UnixMilli(),
	}
}

// fileError turns a file system error into the answer that fits it; what
// is not the caller's doing stays an internal error.
func fileError(op, path string, err error) error {
	cause := err
	var pe *fs.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe):
		cause = pe.Err
	case errors.As(err, &le):
		cause = le.Err
	}
	msg := fmt.Sprintf("%s %s: %v", op, path, cause)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return errorf(http.StatusNotFound, computerd.CodeNotFound, "%s", msg)
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		return errorf(http.StatusForbidden, computerd.CodePermission, "%s", msg)
	case errors.Is(err, syscall.EISDIR):
		return errorf(http.StatusUnprocessableEntity, computerd.CodeIsDir, "%s", msg)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return errorf(http.StatusInsufficientStorage, computerd.CodeTooLarge, "%s", msg)
	case errors.Is(err, syscall.EFBIG):
		return errorf(http.StatusRequestEntityTooLarge, computerd.CodeTooLarge, "%s", msg)
	case errors.Is(err, syscall.ENAMETOOLONG), errors.Is(err, syscall.ELOOP), errors.Is(err, syscall.EINVAL):
		return badRequest("%s", msg)
	}
	return fmt.Errorf("%s %s: %w", op, path, err)
}
