package server

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/testkit"
)

// bigFileBytes is the size of the large file of the round trip.
const bigFileBytes = 200 << 20

// writeRandom writes n bytes of seeded pseudo-random data to path.
func writeRandom(t testing.TB, path string, n int64, seed uint64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rng := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	if _, err := io.CopyN(f, rng, n); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func mustDo(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// fillHome makes the test home: files of every kind the archive keeps.
// It reports whether a file owned by uid 1000 was made (only root can).
func fillHome(t *testing.T, home string) (owned bool) {
	t.Helper()
	p := func(name string) string { return filepath.Join(home, name) }
	writeRandom(t, p("big.bin"), bigFileBytes, 1)
	mustDo(t, os.MkdirAll(p("notes/deep/er"), 0o755))
	writeFile(t, p("notes/a.txt"), "hello\n")
	writeFile(t, p("notes/deep/er/b.txt"), strings.Repeat("compressible text ", 10000))
	mustDo(t, os.WriteFile(p("empty"), nil, 0o644))
	mustDo(t, os.Mkdir(p("empty-dir"), 0o700))
	mustDo(t, os.WriteFile(p("script.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755))
	mustDo(t, os.Chmod(p("script.sh"), 0o750))
	mustDo(t, os.WriteFile(p("secret"), []byte("s"), 0o600))
	mustDo(t, os.Chmod(p("secret"), 0o600))
	mustDo(t, os.Mkdir(p("sticky"), 0o755))
	mustDo(t, os.Chmod(p("sticky"), 0o1777))
	mustDo(t, os.Mkdir(p("readonly"), 0o755))
	writeFile(t, p("readonly/inside.txt"), "in a read-only folder")
	mustDo(t, os.Chmod(p("readonly"), 0o555))
	mustDo(t, os.Symlink("notes/a.txt", p("link")))
	mustDo(t, os.Symlink("/nowhere/at/all", p("dangling")))
	mustDo(t, os.Symlink("../..", p("notes/up")))
	mustDo(t, os.Link(p("notes/a.txt"), p("notes/deep/hard.txt")))
	long := strings.Repeat("long-name-", 20) // over tar's 100 bytes
	writeFile(t, p(long), "long")
	writeFile(t, p("ünïcødé 日本.txt"), "unicode")
	mustDo(t, unix.Mkfifo(p("fifo"), 0o644))
	// A sparse file: 1 GiB long, 2 MiB of data.
	f, err := os.Create(p("sparse.img"))
	mustDo(t, err)
	mustDo(t, f.Truncate(1<<30))
	rng := rand.NewChaCha8([32]byte{7})
	chunk := make([]byte, 1<<20)
	rng.Read(chunk)
	_, err = f.WriteAt(chunk, 100<<20)
	mustDo(t, err)
	_, err = f.WriteAt(chunk, 900<<20)
	mustDo(t, err)
	mustDo(t, f.Close())
	// Times with nanoseconds.
	when := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
	mustDo(t, os.Chtimes(p("notes/a.txt"), when, when))
	mustDo(t, os.Chtimes(p("empty-dir"), when, when))
	ts := []unix.Timespec{unix.NsecToTimespec(when.UnixNano()), unix.NsecToTimespec(when.UnixNano())}
	mustDo(t, unix.UtimesNanoAt(unix.AT_FDCWD, p("link"), ts, unix.AT_SYMLINK_NOFOLLOW))
	if os.Geteuid() == 0 {
		mustDo(t, os.Mkdir(p("users"), 0o755))
		writeFile(t, p("users/owned.txt"), "owned by 1000")
		mustDo(t, os.Lchown(p("users/owned.txt"), 1000, 1000))
		mustDo(t, os.Lchown(p("users"), 1000, 1001))
		owned = true
	}
	return owned
}

// treeEntry is what a round trip must keep of one file.
type treeEntry struct {
	typ      fs.FileMode
	mode     uint32
	uid, gid uint32
	size     int64
	mtime    int64 // ns; folders excluded (their contents change them)
	target   string
	sha      string
	ino      uint64
}

// describeTree describes every file under root, and the hard links among
// them as sets of names.
func describeTree(t *testing.T, root string) (map[string]treeEntry, [][]string) {
	t.Helper()
	out := make(map[string]treeEntry)
	inodes := make(map[uint64][]string)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if rel == "." {
			return nil
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return err
		}
		e := treeEntry{typ: d.Type(), mode: st.Mode & 0o7777, uid: st.Uid, gid: st.Gid, mtime: st.Mtim.Nano()}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			e.target, _ = os.Readlink(path)
			e.mode = 0
		case d.IsDir():
		case d.Type().IsRegular():
			e.size = st.Size
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			h := sha256.New()
			io.Copy(h, f)
			f.Close()
			e.sha = hex.EncodeToString(h.Sum(nil))
			if st.Nlink > 1 {
				inodes[st.Ino] = append(inodes[st.Ino], rel)
			}
		default:
			return nil // fifos are not archived
		}
		out[rel] = e
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var links [][]string
	for _, names := range inodes {
		sort.Strings(names)
		links = append(links, names)
	}
	sort.Slice(links, func(i, j int) bool { return links[i][0] < links[j][0] })
	return out, links
}

// archiveTo archives h's home into a file and returns its path.
func archiveTo(t *testing.T, h *harness) (string, computerd.ArchiveInfo) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "home.tar.zst")
	f, err := os.Create(path)
	mustDo(t, err)
	defer f.Close()
	info, err := h.client.Archive(testContext(t), f)
	if err != nil {
		t.Fatalf("archive: %v", err)
	}
	mustDo(t, f.Close())
	return path, info
}

func restoreFrom(t *testing.T, h *harness, path string, opts computerd.RestoreOptions) (computerd.RestoreResult, error) {
	t.Helper()
	f, err := os.Open(path)
	mustDo(t, err)
	defer f.Close()
	return h.client.Restore(testContext(t), f, opts)
}

func TestArchiveRoundTrip(t *testing.T) {
	if testing.Short() {
		t.Skip("writes and archives a 200 MB file; runs without -short")
	}
	src := newHarness(t)
	owned := fillHome(t, src.home)
	if !owned {
		t.Log("not root: the file owned by uid 1000 is left out (CI runs as root and checks it)")
	}
	want, wantLinks := describeTree(t, src.home)

	path, info := archiveTo(t, src)
	t.Logf("archive: %+v", info)
	if info.Skipped != 1 {
		t.Errorf("skipped %d, want 1 (the fifo)", info.Skipped)
	}
	if info.Format != computerd.ArchiveFormat || info.Entries < int64(len(want)) {
		t.Errorf("info %+v for %d files", info, len(want))
	}
	fi, err := os.Stat(path)
	mustDo(t, err)
	if fi.Size() != info.Bytes {
		t.Errorf("file of %d bytes, info says %d", fi.Size(), info.Bytes)
	}
	// The sparse file's holes are not stored: random data does not
	// compress, so the archive is about the data's size.
	if max := int64(bigFileBytes + 8<<20); info.Bytes > max {
		t.Errorf("archive of %d bytes, want at most %d (holes stored?)", info.Bytes, max)
	}

	dst := newHarness(t)
	writeFile(t, filepath.Join(dst.home, ".bashrc"), "the new machine's own")
	res, err := restoreFrom(t, dst, path, computerd.RestoreOptions{SHA256: info.SHA256})
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	t.Logf("restore: %+v", res)
	if res.SHA256 != info.SHA256 || res.Bytes != info.Bytes || res.Entries != info.Entries {
		t.Errorf("restore %+v, archive %+v", res, info)
	}
	got, gotLinks := describeTree(t, dst.home)
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Errorf("%s: missing after the restore", name)
			continue
		}
		if w.typ.IsDir() {
			// A restore may change folder times only by making them.
			g.mtime, w.mtime = 0, 0
		}
		if g != w && !(g.ino != w.ino && func() bool { g.ino = w.ino; return g == w }()) {
			t.Errorf("%s: restored %+v, want %+v", name, g, w)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s: restored, but not in the original home", name)
		}
	}
	if len(wantLinks) != 1 || !equalLinks(gotLinks, wantLinks) {
		t.Errorf("hard links %v, want %v", gotLinks, wantLinks)
	}
	// The sparse file is sparse again.
	var st unix.Stat_t
	mustDo(t, unix.Stat(filepath.Join(dst.home, "sparse.img"), &st))
	if st.Size != 1<<30 || st.Blocks*512 > 16<<20 {
		t.Errorf("sparse.img: size %d, %d bytes on disk; want 1 GiB with about 2 MiB on disk", st.Size, st.Blocks*512)
	}
	if _, err := os.Stat(filepath.Join(dst.home, ".bashrc")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf(".bashrc of the new home: %v, want it replaced by the archive's contents", err)
	}
	if owned {
		g := got["users/owned.txt"]
		if g.uid != 1000 || g.gid != 1000 || got["users"].gid != 1001 {
			t.Errorf("owners: %+v %+v", g, got["users"])
		}
	}
	noStaging(t, dst.home)

	// The archive is GNU tar's too.
	if _, err := os.Stat("/usr/bin/zstd"); err == nil {
		out := t.TempDir()
		cmd := "zstd -dc " + path + " | tar -x -C " + out
		if b, err := execShell(cmd); err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, b)
		}
		for _, name := range []string{"sparse.img", "notes/deep/hard.txt", "big.bin"} {
			if a, b := fileSHA(t, filepath.Join(out, name)), want[name].sha; a != b {
				t.Errorf("%s extracted by GNU tar: SHA-256 %s, want %s", name, a, b)
			}
		}
	}
}

