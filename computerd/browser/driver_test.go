package browser

import (
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"
)

// TestDialExternal drives a browser started outside, as the supervisor
// drives a hosted session, and leaves it running on Close.
func TestDialExternal(t *testing.T) {
	ext := startExternal(t)
	srv := pages(t)
	ctx := testkit.ContextTimeout(t, 2*time.Minute)
	d, err := Dial(ctx, ext.ws, DriverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.Navigate(ctx, NavigateRequest{URL: srv.URL + "/form"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Title != "Form" || p.Tab != 0 {
		t.Fatalf("navigate = %+v", p)
	}
	s, err := d.Snapshot(ctx, SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("snapshot:\n%s", s.Tree)
	if !strings.Contains(s.Tree, `heading "Sign in" [level=1]`) {
		t.Fatalf("no heading in snapshot:\n%s", s.Tree)
	}
	d.Close()
	if !ext.alive() {
		t.Fatal("Close stopped the external browser")
	}
	// A second driver finds the same page.
	d2, err := Dial(ctx, ext.ws, DriverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	p, err = d2.Wait(ctx, WaitRequest{Text: "Sign in", TimeoutMS: 1000})
	if err != nil || p.Title != "Form" {
		t.Fatalf("wait after redial = %+v, %v", p, err)
	}
}
