package relayclient

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestCheckURL(t *testing.T) {
	for _, tc := range []struct {
		url      string
		insecure bool
		ok       bool
	}{
		{"wss://relay.example.com/v1/agents/connect", false, true},
		{"https://relay.example.com/v1/agents/connect", false, true},
		{"ws://127.0.0.1:8081/v1/agents/connect", false, true},
		{"ws://127.3.2.1:8081/v1/agents/connect", false, true},
		{"ws://[::1]:8081/v1/agents/connect", false, true},
		{"ws://localhost:8081/v1/agents/connect", false, true},
		{"http://LOCALHOST:8080", false, true},
		{"ws://192.0.2.10:8081/v1/agents/connect", false, false},
		{"http://192.0.2.10:8080", false, false},
		{"ws://relay.example.com/v1/agents/connect", false, false},
		{"ws://0.0.0.0:8081/v1/agents/connect", false, false},
		{"ws://localhost.example.com/v1/agents/connect", false, false},
		{"ws://192.0.2.10:8081/v1/agents/connect", true, true},
		{"http://192.0.2.10:8080", true, true},
		{"ftp://127.0.0.1/", true, false},
		{"ws:///v1/agents/connect", true, false},
		// Several relays: every one must pass.
		{"wss://r1.example.com/v1/agents/connect, wss://r2.example.com/v1/agents/connect", false, true},
		{"wss://r1.example.com/v1/agents/connect,ws://r2.example.com/v1/agents/connect", false, false},
		{"ws://r1.example.com/v1/agents/connect,ws://r2.example.com/v1/agents/connect", true, true},
		{" , ", false, false},
		{"", false, false},
		{strings.Repeat("wss://r.example.com/v1/agents/connect,", 17), false, false},
	} {
		err := CheckURL(tc.url, tc.insecure)
		if (err == nil) != tc.ok {
			t.Errorf("CheckURL(%q, %v) = %v, want ok %v", tc.url, tc.insecure, err, tc.ok)
		}
	}
	err := CheckURL("ws://192.0.2.10:8081/v1/agents/connect", false)
	if !errors.Is(err, ErrInsecureURL) || !strings.Contains(err.Error(), "ws://192.0.2.10:8081/v1/agents/connect") ||
		!strings.Contains(err.Error(), "--insecure") || !strings.Contains(err.Error(), "wss://") {
		t.Errorf("refusal = %v; want ErrInsecureURL naming the URL, wss:// and --insecure", err)
	}
}

// refusingClient records dials and fails them.
func refusingClient(dials *atomic.Int32) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) {
		dials.Add(1)
		return nil, errors.New("no network in this test")
	}}}
}

// Run refuses a plain ws:// URL to a host that is not loopback at once,
// without dialling or retrying.
func TestRunRefusesInsecureURL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var dials atomic.Int32
	err := Run(ctx, Config{URL: "ws://192.0.2.10:8081/v1/agents/connect", Token: "tok",
		Handler: http.NotFoundHandler(), HTTPClient: refusingClient(&dials)})
	if !errors.Is(err, ErrInsecureURL) || !strings.Contains(err.Error(), "--insecure") {
		t.Fatalf("Run = %v; want ErrInsecureURL naming --insecure", err)
	}
	if _, err := Connect(ctx, Config{URL: "ws://192.0.2.10:8081/v1/agents/connect", HTTPClient: refusingClient(&dials)}); !errors.Is(err, ErrInsecureURL) {
		t.Fatalf("Connect = %v; want ErrInsecureURL", err)
	}
	if n := dials.Load(); n != 0 {
		t.Errorf("%d dials; want none", n)
	}
}

// With Insecure, Run dials the non-loopback URL and warns at its start.
func TestRunInsecureWarns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var dials atomic.Int32
	var logs bytes.Buffer
	runCtx, stop := context.WithCancel(ctx)
	err := Run(runCtx, Config{URL: "ws://192.0.2.10:8081/v1/agents/connect", Token: "tok", Insecure: true,
		Handler: http.NotFoundHandler(), HTTPClient: refusingClient(&dials),
		Logger:       slog.New(slog.NewTextHandler(&logs, nil)),
		OnDisconnect: func(error) { stop() }})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v; want context.Canceled after the first attempt", err)
	}
	if dials.Load() == 0 {
		t.Errorf("no dial with Insecure set")
	}
	if s := logs.String(); !strings.Contains(s, "level=WARN") || !strings.Contains(s, "INSECURE") || !strings.Contains(s, "unencrypted=true") {
		t.Errorf("no warning for --insecure in the log:\n%s", s)
	}
}
