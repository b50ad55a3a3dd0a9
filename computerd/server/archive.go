package server

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/httpjson"
)

// The home archive (computerd/archive.go describes the format). The walk
// reads one file at a time through a fixed buffer, and the zstd encoder
// keeps a window of a few MiB per block in flight, so memory stays flat
// whatever the home's size; nothing is written to disk.

const (
	// copyBufferBytes is the buffer file contents pass through.
	copyBufferBytes = 1 << 20
	// sparseMinHole is the smallest hole kept as a hole: data separated by
	// less is stored with the zeros between, to keep sparse maps short.
	sparseMinHole = 64 << 10
	// sparseMaxSegments bounds a sparse file's map; the rest of a file
	// with more data segments is stored as one.
	sparseMaxSegments = 1 << 16
)

// handleArchive streams the home as an archive.
func (s *Server) handleArchive(w http.ResponseWriter, r *http.Request) error {
	if !s.archiving.TryLock() {
		return errorf(http.StatusConflict, computerd.CodeBusy, "an archive or restore of the home is already running")
	}
	defer s.archiving.Unlock()
	start := time.Now()
	home := s.cfg.Home
	if fi, err := os.Stat(home); err != nil {
		return fileError("archive", home, err)
	} else if !fi.IsDir() {
		return badRequest("the home %s is not a folder", home)
	}

	id := rand.Text()
	h := w.Header()
	h.Set("Content-Type", computerd.ArchiveContentType)
	h.Set(computerd.ArchiveFormatHeader, computerd.ArchiveFormat)
	h.Set(computerd.ArchiveIDHeader, id)
	h.Set("Trailer", computerd.ArchiveInfoTrailer+", "+computerd.ArchiveErrorTrailer)
	w.WriteHeader(http.StatusOK)

	workers := runtime.GOMAXPROCS(0)
	if r.URL.Query().Get("background") == "1" {
		workers-- // one core stays with the computer's commands
	}
	hw := &hashWriter{w: w, h: sha256.New()}
	info, err := writeArchive(r.Context(), hw, home, max(workers, 1))
	if err != nil {
		var ae *httpjson.Error
		if !errors.As(err, &ae) {
			ae = errorf(http.StatusInternalServerError, computerd.CodeInternal, "%v", err)
		}
		s.log.Warn("archive failed", "home", home, "sent", hw.n, "err", err)
		b, _ := json.Marshal(ae)
		h.Set(computerd.ArchiveErrorTrailer, string(b))
		s.outcomes.add(id, computerd.ArchiveOutcome{Error: &computerd.Error{Code: ae.Code, Message: ae.Message}})
		return nil
	}
	info.Format = computerd.ArchiveFormat
	info.Bytes, info.SHA256 = hw.n, hex.EncodeToString(hw.h.Sum(nil))
	info.DurationMs = time.Since(start).Milliseconds()
	b, _ := json.Marshal(info)
	h.Set(computerd.ArchiveInfoTrailer, string(b))
	s.outcomes.add(id, computerd.ArchiveOutcome{Info: &info})
	s.log.Info("archived the home", "bytes", info.Bytes, "entries", info.Entries, "dataBytes", info.DataBytes,
		"skipped", info.Skipped, "changed", info.Changed, "ms", info.DurationMs)
	return nil
}

// keptOutcomes is how many archive outcomes computerd keeps.
const keptOutcomes = 8

// outcomes keeps how the last archives ended, for clients whose proxy
// dropped the trailers.
type outcomes struct {
	mu   sync.Mutex
	ids  []string
	byID map[string]computerd.ArchiveOutcome
}

func (o *outcomes) add(id string, out computerd.ArchiveOutcome) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.byID == nil {
		o.byID = make(map[string]computerd.ArchiveOutcome)
	}
	o.ids = append(o.ids, id)
	o.byID[id] = out
	if len(o.ids) > keptOutcomes {
		delete(o.byID, o.ids[0])
		o.ids = o.ids[1:]
	}
}

