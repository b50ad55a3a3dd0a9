package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/httpjson"
	"github.com/berthdev/berth/internal/token"
)

// Fuzz targets for the paths an agent gives the file tools. A path is the
// agent's to choose (the computer is its own, the container its boundary),
// so an absolute path is taken as it is; what must hold is that a
// relative path is read against the home folder, that one without ".."
// never leaves it, and that a path that is no path gets a 400.

var pathSeeds = []string{
	"notes/a.txt", "/etc/hostname", "", ".", "..", "../..", "a/../../b", "a/./b//c/", "\x00", "a\x00b",
	"~/x", "./-rf", "dir", "dir/", "fifo", "loop", "notes/a.txt/x", strings.Repeat("a/", 300),
	strings.Repeat("x", 300), "é/日本", "a\\..\\b", "%2e%2e/x", "..a", "a..", " ", "\n",
}

// FuzzResolvePath checks the path rule itself, for any string.
func FuzzResolvePath(f *testing.F) {
	for _, s := range pathSeeds {
		f.Add(s)
	}
	const home = "/home/user"
	s := New(Config{Home: home})
	f.Fuzz(func(t *testing.T, p string) {
		got, err := s.resolve("path", p)
		if p == "" || strings.IndexByte(p, 0) >= 0 {
			var ae *httpjson.Error
			if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Code != computerd.CodeBadRequest {
				t.Fatalf("resolve(%q) = %q, %v; want a 400", p, got, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("resolve(%q): %v", p, err)
		}
		if !filepath.IsAbs(got) || filepath.Clean(got) != got || strings.IndexByte(got, 0) >= 0 {
			t.Fatalf("resolve(%q) = %q, not a clean absolute path", p, got)
		}
		want := filepath.Clean(p)
		if !filepath.IsAbs(p) {
			want = filepath.Join(home, p)
		}
		if got != want {
			t.Fatalf("resolve(%q) = %q, want %q", p, got, want)
		}
		if filepath.IsLocal(p) && !within(home, got) {
			t.Fatalf("resolve(%q) = %q, outside %s for a local path", p, got, home)
		}
	})
}

// within reports whether p is root or below it.
func within(root, p string) bool {
	return p == root || strings.HasPrefix(p, root+"/")
}

// FuzzFileTools sends a fuzzed path to the read, stat, list, download and
// write tools of a real server. Paths that resolve outside the test's
// folder are checked by FuzzResolvePath only: they name the host's own
// files here. Whatever the path, the answer is never a 5xx and every error
// carries the envelope; an invalid path gets a 400; a write lands exactly
// at the resolved path.
func FuzzFileTools(f *testing.F) {
	for i, s := range pathSeeds {
		f.Add(uint8(i), s, "content")
	}
	root := f.TempDir()
	home := filepath.Join(root, "a", "b", "home")
	for _, d := range []string{home, filepath.Join(home, "notes"), filepath.Join(home, "dir")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			f.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(home, "notes", "a.txt"), []byte("héllo\n"), 0o644); err != nil {
		f.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "bin.dat"), []byte{0xff, 0xfe, 0}, 0o644); err != nil {
		f.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(home, "fifo"), 0o644); err != nil {
		f.Fatal(err)
	}
	if err := os.Symlink("loop", filepath.Join(home, "loop")); err != nil {
		f.Fatal(err)
	}
	tok := "fuzz-token-0123456789"
	s := New(Config{TokenHash: token.Hash(tok), Home: home, ComputerID: "c-fuzz"})
	f.Cleanup(func() { s.Close() })

	f.Fuzz(func(t *testing.T, op uint8, p, content string) {
		resolved, err := s.resolve("path", p)
		invalid := err != nil
		if !invalid && !within(root, resolved) {
			return
		}
		var req *http.Request
		q := "?" + url.Values{"path": {p}}.Encode()
		switch op % 5 {
		case 0:
			req = httptest.NewRequest("GET", "/v1/files/read"+q, nil)
		case 1:
			req = httptest.NewRequest("GET", "/v1/files/stat"+q, nil)
		case 2:
			req = httptest.NewRequest("GET", "/v1/files/list"+q, nil)
		case 3:
			req = httptest.NewRequest("GET", "/v1/files/download"+q, nil)
		case 4:
			body, _ := json.Marshal(computerd.WriteRequest{Path: p, Content: content, MkdirAll: op&0x80 != 0})
			req = httptest.NewRequest("PUT", "/v1/files/write", bytes.NewReader(body))
			var sent computerd.WriteRequest
			json.Unmarshal(body, &sent)
			content = sent.Content // as JSON carries it: invalid UTF-8 replaced
			if sent.Path != p {    // so is the path's
				if resolved, err = s.resolve("path", sent.Path); err != nil || !within(root, resolved) {
					return
				}
			}
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)

		if w.Code >= 500 {
			t.Fatalf("%s %q: status %d: %s", req.URL.Path, p, w.Code, w.Body.Bytes())
		}
		if w.Code >= 400 {
			var eb computerd.ErrorBody
			if err := json.Unmarshal(w.Body.Bytes(), &eb); err != nil || eb.Error.Code == "" || eb.Error.Message == "" {
				t.Fatalf("%s %q: status %d without the error envelope: %s", req.URL.Path, p, w.Code, w.Body.Bytes())
			}
		}
		if invalid {
			if w.Code != http.StatusBadRequest {
				t.Fatalf("%s %q: invalid path answered %d", req.URL.Path, p, w.Code)
			}
			return
		}
		if op%5 == 4 && w.Code == http.StatusOK {
			var res computerd.WriteResult
			if err := json.Unmarshal(w.Body.Bytes(), &res); err != nil || res.Path != resolved {
				t.Fatalf("write %q: answered %s, resolved %q", p, w.Body.Bytes(), resolved)
			}
			got, err := os.ReadFile(resolved)
			if err != nil || string(got) != content {
				t.Fatalf("write %q: %q holds %q, %v; want %q", p, resolved, got, err, content)
			}
			if !within(root, resolved) {
				t.Fatalf("write %q landed at %q, outside %s", p, resolved, root)
			}
		}
	})
}

// FuzzArchiveName checks the rule a restore applies to an entry's name (and
// a hard link's target): whatever it accepts is a clean relative name that
// stays inside the home, and anything absolute or with a ".." element is
// refused.
func FuzzArchiveName(f *testing.F) {
	for _, s := range pathSeeds {
		f.Add(s)
	}
	for _, s := range []string{"./", "./a/b/", ".//a", "a//b", "a/./b", "/", "//x", "a/..", "../", "...", "a/.../b",
		strings.Repeat("x", 256), strings.Repeat("x/", 2048), computerd.RestoreStagingPrefix + "x"} {
		f.Add(s)
	}
	const home = "/home/user"
	f.Fuzz(func(t *testing.T, name string) {
		got, err := archiveName(name)
		climbs := slices.Contains(strings.Split(name, "/"), "..")
		if (strings.HasPrefix(name, "/") || climbs || strings.IndexByte(name, 0) >= 0 || name == "") && err == nil {
			t.Fatalf("archiveName(%q) = %q, want an error", name, got)
		}
		if err != nil {
			return
		}
		if got == "" {
			return // the home itself
		}
		if !filepath.IsLocal(got) || path.Clean(got) != got || len(got) > computerd.MaxArchiveNameBytes {
			t.Fatalf("archiveName(%q) = %q, not a clean local name", name, got)
		}
		for e := range strings.SplitSeq(got, "/") {
			if e == ".." || e == "." || e == "" || len(e) > computerd.MaxArchiveNameElement {
				t.Fatalf("archiveName(%q) = %q: element %q", name, got, e)
			}
		}
		if j := filepath.Join(home, got); !strings.HasPrefix(j, home+"/") {
			t.Fatalf("archiveName(%q) = %q leaves the home: %s", name, got, j)
		}
	})
}