func equalLinks(a, b [][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if strings.Join(a[i], "\x00") != strings.Join(b[i], "\x00") {
			return false
		}
	}
	return true
}

func fileSHA(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	h := sha256.New()
	io.Copy(h, f)
	return hex.EncodeToString(h.Sum(nil))
}

// noStaging checks that no restore folder is left in home.
func noStaging(t *testing.T, home string) {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(home, computerd.RestoreStagingPrefix+"*"))
	if len(m) > 0 {
		t.Errorf("restore folders left behind: %v", m)
	}
}

// tarEntry is one entry of a hand-made archive.
type tarEntry struct {
	hdr  tar.Header
	data string
}

// makeArchive compresses a hand-made tar of entries.
func makeArchive(t *testing.T, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc, err := zstd.NewWriter(&buf)
	mustDo(t, err)
	tw := tar.NewWriter(enc)
	for _, e := range entries {
		h := e.hdr
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.Typeflag == tar.TypeReg && h.Size == 0 {
			h.Size = int64(len(e.data))
		}
		mustDo(t, tw.WriteHeader(&h))
		if e.data != "" {
			_, err := io.WriteString(tw, e.data)
			mustDo(t, err)
		}
	}
	mustDo(t, tw.Close())
	mustDo(t, enc.Close())
	return buf.Bytes()
}

