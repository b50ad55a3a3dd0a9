package server

import (
	"archive/tar"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/token"
)

// The archive benchmarks run computerd's archive and restore, over HTTP on
// loopback, against `tar -c | zstd -1` and `zstd -d | tar -x` of the same
// ~256 MB mixed folder in the same run (or, without a zstd binary, Go's
// archive/tar with zstd's fastest level). They report ours and the
// baseline in MB/s of the folder's contents, and their ratio (ours over
// the baseline: above 1 is faster).

// benchFolder makes the mixed folder: a 64 MB random file, a 64 MB text
// file, and about 3000 small files (text and random) in 30 folders, with
// some links.
func benchFolder(b *testing.B) (string, int64) {
	benchDir, benchBytes := b.TempDir(), int64(0)
	var benchErr error
	func() {
		rng := rand.New(rand.NewPCG(1, 2))
		random := rand.NewChaCha8([32]byte{3})
		words := strings.Fields("the quick brown fox jumps over a lazy dog while computers archive their home folders " +
			"func main return error nil package import struct interface go build test vet")
		text := func(n int) []byte {
			var sb strings.Builder
			for sb.Len() < n {
				sb.WriteString(words[rng.IntN(len(words))])
				if rng.IntN(12) == 0 {
					sb.WriteString("\n")
				} else {
					sb.WriteString(" ")
				}
			}
			return []byte(sb.String()[:n])
		}
		randBytes := func(n int) []byte {
			p := make([]byte, n)
			random.Read(p)
			return p
		}
		write := func(name string, data []byte) {
			if benchErr == nil {
				benchErr = os.WriteFile(filepath.Join(benchDir, name), data, 0o644)
				benchBytes += int64(len(data))
			}
		}
		write("random.bin", randBytes(64<<20))
		write("text.log", text(64<<20))
		for d := range 30 {
			dir := filepath.Join(benchDir, "src", "pkg"+itoa(d))
			if benchErr = os.MkdirAll(dir, 0o755); benchErr != nil {
				return
			}
			for f := range 100 {
				n := 1024 + rng.IntN(64<<10)
				name := filepath.Join("src", "pkg"+itoa(d), "file"+itoa(f))
				if f%2 == 0 {
					write(name+".go", text(n))
				} else {
					write(name+".bin", randBytes(n))
				}
			}
			os.Symlink("file0.go", filepath.Join(dir, "link"))
		}
	}()
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return benchDir, benchBytes
}

// benchServer serves computerd on home for a benchmark.
func benchServer(b testing.TB, home string) *computerd.Client {
	d, err := token.NewDeriver(testSecret)
	if err != nil {
		b.Fatal(err)
	}
	tok := d.Derive(token.Computer, "c-bench")
	srv := New(Config{TokenHash: token.Hash(tok), Home: home})
	ts := httptest.NewServer(srv)
	b.Cleanup(func() { srv.Close(); ts.Close() })
	return computerd.NewClient(ts.URL, tok, computerd.WithHTTPClient(ts.Client()))
}

func haveZstd() bool {
	_, err := exec.LookPath("zstd")
	return err == nil
}

// baseArchive archives dir to out the baseline's way.
func baseArchive(b *testing.B, dir, out string) {
	if haveZstd() {
		cmd := "tar -C " + dir + " -cf - . | zstd -1 -q -f -o " + out
		if o, err := exec.Command("/bin/sh", "-c", cmd).CombinedOutput(); err != nil {
			b.Fatalf("%s: %v\n%s", cmd, err, o)
		}
		return
	}
	f, err := os.Create(out)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	enc, _ := zstd.NewWriter(f, zstd.WithEncoderLevel(zstd.SpeedFastest))
	tw := tar.NewWriter(enc)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if d.Type()&fs.ModeSymlink != 0 {
			link, _ = os.Readlink(p)
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name, _ = filepath.Rel(dir, p)
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if d.Type().IsRegular() {
			r, err := os.Open(p)
			if err != nil {
				return err
			}
			defer r.Close()
			_, err = io.Copy(tw, r)
			return err
		}
		return nil
	})
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = enc.Close()
	}
	if err != nil {
		b.Fatal(err)
	}
}

// baseRestore unpacks archive into dir the baseline's way.
func baseRestore(b *testing.B, archive, dir string) {
	if haveZstd() {
		cmd := "zstd -d -q -c " + archive + " | tar -x -C " + dir
		if o, err := exec.Command("/bin/sh", "-c", cmd).CombinedOutput(); err != nil {
			b.Fatalf("%s: %v\n%s", cmd, err, o)
		}
		return
	}
	f, err := os.Open(archive)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	dec, _ := zstd.NewReader(f)
	defer dec.Close()
	tr := tar.NewReader(dec)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			b.Fatal(err)
		}
		p := filepath.Join(dir, hdr.Name)
		switch hdr.Typeflag {
		case tar.TypeDir:
			os.MkdirAll(p, 0o755)
		case tar.TypeSymlink:
			os.Symlink(hdr.Linkname, p)
		case tar.TypeReg:
			w, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, fs.FileMode(hdr.Mode))
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(w, tr)
			w.Close()
		}
	}
}

func reportMBs(b *testing.B, size int64, ours, base time.Duration) {
	mbs := func(d time.Duration) float64 { return float64(size) / 1e6 / d.Seconds() }
	b.ReportMetric(mbs(ours), "MB/s")
	b.ReportMetric(mbs(base), "base-MB/s")
	b.ReportMetric(base.Seconds()/ours.Seconds(), "ratio")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkArchive archives the folder through computerd's API against
// `tar -c | zstd -1` of it.
func BenchmarkArchive(b *testing.B) {
	dir, size := benchFolder(b)
	c := benchServer(b, dir)
	out := filepath.Join(b.TempDir(), "base.tar.zst")
	var ours, base time.Duration
	var info computerd.ArchiveInfo
	for b.Loop() {
		t0 := time.Now()
		baseArchive(b, dir, out)
		base += time.Since(t0)
		t0 = time.Now()
		var err error
		if info, err = c.Archive(b.Context(), io.Discard); err != nil {
			b.Fatal(err)
		}
		ours += time.Since(t0)
	}
	if fi, err := os.Stat(out); err == nil {
		b.Logf("folder %d bytes; ours %d bytes compressed, baseline %d", size, info.Bytes, fi.Size())
	}
	reportMBs(b, size, ours, base)
}

// BenchmarkRestore restores the folder's archive through computerd's API
// into an empty home against `zstd -d | tar -x` of the same archive.
func BenchmarkRestore(b *testing.B) {
	dir, size := benchFolder(b)
	archive := filepath.Join(b.TempDir(), "home.tar.zst")
	f, err := os.Create(archive)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := benchServer(b, dir).Archive(b.Context(), f); err != nil {
		b.Fatal(err)
	}
	f.Close()
	var ours, base time.Duration
	for b.Loop() {
		into := b.TempDir()
		t0 := time.Now()
		baseRestore(b, archive, into)
		base += time.Since(t0)

		home := b.TempDir()
		c := benchServer(b, home)
		r, err := os.Open(archive)
		if err != nil {
			b.Fatal(err)
		}
		t0 = time.Now()
		_, err = c.Restore(b.Context(), r, computerd.RestoreOptions{})
		ours += time.Since(t0)
		r.Close()
		if err != nil {
			b.Fatal(err)
		}
		os.RemoveAll(into)
		os.RemoveAll(home)
	}
	reportMBs(b, size, ours, base)
}
