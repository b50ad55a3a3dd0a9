package httpjson_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/berthdev/berth/internal/httpjson"
)

// TestCaller: the token and headers go out, a JSON answer comes back, an
// error answer is the server's *Error (or the fallback code with the
// body's text), and an answer over its limit is refused.
func TestCaller(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" || r.Header.Get("X-Extra") != "1" {
			httpjson.WriteError(w, http.StatusUnauthorized, "unauthorized", "no token")
			return
		}
		switch r.URL.Path {
		case "/echo":
			var in map[string]string
			if err := httpjson.Decode(w, r, 1<<10, &in); err != nil {
				httpjson.WriteError(w, http.StatusBadRequest, "bad_request", err.Error())
				return
			}
			httpjson.Write(w, http.StatusOK, in)
		case "/refused":
			httpjson.WriteError(w, http.StatusConflict, "busy", "try later")
		case "/page":
			http.Error(w, "gateway page", http.StatusBadGateway)
		case "/big":
			w.Write([]byte(`"` + strings.Repeat("x", 100) + `"`))
		}
	}))
	defer srv.Close()
	c := httpjson.Caller{Base: srv.URL + "/", Token: "tok", Header: http.Header{"X-Extra": {"1"}}, Code: "internal", Name: "test"}
	var out map[string]string
	if err := c.Call(t.Context(), "POST", "/echo", map[string]string{"a": "b"}, &out, 1<<10); err != nil || out["a"] != "b" {
		t.Fatalf("echo: %v, %v", out, err)
	}
	var e *httpjson.Error
	if err := c.Call(t.Context(), "GET", "/refused", nil, nil, 1<<10); !errors.As(err, &e) || e.Status != 409 || e.Code != "busy" || e.Message != "try later" {
		t.Errorf("refused: %v", err)
	}
	if err := c.Call(t.Context(), "GET", "/page", nil, nil, 1<<10); !errors.As(err, &e) || e.Status != 502 || e.Code != "internal" || e.Message != "gateway page" {
		t.Errorf("a page that is not the envelope: %#v", err)
	}
	var s string
	if err := c.Call(t.Context(), "GET", "/big", nil, &s, 50); !errors.Is(err, httpjson.ErrAnswerTooLarge) {
		t.Errorf("an answer over its limit: %v", err)
	}
	bad := c
	bad.Token = "wrong"
	if err := bad.Call(t.Context(), "GET", "/echo", nil, nil, 1<<10); !errors.As(err, &e) || e.Status != 401 {
		t.Errorf("wrong token: %v", err)
	}
}