// snapshot lists a folder tree with each file's content, to show it
// unchanged.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			b.WriteString("error " + err.Error() + "\n")
			return nil
		}
		rel, _ := filepath.Rel(dir, path)
		b.WriteString(rel + " " + d.Type().String())
		if d.Type().IsRegular() {
			c, _ := os.ReadFile(path)
			b.WriteString(" " + sha(string(c)))
		}
		b.WriteString("\n")
		return nil
	})
	return b.String()
}

// hostileSetup is a home with one file, beside a sentinel folder outside
// it that a hostile archive aims at.
type hostileSetup struct {
	h        *harness
	sentinel string
	home0    string // snapshot of the home
	outside0 string // snapshot of the folder the home is in
}

func newHostile(t *testing.T) *hostileSetup {
	h := newHarness(t)
	writeFile(t, filepath.Join(h.home, "keep.txt"), "before")
	parent := filepath.Dir(h.home)
	sentinel := filepath.Join(parent, "sentinel")
	mustDo(t, os.MkdirAll(sentinel, 0o755))
	writeFile(t, filepath.Join(sentinel, "victim"), "untouched")
	return &hostileSetup{h: h, sentinel: sentinel, home0: snapshot(t, h.home), outside0: snapshot(t, sentinel)}
}

// check verifies that nothing changed, in the home or outside it.
func (s *hostileSetup) check(t *testing.T) {
	t.Helper()
	if got := snapshot(t, s.h.home); got != s.home0 {
		t.Errorf("home changed:\n%s\nwant:\n%s", got, s.home0)
	}
	if got := snapshot(t, s.sentinel); got != s.outside0 {
		t.Errorf("outside the home changed:\n%s\nwant:\n%s", got, s.outside0)
	}
	entries, _ := os.ReadDir(filepath.Dir(s.h.home))
	for _, e := range entries {
		if e.Name() != filepath.Base(s.h.home) && e.Name() != "sentinel" {
			t.Errorf("written beside the home: %s", e.Name())
		}
	}
	if _, err := os.Lstat("/escape.txt"); err == nil {
		t.Errorf("/escape.txt was written")
	}
}

