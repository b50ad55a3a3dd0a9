// Package apitest is a scripted stand-in for the supervisor's REST API, for
// the tests of its clients (the Go client, the CLI, the MCP server). It
// records every request and answers each route ("METHOD /path") from a
// queue of answers set for it, the last of which repeats; a route with no
// answers gets the ones set for AnyRoute, and without those a 404 in the
// API's error envelope.
package apitest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// AnyRoute names the answers of routes that have none of their own.
const AnyRoute = "*"

// Request is one request the server received.
type Request struct {
	Method, Path, RawPath, Query string
	Auth, Key, ContentType       string // Authorization, Idempotency-Key, Content-Type
	Holder                       string // Berth-Desktop-Holder
	Body                         string
}

// Answer is the reply to one request: Status, Header and Body (its
// Content-Type application/json unless Header sets one). With Drop set the
// server closes the connection instead. With Hold set it first waits for
// Hold to close, after closing Held (when set): a request in flight that
// the test releases.
type Answer struct {
	Status int
	Body   string
	Header map[string]string
	Drop   bool
	Held   chan struct{}
	Hold   chan struct{}
}

// Server is a scripted supervisor on loopback.
type Server struct {
	URL string

	mu      sync.Mutex
	reqs    []Request
	answers map[string][]Answer
}

// New starts a Server, closed when t ends.
func New(t testing.TB) *Server {
	t.Helper()
	s := &Server{answers: map[string][]Answer{}}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// On sets the answers of route, given in turn; the last one repeats.
func (s *Server) On(route string, answers ...Answer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answers[route] = answers
}

// Then adds an answer after those route has.
func (s *Server) Then(route string, a Answer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answers[route] = append(s.answers[route], a)
}

// OK sets one 200 answer with body for route.
func (s *Server) OK(route, body string) { s.On(route, Answer{Status: http.StatusOK, Body: body}) }

// Requests returns the requests received so far, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// Last returns the last request, failing the test when there is none.
func (s *Server) Last(t testing.TB) Request {
	t.Helper()
	reqs := s.Requests()
	if len(reqs) == 0 {
		t.Fatal("no request reached the supervisor")
	}
	return reqs[len(reqs)-1]
}

// Only returns the one request received, failing the test when there were
// more or none.
func (s *Server) Only(t testing.TB) Request {
	t.Helper()
	reqs := s.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1: %+v", len(reqs), reqs)
	}
	return reqs[0]
}

func (s *Server) next(route string) Answer {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := route
	if len(s.answers[key]) == 0 {
		key = AnyRoute
	}
	q := s.answers[key]
	if len(q) == 0 {
		return Answer{Status: http.StatusNotFound, Body: `{"error":{"code":"not_found","message":"no route for ` + route + `"}}`}
	}
	if len(q) > 1 {
		s.answers[key] = q[1:]
	}
	return q[0]
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.reqs = append(s.reqs, Request{
		Method: r.Method, Path: r.URL.Path, RawPath: r.URL.EscapedPath(), Query: r.URL.RawQuery,
		Auth: r.Header.Get("Authorization"), Key: r.Header.Get("Idempotency-Key"),
		ContentType: r.Header.Get("Content-Type"), Holder: r.Header.Get("Berth-Desktop-Holder"), Body: string(body),
	})
	s.mu.Unlock()
	a := s.next(r.Method + " " + r.URL.Path)
	if a.Held != nil {
		close(a.Held)
	}
	if a.Hold != nil {
		<-a.Hold
	}
	if a.Drop {
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
		return
	}
	for k, v := range a.Header {
		w.Header().Set(k, v)
	}
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(a.Status)
	io.WriteString(w, a.Body)
}
