package server

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"unicode/utf8"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/testkit"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func sha(b string) string {
	s := sha256.Sum256([]byte(b))
	return hex.EncodeToString(s[:])
}

// tempFiles lists the write temporaries left in dir.
func tempFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, ".*.berth-tmp"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestRead(t *testing.T) {
	h := newHarness(t)
	ctx := testContext(t)
	text := "héllo wörld 日本語 😀 end"
	writeFile(t, filepath.Join(h.home, "t.txt"), text)
	runes := []rune(text)

	for _, tc := range []struct {
		offset, limit int64
		want          string
		next          int64
		more          bool
	}{
		{0, 0, text, int64(len(runes)), false},
		{0, 5, "héllo", 5, true},
		{6, 5, "wörld", 11, true},
		{12, 3, "日本語", 15, true},
		{16, 1, "😀", 17, true},
		{18, 100, "end", 21, false},
		{int64(len(runes)), 10, "", 21, false},
		{100, 10, "", 21, false},
	} {
		res, err := h.client.Read(ctx, "t.txt", tc.offset, tc.limit)
		if err != nil {
			t.Fatalf("read %d+%d: %v", tc.offset, tc.limit, err)
		}
		if res.Content != tc.want || res.NextOffset != tc.next || res.Truncated != tc.more || res.Offset != tc.offset {
			t.Errorf("read %d+%d = %q next %d more %v; want %q next %d more %v",
				tc.offset, tc.limit, res.Content, res.NextOffset, res.Truncated, tc.want, tc.next, tc.more)
		}
		if res.Size != int64(len(text)) || res.Path != filepath.Join(h.home, "t.txt") {
			t.Errorf("size %d path %q", res.Size, res.Path)
		}
	}

	// Reading on from NextOffset gives the whole text back.
	var got strings.Builder
	for off := int64(0); ; {
		res, err := h.client.Read(ctx, filepath.Join(h.home, "t.txt"), off, 4)
		if err != nil {
			t.Fatal(err)
		}
		got.WriteString(res.Content)
		if !res.Truncated {
			break
		}
		off = res.NextOffset
	}
	if got.String() != text {
		t.Errorf("paged read = %q, want %q", got.String(), text)
	}

	// The default limit.
	long := strings.Repeat("é", computerd.DefaultReadChars+10)
	writeFile(t, filepath.Join(h.home, "long.txt"), long)
	res, err := h.client.Read(ctx, "long.txt", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := utf8.RuneCountInString(res.Content); n != computerd.DefaultReadChars || !res.Truncated || res.NextOffset != computerd.DefaultReadChars {
		t.Errorf("default read: %d characters, truncated %v, next %d", n, res.Truncated, res.NextOffset)
	}
}

func TestReadErrors(t *testing.T) {
	h := newHarness(t)
	ctx := testContext(t)
	writeFile(t, filepath.Join(h.home, "bin"), "abc\xffdef")
	writeFile(t, filepath.Join(h.home, "cut"), "ab\xe2\x82")
	writeFile(t, filepath.Join(h.home, "ok"), "ok")
	os.Mkdir(filepath.Join(h.home, "dir"), 0o755)

	_, err := h.client.Read(ctx, "bin", 0, 0)
	wantAPIError(t, err, http.StatusUnprocessableEntity, computerd.CodeNotUTF8, "byte offset 3")
	_, err = h.client.Read(ctx, "cut", 0, 0)
	wantAPIError(t, err, http.StatusUnprocessableEntity, computerd.CodeNotUTF8, "byte offset 2")
	_, err = h.client.Read(ctx, "dir", 0, 0)
	wantAPIError(t, err, http.StatusUnprocessableEntity, computerd.CodeIsDir)
	_, err = h.client.Read(ctx, "missing", 0, 0)
	wantAPIError(t, err, http.StatusNotFound, computerd.CodeNotFound)
	_, err = h.client.Read(ctx, "ok/below", 0, 0)
	wantAPIError(t, err, http.StatusNotFound, computerd.CodeNotFound)
	_, err = h.client.Read(ctx, "ok", 0, computerd.MaxReadChars+1)
	wantAPIError(t, err, http.StatusUnprocessableEntity, computerd.CodeTooLarge, "limit", strconv.Itoa(computerd.MaxReadChars))
	_, err = h.client.Read(ctx, "ok", -1, 0)
	wantAPIError(t, err, http.StatusBadRequest, computerd.CodeBadRequest, "offset")
	_, err = h.client.Read(ctx, "", 0, 0)
	wantAPIError(t, err, http.StatusBadRequest, computerd.CodeBadRequest, "path")
	_, err = h.client.Read(ctx, "/dev/null", 0, 0)
	wantAPIError(t, err, http.StatusBadRequest, computerd.CodeBadRequest, "regular")
}

func TestWrite(t *testing.T) {
	h := newHarness(t)
	ctx := testContext(t)
	content := "line one\nдва\n<&>\x00\n"

	res, err := h.client.Write(ctx, computerd.WriteRequest{Path: "a/b/new.txt", Content: content, MkdirAll: true})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(h.home, "a/b/new.txt")
	if res.Path != path || res.Bytes != int64(len(content)) || res.SHA256 != sha(content) {
		t.Errorf("result = %+v, want %s, %d bytes, %s", res, path, len(content), sha(content))
	}
	if b, _ := os.ReadFile(path); string(b) != content {
		t.Errorf("on disk: %q", b)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
		t.Errorf("new file mode %v, want 0644", fi.Mode().Perm())
	}

	// Replacing keeps the old mode unless one is given.
	os.Chmod(path, 0o600)
	if _, err := h.client.Write(ctx, computerd.WriteRequest{Path: path, Content: "v2"}); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("replaced file mode %v, want 0600 kept", fi.Mode().Perm())
	}
	if _, err := h.client.Write(ctx, computerd.WriteRequest{Path: path, Content: "v3", Mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o755 {
		t.Errorf("mode %v, want 0755", fi.Mode().Perm())
	}

	// A symbolic link stays and its target is replaced.
	link := filepath.Join(h.home, "link")
	os.Symlink(path, link)
	if _, err := h.client.Write(ctx, computerd.WriteRequest{Path: "link", Content: "via link"}); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Lstat(link); fi.Mode()&os.ModeSymlink == 0 {
		t.Error("the link was replaced by a file")
	}
	if b, _ := os.ReadFile(path); string(b) != "via link" {
		t.Errorf("link target holds %q", b)
	}

	if tmp := tempFiles(t, filepath.Dir(path)); len(tmp) > 0 {
		t.Errorf("temporary files left: %v", tmp)
	}

	// Without MkdirAll a missing folder is an error.
	_, err = h.client.Write(ctx, computerd.WriteRequest{Path: "no/such/dir/f", Content: "x"})
	wantAPIError(t, err, http.StatusNotFound, computerd.CodeNotFound)
	_, err = h.client.Write(ctx, computerd.WriteRequest{Path: "f", Content: "x", Mode: 0o4755})
	wantAPIError(t, err, http.StatusBadRequest, computerd.CodeBadRequest, "mode")
	_, err = h.client.Write(ctx, computerd.WriteRequest{Path: "big", Content: strings.Repeat("x", computerd.MaxWriteBytes+1)})
	wantAPIError(t, err, http.StatusRequestEntityTooLarge, computerd.CodeTooLarge, "content")
}

func TestWriteFailureKeepsOldFile(t *testing.T) {
	h := newHarness(t)
	ctx := testContext(t)
	path := filepath.Join(h.home, "keep.txt")
	writeFile(t, path, "old content")

	// A failure after the new content is written and synced.
	testHookBeforeRename = func(tmp string) error {
		if b, _ := os.ReadFile(tmp); string(b) != "new content" {
			t.Errorf("temporary file holds %q", b)
		}
		return errors.New("injected failure")
	}
	_, err := h.client.Write(ctx, computerd.WriteRequest{Path: path, Content: "new content"})
	testHookBeforeRename = nil
	wantAPIError(t, err, http.StatusInternalServerError, computerd.CodeInternal, "injected")
	if b, _ := os.ReadFile(path); string(b) != "old content" {
		t.Errorf("old file holds %q after a failed write", b)
	}
	if tmp := tempFiles(t, h.home); len(tmp) > 0 {
		t.Errorf("temporary files left: %v", tmp)
	}

	// A folder where the file should be.
	dir := filepath.Join(h.home, "adir")
	os.Mkdir(dir, 0o755)
	writeFile(t, filepath.Join(dir, "inside"), "x")
	_, err = h.client.Write(ctx, computerd.WriteRequest{Path: "adir", Content: "new"})
	wantAPIError(t, err, http.StatusUnprocessableEntity, computerd.CodeIsDir)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Errorf("folder changed: %v %v", fi, err)
	}
	if tmp := tempFiles(t, h.home); len(tmp) > 0 {
		t.Errorf("temporary files left: %v", tmp)
	}

	// A folder the user may not write to (root may write anywhere).
	if os.Geteuid() != 0 {
		ro := filepath.Join(h.home, "ro")
		os.Mkdir(ro, 0o755)
		writeFile(t, filepath.Join(ro, "f"), "old")
		os.Chmod(ro, 0o555)
		defer os.Chmod(ro, 0o755)
		_, err = h.client.Write(ctx, computerd.WriteRequest{Path: "ro/f", Content: "new"})
		wantAPIError(t, err, http.StatusForbidden, computerd.CodePermission)
		if b, _ := os.ReadFile(filepath.Join(ro, "f")); string(b) != "old" {
			t.Errorf("old file holds %q", b)
		}
		if tmp := tempFiles(t, ro); len(tmp) > 0 {
			t.Errorf("temporary files left: %v", tmp)
		}
	}
}

func TestUploadDownload(t *testing.T) {
	h := newHarness(t)
	ctx := testContext(t)
	data := make([]byte, 3<<20+17)
	rand.Read(data)

	res, err := h.client.Upload(ctx, "up/blob.bin", bytes.NewReader(data), 0o640)
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes != int64(len(data)) || res.SHA256 != sha(string(data)) {
		t.Errorf("upload result %+v", res)
	}
	path := filepath.Join(h.home, "up/blob.bin")
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want 0640", fi.Mode().Perm())
	}

	rc, err := h.client.Download(ctx, "up/blob.bin")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("download: %d bytes, err %v; want %d bytes back", len(got), err, len(data))
	}

	req, _ := http.NewRequestWithContext(ctx, "GET", h.ts.URL+"/v1/files/download?path=up/blob.bin", nil)
	req.Header.Set("Authorization", "Bearer "+h.token)
	resp, err := h.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.ContentLength != int64(len(data)) {
		t.Errorf("Content-Length %d, want %d", resp.ContentLength, len(data))
	}

	_, err = h.client.Download(ctx, "up")
	wantAPIError(t, err, http.StatusUnprocessableEntity, computerd.CodeIsDir)
	_, err = h.client.Download(ctx, "nothing")
	wantAPIError(t, err, http.StatusNotFound, computerd.CodeNotFound)
	for _, mode := range []string{"1777", "rw", "-1"} {
		req, _ := http.NewRequestWithContext(ctx, "PUT", h.ts.URL+"/v1/files/upload?path=m&mode="+mode, strings.NewReader("x"))
		req.Header.Set("Authorization", "Bearer "+h.token)
		resp, err := h.ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("upload with mode %q: %d, want 400", mode, resp.StatusCode)
		}
	}
}