func TestRestoreRefusesHostileArchives(t *testing.T) {
	zeros := strings.Repeat("\x00", 4<<20)
	for _, tc := range []struct {
		name    string
		entries func(sentinel string) []tarEntry
		opts    computerd.RestoreOptions
		status  int
		code    string
		words   []string
	}{
		{"dot-dot", func(string) []tarEntry {
			return []tarEntry{{hdr: tar.Header{Name: "../sentinel/victim"}, data: "pwned"}}
		}, computerd.RestoreOptions{}, 422, computerd.CodeBadArchive, []string{".."}},
		{"dot-dot inside", func(string) []tarEntry {
			return []tarEntry{{hdr: tar.Header{Name: "a/../../sentinel/x"}, data: "pwned"}}
		}, computerd.RestoreOptions{}, 422, computerd.CodeBadArchive, []string{".."}},
		{"absolute", func(s string) []tarEntry {
			return []tarEntry{{hdr: tar.Header{Name: s + "/victim"}, data: "pwned"}, {hdr: tar.Header{Name: "/escape.txt"}, data: "x"}}
		}, computerd.RestoreOptions{}, 422, computerd.CodeBadArchive, []string{"absolute"}},
		{"write through an absolute symlink", func(s string) []tarEntry {
			return []tarEntry{
				{hdr: tar.Header{Name: "ln", Typeflag: tar.TypeSymlink, Linkname: s}},
				{hdr: tar.Header{Name: "ln/victim"}, data: "pwned"},
			}
		}, computerd.RestoreOptions{}, 422, computerd.CodeBadArchive, []string{"symbolic link"}},
		{"write through a relative symlink", func(s string) []tarEntry {
			return []tarEntry{
				{hdr: tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755}},
				{hdr: tar.Header{Name: "d/up", Typeflag: tar.TypeSymlink, Linkname: "../../sentinel"}},
				{hdr: tar.Header{Name: "d/up/new"}, data: "pwned"},
			}
		}, computerd.RestoreOptions{}, 422, computerd.CodeBadArchive, []string{"symbolic link"}},
		{"symlink inside then write", func(s string) []tarEntry {
			return []tarEntry{
				{hdr: tar.Header{Name: "real/", Typeflag: tar.TypeDir, Mode: 0o755}},
				{hdr: tar.Header{Name: "alias", Typeflag: tar.TypeSymlink, Linkname: "real"}},
				{hdr: tar.Header{Name: "alias/x"}, data: "through"},
			}
		}, computerd.RestoreOptions{}, 422, computerd.CodeBadArchive, []string{"symbolic link"}},
		{"beneath a file", func(s string) []tarEntry {
			return []tarEntry{{hdr: tar.Header{Name: "f"}, data: "x"}, {hdr: tar.Header{Name: "f/g"}, data: "y"}}
		}, computerd.RestoreOptions{}, 422, computerd.CodeBadArchive, []string{"not a folder"}},
		{"symlink replacing a file", func(s string) []tarEntry {
			return []tarEntry{{hdr: tar.Header{Name: "f"}, data: "x"}, {hdr: tar.Header{Name: "f", Typeflag: tar.TypeSymlink, Linkname: s}}}
		}, computerd.RestoreOptions{}, 422, computerd.CodeBadArchive, []string{"twice"}},
		{"character device", func(string) []tarEntry {
			return []tarEntry{{hdr: tar.Header{Name: "null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}}}
		}, computerd.RestoreOptions{}, 422, computerd.CodeBadArchive, []string{"character device"}},
		{"block device", func(string) []tarEntry {
			return []tarEntry{{hdr: tar.Header{Name: "sda", Typeflag: tar.TypeBlock, Devmajor: 8}}}
		}, computerd.RestoreOptions{}, 422, computerd.CodeBadArchive, []string{"block device"}},
		{"fifo", func(string) []tarEntry {
			return []tarEntry{{hdr: tar.Header{Name: "p", Typeflag: tar.TypeFifo}}}
		}, computerd.RestoreOptions{}, 422, computerd.CodeBadArchive, []string{"fifo"}},
		{"hard link outside", func(s string) []tarEntry {
			return []tarEntry{{hdr: tar.Header{Name: "hl", Typeflag: tar.TypeLink, Linkname: "../sentinel/victim"}}}
		}, computerd.RestoreOptions{}, 422, computerd.CodeBadArchive, []string{".."}},
		{"hard link absolute", func(s string) []tarEntry {
			return []tarEntry{{hdr: tar.Header{Name: "hl", Typeflag: tar.TypeLink, Linkname: s + "/victim"}}}
		}, computerd.RestoreOptions{}, 422, computerd.CodeBadArchive, []string{"absolute"}},
		{"hard link through a symlink", func(s string) []tarEntry {
			return []tarEntry{
				{hdr: tar.Header{Name: "ln", Typeflag: tar.TypeSymlink, Linkname: s}},
				{hdr: tar.Header{Name: "hl", Typeflag: tar.TypeLink, Linkname: "ln/victim"}},
			}
		}, computerd.RestoreOptions{}, 422, computerd.CodeBadArchive, []string{"symbolic link"}},
		{"hard link to a symlink", func(s string) []tarEntry {
			return []tarEntry{
				{hdr: tar.Header{Name: "ln", Typeflag: tar.TypeSymlink, Linkname: s + "/victim"}},
				{hdr: tar.Header{Name: "hl", Typeflag: tar.TypeLink, Linkname: "ln"}},
			}
		}, computerd.RestoreOptions{}, 422, computerd.CodeBadArchive, []string{"not a file"}},
		{"hard link to a later file", func(s string) []tarEntry {
			return []tarEntry{{hdr: tar.Header{Name: "hl", Typeflag: tar.TypeLink, Linkname: "later"}}, {hdr: tar.Header{Name: "later"}, data: "x"}}
		}, computerd.RestoreOptions{}, 422, computerd.CodeBadArchive, []string{"not a file"}},
		{"zip bomb", func(string) []tarEntry {
			return []tarEntry{{hdr: tar.Header{Name: "bomb"}, data: zeros}}
		}, computerd.RestoreOptions{MaxBytes: 1 << 20}, 413, computerd.CodeTooLarge, []string{"bytes"}},
		{"zip bomb of many files", func(string) []tarEntry {
			var es []tarEntry
			for i := range 8 {
				es = append(es, tarEntry{hdr: tar.Header{Name: "bomb" + string(rune('a'+i))}, data: zeros[:1<<20]})
			}
			return es
		}, computerd.RestoreOptions{MaxBytes: 5 << 20}, 413, computerd.CodeTooLarge, []string{"bytes"}},
		{"too many entries", func(string) []tarEntry {
			var es []tarEntry
			for i := range 50 {
				es = append(es, tarEntry{hdr: tar.Header{Name: strings.Repeat("f", i+1)}, data: "x"})
			}
			return es
		}, computerd.RestoreOptions{MaxEntries: 10}, 413, computerd.CodeTooLarge, []string{"entries"}},
		{"too-long element", func(string) []tarEntry {
			return []tarEntry{{hdr: tar.Header{Name: strings.Repeat("n", 300)}, data: "x"}}
		}, computerd.RestoreOptions{}, 422, computerd.CodeBadArchive, []string{"longer"}},
		{"too-long name", func(string) []tarEntry {
			return []tarEntry{{hdr: tar.Header{Name: strings.Repeat("dir/", 1100) + "f"}, data: "x"}}
		}, computerd.RestoreOptions{}, 422, computerd.CodeBadArchive, []string{"longer"}},
		{"duplicate", func(string) []tarEntry {
			return []tarEntry{{hdr: tar.Header{Name: "a"}, data: "1"}, {hdr: tar.Header{Name: "a"}, data: "2"}}
		}, computerd.RestoreOptions{}, 422, computerd.CodeBadArchive, []string{"twice"}},
		{"reserved name", func(string) []tarEntry {
			return []tarEntry{{hdr: tar.Header{Name: computerd.RestoreStagingPrefix + "x/y"}, data: "1"}}
		}, computerd.RestoreOptions{}, 422, computerd.CodeBadArchive, []string{"reserved"}},
		{"wrong checksum", func(string) []tarEntry {
			return []tarEntry{{hdr: tar.Header{Name: "a"}, data: "1"}}
		}, computerd.RestoreOptions{SHA256: strings.Repeat("ab", 32)}, 422, computerd.CodeBadArchive, []string{"SHA-256"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newHostile(t)
			archive := makeArchive(t, tc.entries(s.sentinel)...)
			_, err := s.h.client.Restore(testContext(t), bytes.NewReader(archive), tc.opts)
			wantAPIError(t, err, tc.status, tc.code, tc.words...)
			s.check(t)
		})
	}
}

// goodArchive is a small valid archive.
func goodArchive(t *testing.T) []byte {
	return makeArchive(t,
		tarEntry{hdr: tar.Header{Name: "dir/", Typeflag: tar.TypeDir, Mode: 0o755}},
		tarEntry{hdr: tar.Header{Name: "dir/a.txt"}, data: strings.Repeat("some data ", 100000)},
		tarEntry{hdr: tar.Header{Name: "b.txt"}, data: "b"},
	)
}

func TestRestoreRefusesCorruptStreams(t *testing.T) {
	good := goodArchive(t)
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0xff
	var plainTar bytes.Buffer
	tw := tar.NewWriter(&plainTar)
	tw.WriteHeader(&tar.Header{Name: "x", Mode: 0o644, Size: 1})
	tw.Write([]byte("x"))
	tw.Close()
	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"truncated", good[:len(good)/2]},
		{"truncated at the end", good[:len(good)-3]},
		{"flipped byte", flipped},
		{"garbage after", append(bytes.Clone(good), []byte("garbage after the stream")...)},
		{"not zstd", plainTar.Bytes()},
		{"empty", nil},
		// Whole zstd frames of a tar without its end, as a stream of
		// frames cut between two of them is.
		{"cut between frames after an entry", tarFrames(t, false)},
		{"cut between frames in the tar's end", tarFrames(t, true)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newHostile(t)
			_, err := s.h.client.Restore(testContext(t), bytes.NewReader(tc.body), computerd.RestoreOptions{})
			wantAPIError(t, err, 422, computerd.CodeBadArchive)
			s.check(t)
		})
	}
	t.Run("good", func(t *testing.T) {
		s := newHostile(t)
		res, err := s.h.client.Restore(testContext(t), bytes.NewReader(good), computerd.RestoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Entries != 3 || res.DataBytes != 1000001 {
			t.Errorf("result %+v", res)
		}
		if res.SHA256 != "" {
			t.Errorf("restore asked for no SHA-256 answered %q: the stream was hashed for nothing", res.SHA256)
		}
		if got, _ := readFileString(filepath.Join(s.h.home, "b.txt")); got != "b" {
			t.Errorf("b.txt = %q", got)
		}
		if _, err := os.Stat(filepath.Join(s.h.home, "keep.txt")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("keep.txt of the old home: %v, want it gone", err)
		}
		noStaging(t, s.h.home)
	})
}

