package console

import (
	"net/http/httptest"
	"testing"
)

// TestOriginBehindProxy: with TLS ended at a proxy, a form posted from the
// supervisor's https public URL is its own; other origins are not, and the
// cookie is Secure.
func TestOriginBehindProxy(t *testing.T) {
	const public = "https://berth.example.com"
	for _, c := range []struct {
		origin, fetchSite, public string
		want                      bool
	}{
		{"", "", "", true},
		{"http://berth.internal:8080", "same-origin", "", true}, // the request's own host
		{"https://berth.example.com", "same-origin", public, true},
		{"https://berth.example.com", "same-origin", "", false},
		{"https://evil.example", "", public, false},
		{"https://berth.example.com.evil.example", "", public, false},
		{"", "cross-site", public, false},
		{"", "same-site", public, false},
	} {
		r := httptest.NewRequest("POST", "http://berth.internal:8080/agents", nil)
		if c.origin != "" {
			r.Header.Set("Origin", c.origin)
		}
		if c.fetchSite != "" {
			r.Header.Set("Sec-Fetch-Site", c.fetchSite)
		}
		if got := sameOrigin(r, c.public); got != c.want {
			t.Errorf("Origin %q, Sec-Fetch-Site %q, public URL %q: same origin %v, want %v", c.origin, c.fetchSite, c.public, got, c.want)
		}
	}
	w := httptest.NewRecorder()
	setCookie(w, httptest.NewRequest("GET", "http://berth.internal:8080/", nil), public, "id", 0)
	if ck := w.Result().Cookies(); len(ck) != 1 || !ck[0].Secure || !ck[0].HttpOnly {
		t.Errorf("cookie behind a TLS proxy: %+v, want Secure and HttpOnly", ck)
	}
	w = httptest.NewRecorder()
	setCookie(w, httptest.NewRequest("GET", "http://127.0.0.1:8080/", nil), "", "id", 0)
	if ck := w.Result().Cookies(); len(ck) != 1 || ck[0].Secure {
		t.Errorf("cookie over plain HTTP with no public URL: %+v, want not Secure", ck)
	}
}