func TestUploadBrokenBodyKeepsOldFile(t *testing.T) {
	h := newHarness(t)
	ctx := testContext(t)
	path := filepath.Join(h.home, "keep.bin")
	writeFile(t, path, "old")

	body := io.MultiReader(strings.NewReader(strings.Repeat("x", 1<<20)), iotest.ErrReader(errors.New("sender died")))
	if _, err := h.client.Upload(ctx, "keep.bin", body, 0); err == nil {
		t.Fatal("upload with a broken body: nil error")
	}
	testkit.EventuallyContext(t, ctx, "temporary file removed", func() bool { return len(tempFiles(t, h.home)) == 0 })
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Errorf("old file holds %d bytes after a broken upload", len(b))
	}
}

func TestStatList(t *testing.T) {
	h := newHarness(t)
	ctx := testContext(t)
	writeFile(t, filepath.Join(h.home, "b.txt"), "12345")
	os.Mkdir(filepath.Join(h.home, "a"), 0o750)
	os.Symlink("b.txt", filepath.Join(h.home, "c"))

	fi, err := h.client.Stat(ctx, "b.txt")
	if err != nil {
		t.Fatal(err)
	}
	if fi.Name != "b.txt" || fi.Type != "file" || fi.Size != 5 || fi.Mode != 0o644 || fi.ModTime == 0 {
		t.Errorf("stat = %+v", fi)
	}
	if fi, _ := h.client.Stat(ctx, "c"); fi.Type != "symlink" {
		t.Errorf("stat of a link: %+v", fi)
	}
	_, err = h.client.Stat(ctx, "nothing")
	wantAPIError(t, err, http.StatusNotFound, computerd.CodeNotFound)

	l, err := h.client.List(ctx, ".")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range l.Entries {
		names = append(names, e.Name+":"+e.Type)
	}
	if got := strings.Join(names, " "); got != "a:dir b.txt:file c:symlink" || l.Total != 3 || l.Truncated || l.Path != h.home {
		t.Errorf("list = %s (total %d, truncated %v, path %s)", got, l.Total, l.Truncated, l.Path)
	}
	_, err = h.client.List(ctx, "b.txt")
	wantAPIError(t, err, http.StatusBadRequest, computerd.CodeBadRequest, "not a directory")

	// A folder over the bound: the first entries by name, and the count.
	h.srv.maxList = 100
	many := filepath.Join(h.home, "many")
	os.Mkdir(many, 0o755)
	n := 5*h.srv.maxList + 7 // several batches
	for i := n - 1; i >= 0; i-- {
		f, err := os.Create(filepath.Join(many, fmt.Sprintf("f%05d", i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	l, err = h.client.List(ctx, "many")
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Entries) != h.srv.maxList || l.Total != n || !l.Truncated ||
		l.Entries[0].Name != "f00000" || l.Entries[len(l.Entries)-1].Name != fmt.Sprintf("f%05d", h.srv.maxList-1) {
		t.Errorf("big list: %d entries, total %d, truncated %v", len(l.Entries), l.Total, l.Truncated)
	}
}