// tarFrames returns a tar of two files, cut after the second (or after
// the first of the two zero blocks that end it, with oneZero), as two
// whole zstd frames.
func tarFrames(t *testing.T, oneZero bool) []byte {
	t.Helper()
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	for _, name := range []string{"a.txt", "b.txt"} {
		data := strings.Repeat(name, 1000)
		mustDo(t, tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}))
		_, err := io.WriteString(tw, data)
		mustDo(t, err)
	}
	mustDo(t, tw.Flush())
	body := raw.Bytes()
	if oneZero {
		body = append(body, make([]byte, 512)...)
	}
	enc, err := zstd.NewWriter(nil)
	mustDo(t, err)
	defer enc.Close()
	half := len(body) / 2 / 512 * 512
	return enc.EncodeAll(body[half:], enc.EncodeAll(body[:half], nil))
}

// TestArchiveIsFrames checks that a home larger than a frame leaves as
// several zstd frames that `zstd -d | tar -t` reads whole.
func TestArchiveIsFrames(t *testing.T) {
	h := newHarness(t)
	writeRandom(t, filepath.Join(h.home, "big.bin"), 3*frameBytes+12345, 1)
	mustDo(t, os.WriteFile(filepath.Join(h.home, "after.txt"), []byte("after"), 0o644))
	path, info := archiveTo(t, h)
	data, err := os.ReadFile(path)
	mustDo(t, err)
	if frames := bytes.Count(data, []byte{0x28, 0xb5, 0x2f, 0xfd}); frames < 4 {
		t.Errorf("the archive holds %d zstd frame magics, want at least 4", frames)
	}
	if info.Bytes != int64(len(data)) {
		t.Errorf("info says %d bytes, the file has %d", info.Bytes, len(data))
	}
	if _, err := exec.LookPath("zstd"); err != nil {
		t.Fatalf("this test reads the archive with the zstd command: %v", err)
	}
	out, err := exec.Command("sh", "-c", `zstd -d -q -c "$1" | tar -tf -`, "sh", path).CombinedOutput()
	if err != nil {
		t.Fatalf("zstd -d | tar -t: %v\n%s", err, out)
	}
	if got := strings.Fields(string(out)); !slices.Contains(got, "big.bin") || !slices.Contains(got, "after.txt") {
		t.Errorf("zstd -d | tar -t lists %q", got)
	}
}