func (o *outcomes) get(id string) (computerd.ArchiveOutcome, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	out, ok := o.byID[id]
	return out, ok
}

// handleArchiveOutcome answers how one of the last archives ended.
func (s *Server) handleArchiveOutcome(w http.ResponseWriter, r *http.Request) error {
	id := r.URL.Query().Get("id")
	out, ok := s.outcomes.get(id)
	if !ok {
		return errorf(http.StatusNotFound, computerd.CodeNotFound, "no ended archive %q among the last %d", id, keptOutcomes)
	}
	httpjson.Write(w, http.StatusOK, out)
	return nil
}

// hashWriter counts and hashes what passes through it.
type hashWriter struct {
	w io.Writer
	h hash.Hash
	n int64
}

func (hw *hashWriter) Write(p []byte) (int, error) {
	n, err := hw.w.Write(p)
	hw.h.Write(p[:n])
	hw.n += int64(n)
	return n, err
}

// writeArchive writes the archive of home's contents to out. The stream
// is complete only when it returns no error; otherwise it stops where
// the error was, without the tar's end, which a restore requires.
func writeArchive(ctx context.Context, out io.Writer, home string, workers int) (computerd.ArchiveInfo, error) {
	enc, err := newZstdFrames(out, workers)
	if err != nil {
		return computerd.ArchiveInfo{}, err
	}
	a := &archiver{
		ctx:   ctx,
		home:  home,
		enc:   enc,
		tw:    tar.NewWriter(enc),
		links: make(map[fileKey]string),
		buf:   make([]byte, copyBufferBytes),
	}
	err = a.walk()
	if err == nil {
		err = a.tw.Close()
	}
	if err == nil {
		err = enc.Close()
	} else {
		enc.Abort()
	}
	return a.info, err
}

// fileKey identifies a file with several names (hard links).
type fileKey struct{ dev, ino uint64 }

// archiver walks the home into a tar writer.
type archiver struct {
	ctx   context.Context
	home  string
	dev   uint64 // the home's filesystem
	enc   *zstdFrames
	tw    *tar.Writer
	links map[fileKey]string // first name of each file with several
	buf   []byte
	info  computerd.ArchiveInfo
}

func (a *archiver) walk() error {
	var st unix.Stat_t
	if err := unix.Lstat(a.home, &st); err != nil {
		return fileError("archive", a.home, err)
	}
	a.dev = st.Dev
	return filepath.WalkDir(a.home, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && path != a.home {
				a.info.Changed++ // removed since its folder was listed
				return nil
			}
			return fileError("archive", path, err)
		}
		if err := a.ctx.Err(); err != nil {
			return err
		}
		if path == a.home {
			return nil // the contents, not the folder itself
		}
		rel, err := filepath.Rel(a.home, path)
		if err != nil {
			return err
		}
		if d.IsDir() && !strings.ContainsRune(rel, filepath.Separator) && strings.HasPrefix(rel, computerd.RestoreStagingPrefix) {
			return filepath.SkipDir
		}
		return a.entry(path, filepath.ToSlash(rel), d)
	})
}

// entry writes the entry of the file at path, named rel in the archive.
func (a *archiver) entry(path, rel string, d fs.DirEntry) error {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			a.info.Changed++
			return nil
		}
		return fileError("archive", path, err)
	}
	if st.Dev != a.dev {
		// Another filesystem mounted inside the home.
		a.info.Skipped++
		if d.IsDir() {
			return filepath.SkipDir
		}
		return nil
	}
	hdr := &tar.Header{
		Name:    rel,
		Mode:    int64(st.Mode & 0o7777),
		Uid:     int(st.Uid),
		Gid:     int(st.Gid),
		ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec),
		Format:  tar.FormatPAX,
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		hdr.Typeflag, hdr.Name = tar.TypeDir, rel+"/"
		return a.header(hdr)
	case unix.S_IFLNK:
		target, err := os.Readlink(path)
		if err != nil {
			return fileError("archive", path, err)
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		return a.header(hdr)
	case unix.S_IFREG:
		if st.Nlink > 1 {
			k := fileKey{dev: st.Dev, ino: st.Ino}
			if first, ok := a.links[k]; ok {
				hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
				return a.header(hdr)
			}
			a.links[k] = rel
		}
		return a.file(path, hdr)
	default:
		a.info.Skipped++ // fifo, socket or device
		return nil
	}
}

