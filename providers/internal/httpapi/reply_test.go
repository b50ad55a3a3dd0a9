package httpapi

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestReply hands the answer's header to the caller, on success and on
// an error answer alike.
func TestReply(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Next-Token", "p2")
		if r.URL.Path == "/busy" {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Write([]byte(`[]`))
	}))
	t.Cleanup(srv.Close)
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	cl := &Client{BaseURL: srv.URL, HTTP: hc, Timeout: 5 * time.Second, KeyName: "apiKey", Auth: func(http.Header, string) {}}
	h := http.Header{}
	if _, err := cl.Do(t.Context(), "k", Call{Method: "GET", Path: "/list", Reply: h}, nil); err != nil || h.Get("X-Next-Token") != "p2" {
		t.Errorf("list: %v, header %v", err, h)
	}
	h = http.Header{}
	if code, err := cl.Do(t.Context(), "k", Call{Method: "GET", Path: "/busy", Reply: h}, nil); code != http.StatusTooManyRequests || err == nil || h.Get("Retry-After") != "7" {
		t.Errorf("busy: %d %v, header %v", code, err, h)
	}
	if _, err := cl.Do(t.Context(), "k", Call{Method: "GET", Path: "/list"}, nil); err != nil {
		t.Errorf("without Reply: %v", err)
	}
}
