package browser

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/target"

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

// TestClosedTabNotAdopted: Target.closeTarget answers before the browser
// drops the target, so a call right after a close can still see it
// listed. The driver must not take it back as a tab the page opened (a
// later call would then attach to a target that is gone).
func TestClosedTabNotAdopted(t *testing.T) {
	ext := startExternal(t)
	ctx := testkit.ContextTimeout(t, 2*time.Minute)
	d, err := Dial(ctx, ext.ws, DriverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if tabs, err := d.Tabs(ctx, TabsRequest{Action: TabsOpen}); err != nil || len(tabs.Tabs) != 2 {
		t.Fatalf("open = %+v, %v", tabs, err)
	}
	// The moment after the driver closed tab 1: it left the list and is
	// marked gone, while the browser still lists it.
	d.mu.Lock()
	closing := d.tabs[1]
	closing.cancel()
	d.tabs, d.sel = d.tabs[:1], 0
	d.gone = map[target.ID]bool{closing.id: true}
	d.mu.Unlock()
	if tabs, err := d.Tabs(ctx, TabsRequest{}); err != nil || len(tabs.Tabs) != 1 {
		t.Fatalf("list while the closed tab is still listed = %+v, %v; want 1 tab", tabs, err)
	}
	// Once the browser drops it, the driver forgets it.
	if _, err := cdp.Call(ctx, d.browser, target.CloseTarget, target.CloseTargetParams{TargetID: closing.id}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "the closed tab forgotten", func() bool {
		if _, err := d.Tabs(ctx, TabsRequest{}); err != nil {
			t.Fatal(err)
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		return len(d.gone) == 0
	})
}
