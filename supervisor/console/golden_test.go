package console_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/berthdev/berth/providers/fake"
	"github.com/berthdev/berth/supervisor"
)

var update = flag.Bool("update", false, "rewrite the golden pages in testdata/golden")

// volatile are the parts of a page that change from run to run: tokens,
// ids, times. They are replaced before the comparison.
var volatile = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`name="csrf" value="[^"]+"`), `name="csrf" value="CSRF"`},
	{regexp.MustCompile(`\b(s|a|c|i|ag|att)_[a-z0-9]{16}\b`), `ID`},
	{regexp.MustCompile(`\bfake-[a-z0-9]+\b`), `MACHINE`},
	{regexp.MustCompile(`\b\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\b`), `TIME`},
	{regexp.MustCompile(`\b\d+ ms\b`), `N ms`},
}

func normalize(body string) string {
	for _, v := range volatile {
		body = v.re.ReplaceAllString(body, v.with)
	}
	return body
}

// TestPagesGolden draws each page for a fixed set of agents and sessions
// and compares it, volatile parts replaced, with testdata/golden; a
// mismatch is written to testdata/failed for review (go test -update
// accepts it).
func TestPagesGolden(t *testing.T) {
	e := newEnv(t, false)
	ctx := context.Background()
	lease := 300
	e.sup.Agent(t, "g1", "team", &supervisor.ConnectRequest{LeaseSeconds: &lease})
	e.sup.Agent(t, "g2", "team", nil)
	e.sup.Agent(t, "g3", "ops", &supervisor.ConnectRequest{LeaseSeconds: &lease})
	s1, err := e.sup.Service.Start(ctx, "g1")
	if err != nil {
		t.Fatal(err)
	}
	e.sup.Fake.SetFaults(fake.Faults{FailCreates: 1, CreateErr: fmt.Errorf("reset by peer")})
	if _, err := e.sup.Service.Start(ctx, "g3"); err == nil {
		t.Fatal("g3 started")
	}
	b := e.browser()
	b.signIn(e.sup.Token)
	pages := map[string]string{
		"computers": "/computers", "agent": "/agents/g1", "session": "/sessions/" + s1.ID,
		"attention": "/attention", "confirm": "/attention/g3/confirm", "lenders": "/lenders", "providers": "/providers",
	}
	for name, path := range pages {
		res, body := b.get(path)
		if res.StatusCode != 200 {
			t.Fatalf("%s: %d\n%s", path, res.StatusCode, body)
		}
		compareGolden(t, name, normalize(body))
	}
	res, body := e.browser().get("/signin")
	if res.StatusCode != 200 {
		t.Fatalf("/signin: %d", res.StatusCode)
	}
	compareGolden(t, "signin", normalize(body))
}

func compareGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name+".html")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err == nil && string(want) == got {
		return
	}
	failed := filepath.Join("testdata", "failed", name+".html")
	os.MkdirAll(filepath.Dir(failed), 0o755)
	os.WriteFile(failed, []byte(got), 0o644)
	t.Errorf("page %s differs from %s (read error: %v); the page is in %s (go test -update accepts it)", name, path, err, failed)
}
