package objstore

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"
)

// tempFiles lists the temporary files under root.
func tempFiles(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), tmpPrefix) {
			out = append(out, p)
		}
		return nil
	})
	return out
}

func TestLocal(t *testing.T) {
	l, err := NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	testStore(t, l, func(t *testing.T) {
		if left := tempFiles(t, l.Root()); len(left) > 0 {
			t.Errorf("a failed upload left temporary files: %v", left)
		}
	})
}

func TestLocalLayout(t *testing.T) {
	dir := t.TempDir()
	l, err := NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t)
	if _, err := l.Put(ctx, "agents/a1/home", strings.NewReader("x"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "agents.d", "a1.d", "home.obj")); err != nil {
		t.Fatalf("object file: %v", err)
	}
	fi, err := os.Stat(filepath.Join(dir, "agents.d"))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("folder mode: %v %v", fi.Mode(), err)
	}
	// Files that are not objects are left out of listings.
	os.WriteFile(filepath.Join(dir, "agents.d", "stray"), []byte("x"), 0o600)
	os.WriteFile(filepath.Join(dir, "agents.d", ".put-123"), []byte("x"), 0o600)
	infos, err := l.List(ctx, "")
	if err != nil || len(infos) != 1 || infos[0].Key != "agents/a1/home" {
		t.Fatalf("list = %+v, %v", infos, err)
	}
}

func TestLocalSweepsStaleTempFiles(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "a.d")
	os.MkdirAll(sub, 0o700)
	stale, fresh := filepath.Join(sub, tmpPrefix+"1"), filepath.Join(sub, tmpPrefix+"2")
	os.WriteFile(stale, []byte("partial"), 0o600)
	os.WriteFile(fresh, []byte("partial"), 0o600)
	old := time.Now().Add(-2 * staleAfter)
	os.Chtimes(stale, old, old)
	if _, err := NewLocal(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale temporary file kept: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("fresh temporary file (maybe a running upload) removed: %v", err)
	}
}
