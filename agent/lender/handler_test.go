package lender

import (
	"bytes"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/berthdev/berth/agent/ledger"
	"github.com/berthdev/berth/lending"
)

// TestComputerdUnreachableLogs: a proxied call to a computerd that does not
// answer is a 502 with the lending error code; it is a warning in the
// lender's log, except for the supervisor's /healthz polls while a computer
// starts, which are expected to fail until it answers.
func TestComputerdUnreachableLogs(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close() // nothing answers there now

	var logs bytes.Buffer // the proxy logs in ServeHTTP's goroutine
	c := &core{
		log:       slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
		transport: &http.Transport{},
		running:   map[string]*computer{"c1": {s: ledger.Session{ComputerID: "c1"}, endpoint: dead}},
	}
	h := (&supervisorAPI{c}).Handler()
	for _, tc := range []struct {
		path string
		warn bool
	}{
		{"/healthz", false},
		{"/v1/exec", true},
	} {
		logs.Reset()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/v1/computers/c1"+lending.ComputerdPrefix+tc.path, nil))
		if w.Code != http.StatusBadGateway || !strings.Contains(w.Body.String(), lending.CodeUnavailable) {
			t.Errorf("%s: %d %s, want 502 %s", tc.path, w.Code, w.Body, lending.CodeUnavailable)
		}
		got := logs.String()
		if warned := strings.Contains(got, "level=WARN") && strings.Contains(got, "computerd unreachable"); warned != tc.warn {
			t.Errorf("%s: warned %v, want %v; log: %q", tc.path, warned, tc.warn, got)
		}
	}
}
