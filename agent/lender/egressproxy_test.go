package lender

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestProbeEgressProxy: the probe passes against the proxy the container
// serves (407 without credentials) and fails against a server that is not
// a proxy, and where nothing listens.
func TestProbeEgressProxy(t *testing.T) {
	ctx := testContext(t, time.Minute)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- ServeEgressProxy(sctx, ln, EgressProxyConfig{Secret: []byte(strings.Repeat("k", 40)), Logger: testLogger(t)})
	}()
	defer func() {
		stop()
		<-done
	}()
	if err := ProbeEgressProxy(ctx, ln.Addr().String()); err != nil {
		t.Fatalf("probe of the egress proxy: %v", err)
	}
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer web.Close()
	if err := ProbeEgressProxy(ctx, strings.TrimPrefix(web.URL, "http://")); err == nil || !strings.Contains(err.Error(), "want 407") {
		t.Fatalf("probe of a plain web server: %v", err)
	}
	addr := web.Listener.Addr().String()
	web.Close()
	if err := ProbeEgressProxy(ctx, addr); err == nil {
		t.Fatal("probe where nothing listens passed")
	}
	if err := ServeEgressProxy(ctx, ln, EgressProxyConfig{Secret: []byte("short")}); err == nil {
		t.Fatal("a short secret was taken")
	}
}
