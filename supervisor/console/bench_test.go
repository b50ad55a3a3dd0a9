package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/fake"
	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/console"
	"github.com/berthdev/berth/supervisor/store"
	"github.com/berthdev/berth/supervisor/supervisortest"
)

// BenchmarkComputersPage draws the Computers page (and its live table)
// for 1,000 connected agents, each with a running session, on SQLite:
// the server's time from request to the last byte, p50 reported as
// p50-ms (target: at most 50 ms).
//
//	go test ./supervisor/console -run '^$' -bench ComputersPage -benchtime 50x
func BenchmarkComputersPage(b *testing.B) {
	const agents = 1000
	sup := supervisortest.Start(b, supervisortest.Options{})
	ctx := context.Background()
	now := time.Now()
	for i := range agents {
		id := fmt.Sprintf("agent-%04d", i)
		sup.Agent(b, id, fmt.Sprintf("ws-%d", i%10), &supervisor.ConnectRequest{})
		x, err := sup.Store.Reserve(ctx, store.Reservation{
			Session: store.Session{ID: "s-" + id, AgentID: id, ComputerID: "c-" + id, AttemptID: "a-" + id, Provider: fake.ID, Image: "headless"},
			Now:     now, MinSeconds: 60,
		})
		if err != nil {
			b.Fatal(err)
		}
		y := x
		y.State, y.MachineID = store.StateRunning, "m-"+id
		if err := sup.Store.UpdateSession(ctx, y, x.State); err != nil {
			b.Fatal(err)
		}
	}
	con, err := console.New(console.Options{Service: sup.Service, Store: sup.Store, Token: sup.Token,
		Providers: map[string]providers.Provider{fake.ID: sup.Fake}, DefaultProvider: fake.ID})
	if err != nil {
		b.Fatal(err)
	}
	// Sign in once, through the handler.
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/signin", strings.NewReader(url.Values{"key": {sup.Token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	con.ServeHTTP(rec, req)
	cookies := rec.Result().Cookies()
	if len(cookies) != 1 {
		b.Fatalf("sign in: %d", rec.Code)
	}
	for _, path := range []string{"/computers", "/live/computers"} {
		b.Run(strings.ReplaceAll(strings.TrimPrefix(path, "/"), "/", "-"), func(b *testing.B) {
			var times []time.Duration
			size := 0
			for b.Loop() {
				req := httptest.NewRequest("GET", path, nil)
				req.AddCookie(cookies[0])
				rec := httptest.NewRecorder()
				start := time.Now()
				con.ServeHTTP(rec, req)
				times = append(times, time.Since(start))
				if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "agent-0999") {
					b.Fatalf("%s: %d", path, rec.Code)
				}
				size = rec.Body.Len()
			}
			slices.Sort(times)
			b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(size)/1024, "KiB")
		})
	}
}