func (a *archiver) header(hdr *tar.Header) error {
	if err := a.tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("archive %s: %w", hdr.Name, err)
	}
	a.info.Entries++
	return nil
}

// file writes a regular file's entry and contents, as read from one open
// file: its size is the size it has once open.
func (a *archiver) file(path string, hdr *tar.Header) error {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ELOOP) {
			a.info.Changed++ // removed or replaced since it was listed
			return nil
		}
		return fileError("archive", path, err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fileError("archive", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		a.info.Changed++
		return nil
	}
	hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size
	if st.Size > 0 && st.Blocks*512 < st.Size {
		if segs := dataSegments(int(f.Fd()), st.Size); segs != nil {
			return a.sparseFile(f, hdr, segs)
		}
	}
	if err := a.header(hdr); err != nil {
		return err
	}
	return a.copyRange(f, 0, st.Size)
}

// copyRange copies n bytes of f from off into the current entry, padding
// with zeros what the file no longer holds.
func (a *archiver) copyRange(f *os.File, off, n int64) error {
	w, err := io.CopyBuffer(a.tw, io.NewSectionReader(f, off, n), a.buf)
	a.info.DataBytes += w
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return fileError("archive", f.Name(), err)
		}
		return fmt.Errorf("archive %s: %w", f.Name(), err)
	}
	if w < n {
		a.info.Changed++
		clear(a.buf)
		for w < n {
			k, err := a.tw.Write(a.buf[:min(n-w, int64(len(a.buf)))])
			w += int64(k)
			if err != nil {
				return fmt.Errorf("archive %s: %w", f.Name(), err)
			}
		}
	}
	return nil
}

// segment is a run of a sparse file's data.
type segment struct{ off, len int64 }

// dataSegments maps the data of a file of size bytes with SEEK_DATA and
// SEEK_HOLE. It returns nil when the file has no hole worth keeping or
// the filesystem cannot tell.
func dataSegments(fd int, size int64) []segment {
	var segs []segment
	off := int64(0)
	for off < size {
		start, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, syscall.ENXIO) {
			break // only a hole remains
		}
		if err != nil {
			return nil
		}
		end, err := unix.Seek(fd, start, unix.SEEK_HOLE)
		if err != nil || end <= start {
			return nil
		}
		end = min(end, size)
		switch n := len(segs); {
		case n > 0 && start-(segs[n-1].off+segs[n-1].len) < sparseMinHole:
			segs[n-1].len = end - segs[n-1].off
		case n == sparseMaxSegments:
			segs[n-1].len = size - segs[n-1].off
			end = size
		default:
			segs = append(segs, segment{start, end - start})
		}
		off = end
	}
	var data int64
	for _, s := range segs {
		data += s.len
	}
	if size-data < sparseMinHole {
		return nil
	}
	return segs
}

