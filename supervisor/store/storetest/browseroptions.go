package storetest

import (
	"testing"

	"github.com/berthdev/berth/supervisor/store"
)

// testBrowserOptions: a hosted browser connection's options are stored as
// written, and a connection written without them reads back with
// recording off and no proxy.
func testBrowserOptions(t *testing.T, s store.Store) {
	ctx := testContext(t)
	connect(t, s, "plain", "ws", "browserbase", 300, 3600)
	c, err := s.GetConnection(ctx, "plain")
	if err != nil {
		t.Fatal(err)
	}
	if c.BrowserRecording || c.BrowserProxyCountry != "" || c.BrowserEvaluate {
		t.Errorf("plain connection = %+v, want recording off and no proxy", c)
	}
	if err := s.CreateAgent(ctx, store.Agent{ID: "rec", Name: "rec", Workspace: "ws", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	want := store.Connection{AgentID: "rec", Provider: "browserbase", Image: "headless", LeaseSeconds: 300, DailySeconds: 3600,
		BrowserRecording: true, BrowserProxyCountry: "de", BrowserEvaluate: true, CreatedAt: t0, Credentials: []byte("sealed")}
	if err := s.CreateConnection(ctx, want); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetConnection(ctx, "rec")
	if err != nil {
		t.Fatal(err)
	}
	if !got.BrowserRecording || got.BrowserProxyCountry != "de" || !got.BrowserEvaluate {
		t.Errorf("connection = %+v, want recording on and the proxy in de", got)
	}
	all, err := s.Connections(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range all {
		if c.AgentID == "rec" && (!c.BrowserRecording || c.BrowserProxyCountry != "de") {
			t.Errorf("Connections lists %+v, want recording on and the proxy in de", c)
		}
	}
}
