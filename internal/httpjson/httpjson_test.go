package httpjson

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
)

type request struct {
	Name  string `json:"name"`
	Count int    `json:"count,omitempty"`
}

func TestDecode(t *testing.T) {
	const limit = 64
	tests := []struct {
		name     string
		body     string
		want     request
		msg      string // "" when the body is accepted
		tooLarge bool
		empty    bool
	}{
		{name: "ok", body: `{"name":"a","count":2}`, want: request{Name: "a", Count: 2}},
		{name: "spaces around", body: " \n{\"name\":\"a\"}\n ", want: request{Name: "a"}},
		{name: "empty", body: ``, msg: "body: a JSON object is required", empty: true},
		{name: "unknown field", body: `{"name":"a","colour":"red"}`, msg: `body: json: unknown field "colour"`},
		{name: "wrong type", body: `{"name":"a","count":"two"}`, msg: "count: must be a JSON int"},
		{name: "trailing data", body: `{"name":"a"}{"name":"b"}`, msg: "body: trailing data after the JSON object"},
		{name: "not JSON", body: `name=a`, msg: "body: invalid character 'a' in literal null (expecting 'u')"},
		{name: "cut short", body: `{"name":`, msg: "body: unexpected EOF"},
		{name: "oversize", body: `{"name":"` + strings.Repeat("x", limit) + `"}`, msg: "body: larger than 64 bytes", tooLarge: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(tt.body))
			var got request
			err := Decode(httptest.NewRecorder(), r, limit, &got)
			if tt.msg == "" {
				if err != nil || got != tt.want {
					t.Fatalf("Decode = %+v, %v; want %+v", got, err, tt.want)
				}
				return
			}
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("Decode error = %v (%T), want a *DecodeError", err, err)
			}
			if de.Message != tt.msg || de.TooLarge != tt.tooLarge || de.Empty != tt.empty {
				t.Fatalf("Decode error = %+v, want message %q, tooLarge %v, empty %v", de, tt.msg, tt.tooLarge, tt.empty)
			}
			wantStatus := http.StatusBadRequest
			if tt.tooLarge {
				wantStatus = http.StatusRequestEntityTooLarge
			}
			if de.Status() != wantStatus {
				t.Fatalf("status = %d, want %d", de.Status(), wantStatus)
			}
		})
	}
}

func TestDecodeOptional(t *testing.T) {
	tests := []struct {
		name    string
		body    io.Reader
		want    request
		wantErr bool
	}{
		{name: "no body", body: nil},
		{name: "empty body, unknown length", body: io.MultiReader()},
		{name: "a body", body: strings.NewReader(`{"name":"a"}`), want: request{Name: "a"}},
		{name: "a bad body", body: strings.NewReader(`{"nom":"a"}`), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/", tt.body)
			if _, ok := tt.body.(*strings.Reader); !ok {
				r.ContentLength = -1
			}
			var got request
			err := DecodeOptional(httptest.NewRecorder(), r, 1024, &got)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("DecodeOptional = %+v, %v; want %+v, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestWrite(t *testing.T) {
	tests := []struct {
		name   string
		status int
		v      any
		body   string
	}{
		{name: "object", status: http.StatusCreated, v: request{Name: "a<b>&c"}, body: `{"name":"a<b>&c"}` + "\n"},
		{name: "no content", status: http.StatusNoContent, v: request{Name: "a"}, body: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			Write(w, tt.status, tt.v)
			if w.Code != tt.status || w.Body.String() != tt.body || w.Header().Get("Content-Type") != "application/json" {
				t.Fatalf("Write = %d %q %q", w.Code, w.Header().Get("Content-Type"), w.Body.String())
			}
		})
	}
}

func TestWriteError(t *testing.T) {
	w := httptest.NewRecorder()
	WriteError(w, http.StatusNotFound, "not_found", "no route GET /x")
	const want = `{"error":{"code":"not_found","message":"no route GET /x"}}` + "\n"
	if w.Code != http.StatusNotFound || w.Body.String() != want || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("WriteError = %d %q %q", w.Code, w.Header().Get("Content-Type"), w.Body.String())
	}
}

func TestReadError(t *testing.T) {
	tests := []struct {
		name  string
		body  string
		limit int64
		want  Error
	}{
		{name: "envelope", body: `{"error":{"code":"not_found","message":"no such file"}}`, limit: 1024,
			want: Error{Status: 404, Code: "not_found", Message: "no such file"}},
		{name: "envelope without a code", body: `{"error":{"message":"x"}}`, limit: 1024,
			want: Error{Status: 404, Message: `{"error":{"message":"x"}}`}},
		{name: "plain text", body: "  404 page not found\n", limit: 1024,
			want: Error{Status: 404, Message: "404 page not found"}},
		{name: "other JSON", body: `{"status":"down"}`, limit: 1024,
			want: Error{Status: 404, Message: `{"status":"down"}`}},
		{name: "empty", body: "", limit: 1024, want: Error{Status: 404}},
		{name: "oversize envelope", body: `{"error":{"code":"not_found","message":"no such file"}}`, limit: 10,
			want: Error{Status: 404, Message: `{"error":{`}},
		{name: "oversize text", body: strings.Repeat("x", 100), limit: 8,
			want: Error{Status: 404, Message: "xxxxxxxx"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := &http.Response{StatusCode: 404, Body: io.NopCloser(strings.NewReader(tt.body))}
			e, err := ReadError(resp, tt.limit)
			if err != nil || *e != tt.want {
				t.Fatalf("ReadError = %+v, %v; want %+v", e, err, tt.want)
			}
		})
	}
}

func TestReadErrorBrokenBody(t *testing.T) {
	broken := errors.New("connection reset")
	resp := &http.Response{StatusCode: 502, Body: io.NopCloser(io.MultiReader(strings.NewReader("bad "), iotest.ErrReader(broken)))}
	e, err := ReadError(resp, 1024)
	if !errors.Is(err, broken) || e.Status != 502 || e.Message != "bad" {
		t.Fatalf("ReadError = %+v, %v", e, err)
	}
}

func TestErrorRoundTrip(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, http.StatusConflict, "conflict", "already running")
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	e, err := ReadError(resp, 1<<10)
	if err != nil || *e != (Error{Status: http.StatusConflict, Code: "conflict", Message: "already running"}) {
		t.Fatalf("ReadError = %+v, %v", e, err)
	}
	if e.Error() != "conflict: already running" {
		t.Fatalf("Error() = %q", e.Error())
	}
}