// TestRestoreFailingLateLeavesTheHome fails a restore after the archive is
// unpacked, just before the swap.
func TestRestoreFailingLateLeavesTheHome(t *testing.T) {
	s := newHostile(t)
	testHookBeforeSwap = func(string) error { return errors.New("injected failure") }
	defer func() { testHookBeforeSwap = nil }()
	_, err := s.h.client.Restore(testContext(t), bytes.NewReader(goodArchive(t)), computerd.RestoreOptions{})
	wantAPIError(t, err, 500, computerd.CodeInternal, "injected")
	s.check(t)
}

// TestRestoreOneAtATime holds a restore open and checks that a second
// restore, and an archive, are refused meanwhile.
func TestRestoreOneAtATime(t *testing.T) {
	s := newHostile(t)
	ctx := testContext(t)
	good := goodArchive(t)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := s.h.client.Restore(ctx, pr, computerd.RestoreOptions{})
		done <- err
	}()
	pw.Write(good[:len(good)/2]) // returns once the client's transport read it
	// The first restore holds the home once its staging folder is there.
	testkit.Eventually(t, 10*time.Second, "the first restore to begin", func() bool {
		m, _ := filepath.Glob(filepath.Join(s.h.home, computerd.RestoreStagingPrefix+"*"))
		return len(m) > 0
	})
	_, err := s.h.client.Restore(ctx, bytes.NewReader(good), computerd.RestoreOptions{})
	wantAPIError(t, err, http.StatusConflict, computerd.CodeBusy)
	_, err = s.h.client.Archive(ctx, io.Discard)
	wantAPIError(t, err, http.StatusConflict, computerd.CodeBusy)
	pw.CloseWithError(errors.New("the sender went away"))
	if err := <-done; err == nil {
		t.Fatal("a restore whose body broke succeeded")
	}
	// The client may see the broken body before computerd does.
	testkit.Eventually(t, 10*time.Second, "the broken restore to end", func() bool {
		m, _ := filepath.Glob(filepath.Join(s.h.home, computerd.RestoreStagingPrefix+"*"))
		return len(m) == 0 && s.h.srv.archiving.TryLock() && func() bool { s.h.srv.archiving.Unlock(); return true }()
	})
	s.check(t)
	// Then one may run.
	if _, err := s.h.client.Restore(ctx, bytes.NewReader(good), computerd.RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestRestoreRemovesLeftovers(t *testing.T) {
	h := newHarness(t)
	stale := filepath.Join(h.home, computerd.RestoreStagingPrefix+"0123")
	mustDo(t, os.MkdirAll(filepath.Join(stale, "ro"), 0o755))
	mustDo(t, os.Chmod(filepath.Join(stale, "ro"), 0o555))
	if _, err := h.client.Restore(testContext(t), bytes.NewReader(goodArchive(t)), computerd.RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	noStaging(t, h.home)
}

func TestArchiveLeavesOutStaging(t *testing.T) {
	h := newHarness(t)
	writeFile(t, filepath.Join(h.home, "a"), "a")
	mustDo(t, os.Mkdir(filepath.Join(h.home, computerd.RestoreStagingPrefix+"x"), 0o700))
	var buf bytes.Buffer
	info, err := h.client.Archive(testContext(t), &buf)
	if err != nil {
		t.Fatal(err)
	}
	if info.Entries != 1 {
		t.Errorf("entries %d, want 1", info.Entries)
	}
}

func TestArchiveClientChecksTheTrailer(t *testing.T) {
	for _, tc := range []struct {
		name    string
		trailer func(w http.ResponseWriter, body []byte)
		check   func(t *testing.T, err error)
	}{
		{"missing", func(w http.ResponseWriter, body []byte) {}, func(t *testing.T, err error) {
			if !errors.Is(err, computerd.ErrArchiveIncomplete) {
				t.Fatalf("err = %v, want ErrArchiveIncomplete", err)
			}
		}},
		{"wrong sum", func(w http.ResponseWriter, body []byte) {
			w.Header().Set(computerd.ArchiveInfoTrailer, `{"bytes":`+itoa(len(body))+`,"sha256":"00"}`)
		}, func(t *testing.T, err error) {
			if !errors.Is(err, computerd.ErrArchiveIncomplete) {
				t.Fatalf("err = %v, want ErrArchiveIncomplete", err)
			}
		}},
		{"error", func(w http.ResponseWriter, body []byte) {
			w.Header().Set(computerd.ArchiveErrorTrailer, `{"code":"permission","message":"open x: denied"}`)
		}, func(t *testing.T, err error) {
			wantAPIError(t, err, 0, computerd.CodePermission, "denied")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte("not really an archive")
			ts := newTestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set(computerd.ArchiveFormatHeader, computerd.ArchiveFormat)
				w.Header().Set("Trailer", computerd.ArchiveInfoTrailer+", "+computerd.ArchiveErrorTrailer)
				w.Write(body)
				tc.trailer(w, body)
			}))
			c := computerd.NewClient(ts.URL, "t", computerd.WithHTTPClient(ts.Client()))
			_, err := c.Archive(testContext(t), io.Discard)
			tc.check(t, err)
		})
	}
}