// sparseFile writes a file in GNU tar's sparse format 1.0: a pax header
// naming the file and its real size, then an entry whose contents are the
// map of its data segments (in decimal, one number a line, padded to a
// block) followed by the segments. archive/tar reads this format but does
// not write it, so the pax header is written here.
func (a *archiver) sparseFile(f *os.File, hdr *tar.Header, segs []segment) error {
	var m strings.Builder
	m.WriteString(strconv.Itoa(len(segs)+1) + "\n")
	var data int64
	for _, s := range segs {
		fmt.Fprintf(&m, "%d\n%d\n", s.off, s.len)
		data += s.len
	}
	fmt.Fprintf(&m, "%d\n0\n", hdr.Size) // the final hole ends at the real size
	sparseMap := m.String()
	if pad := len(sparseMap) % blockSize; pad != 0 {
		sparseMap += strings.Repeat("\x00", blockSize-pad)
	}

	records := []string{
		paxRecord("GNU.sparse.major", "1"),
		paxRecord("GNU.sparse.minor", "0"),
		paxRecord("GNU.sparse.name", hdr.Name),
		paxRecord("GNU.sparse.realsize", strconv.FormatInt(hdr.Size, 10)),
		paxRecord("uid", strconv.Itoa(hdr.Uid)),
		paxRecord("gid", strconv.Itoa(hdr.Gid)),
		paxRecord("mtime", paxTime(hdr.ModTime)),
	}
	if err := a.tw.Flush(); err != nil {
		return err
	}
	if err := writePAXHeader(a.enc, strings.Join(records, "")); err != nil {
		return err
	}
	ustar := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     "GNUSparseFile.0/file",
		Mode:     hdr.Mode,
		Size:     int64(len(sparseMap)) + data,
		ModTime:  time.Unix(max(hdr.ModTime.Unix(), 0), 0),
		Format:   tar.FormatUSTAR,
	}
	if hdr.Uid < 1<<21 && hdr.Gid < 1<<21 {
		ustar.Uid, ustar.Gid = hdr.Uid, hdr.Gid
	}
	if err := a.header(ustar); err != nil {
		return err
	}
	if _, err := io.WriteString(a.tw, sparseMap); err != nil {
		return err
	}
	for _, s := range segs {
		if err := a.copyRange(f, s.off, s.len); err != nil {
			return err
		}
	}
	return nil
}

const blockSize = 512

// paxRecord formats one pax record: "<length> <key>=<value>\n", where the
// length counts the whole record, its own digits included.
func paxRecord(k, v string) string {
	rest := len(k) + len(v) + 3 // ' ', '=', '\n'
	n := rest + len(strconv.Itoa(rest))
	if len(strconv.Itoa(n)) > len(strconv.Itoa(rest)) {
		n++
	}
	return strconv.Itoa(n) + " " + k + "=" + v + "\n"
}

// paxTime formats t as pax does: seconds, and the fraction if any.
func paxTime(t time.Time) string {
	s := strconv.FormatInt(t.Unix(), 10)
	if ns := t.Nanosecond(); ns != 0 {
		if t.Unix() < 0 {
			// Negative times are written as the seconds before, plus
			// the fraction after: keep it simple and drop the fraction.
			return s
		}
		s += "." + strings.TrimRight(fmt.Sprintf("%09d", ns), "0")
	}
	return s
}

// writePAXHeader writes a pax extended header ('x') holding records, and
// its records padded to a block.
func writePAXHeader(w io.Writer, records string) error {
	var b [blockSize]byte
	copy(b[0:100], "PaxHeaders.0/GNUSparseFile")
	copy(b[100:108], "0000644\x00")
	copy(b[108:116], "0000000\x00")
	copy(b[116:124], "0000000\x00")
	copy(b[124:136], fmt.Sprintf("%011o\x00", len(records)))
	copy(b[136:148], "00000000000\x00")
	copy(b[148:156], "        ") // the checksum counts its own field as spaces
	b[156] = tar.TypeXHeader
	copy(b[257:263], "ustar\x00")
	copy(b[263:265], "00")
	sum := 0
	for _, c := range b {
		sum += int(c)
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))
	if _, err := w.Write(b[:]); err != nil {
		return err
	}
	body := []byte(records)
	if pad := len(body) % blockSize; pad != 0 {
		body = append(body, make([]byte, blockSize-pad)...)
	}
	_, err := w.Write(body)
	return err
}