// TestArchiveFailureReachesTheClient makes a file unreadable: the archive
// fails, and says which file.
func TestArchiveFailureReachesTheClient(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads any file; the failure needs a file its owner cannot read")
	}
	h := newHarness(t)
	writeFile(t, filepath.Join(h.home, "a"), "a")
	writeFile(t, filepath.Join(h.home, "locked"), "x")
	mustDo(t, os.Chmod(filepath.Join(h.home, "locked"), 0))
	_, err := h.client.Archive(testContext(t), io.Discard)
	wantAPIError(t, err, 0, computerd.CodePermission, "locked")
}

func execShell(cmd string) ([]byte, error) {
	return exec.Command("/bin/sh", "-c", cmd).CombinedOutput()
}

func itoa(n int) string { return strconv.Itoa(n) }

func newTestServer(t *testing.T, h http.Handler) *httptest.Server {
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts
}

// trailerDropper forwards requests to next and copies the answer's status,
// headers and body, but not its trailers, as some proxies in front of
// hosted computers do. cut, when set, drops the body's last byte.
func trailerDropper(t *testing.T, next string, cut bool) *httptest.Server {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, next+r.URL.RequestURI(), r.Body)
		req.Header = r.Header.Clone()
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			if k != "Trailer" {
				w.Header()[k] = v
			}
		}
		w.WriteHeader(resp.StatusCode)
		body, _ := io.ReadAll(resp.Body)
		if cut && len(body) > 0 {
			body = body[:len(body)-1]
		}
		w.Write(body)
	}))
	t.Cleanup(ts.Close)
	return ts
}

// TestArchiveWithoutTrailers: when a proxy drops the trailers, the client
// asks computerd how the archive it names ended, and still refuses a
// stream that is not the one computerd sent.
func TestArchiveWithoutTrailers(t *testing.T) {
	h := newHarness(t)
	writeFile(t, filepath.Join(h.home, "a.txt"), "kept through a proxy")
	var direct bytes.Buffer
	want, err := h.client.Archive(testContext(t), &direct)
	if err != nil {
		t.Fatal(err)
	}

	proxied := computerd.NewClient(trailerDropper(t, h.ts.URL, false).URL, h.token)
	var buf bytes.Buffer
	got, err := proxied.Archive(testContext(t), &buf)
	if err != nil {
		t.Fatalf("archive through a proxy that drops trailers: %v", err)
	}
	if got.Bytes != int64(buf.Len()) || got.Entries != want.Entries || got.SHA256 == "" {
		t.Fatalf("info through the proxy = %+v (%d bytes received), want %d entries", got, buf.Len(), want.Entries)
	}
	if _, err := h.client.Restore(testContext(t), bytes.NewReader(buf.Bytes()), computerd.RestoreOptions{SHA256: got.SHA256}); err != nil {
		t.Fatalf("restore of the proxied archive: %v", err)
	}

	cutting := computerd.NewClient(trailerDropper(t, h.ts.URL, true).URL, h.token)
	if _, err := cutting.Archive(testContext(t), io.Discard); !errors.Is(err, computerd.ErrArchiveIncomplete) {
		t.Fatalf("a stream one byte short through a proxy without trailers: %v, want ErrArchiveIncomplete", err)
	}
	var ae *computerd.APIError
	_, err = computerd.NewClient(h.ts.URL, h.token).Archive(testContext(t), failingWriter{})
	if err == nil || errors.As(err, &ae) {
		t.Fatalf("archive into a failing writer: %v, want the writer's error", err)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }
