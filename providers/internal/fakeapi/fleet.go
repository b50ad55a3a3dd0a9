package fakeapi

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
)

// T is what a fake needs from a test.
type T interface {
	Cleanup(func())
	TempDir() string
}

// Fleet holds a fake's machines by id, each with its computer, and closes
// every computer when the test ends. Its methods are safe to call at once;
// a fake changes a machine in place only inside Do.
type Fleet[M any] struct {
	computer func(*M) *Computer
	labels   func(*M) map[string]string

	mu   sync.Mutex
	byID map[string]*M
}

// NewFleet returns an empty fleet whose machines' computers and labels
// (or metadata, or tags) computer and labels return.
func NewFleet[M any](t T, computer func(*M) *Computer, labels func(*M) map[string]string) *Fleet[M] {
	f := &Fleet[M]{computer: computer, labels: labels, byID: map[string]*M{}}
	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, m := range f.byID {
			f.computer(m).Close()
		}
		f.byID = map[string]*M{}
	})
	return f
}

// Add holds m under id.
func (f *Fleet[M]) Add(id string, m *M) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.byID[id] = m
}

// Get returns a copy of the machine id, and whether there is one.
func (f *Fleet[M]) Get(id string) (M, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.byID[id]
	if !ok {
		var zero M
		return zero, false
	}
	return *m, true
}

// Remove removes the machine id and closes its computer; it returns the
// machine, and whether there was one.
func (f *Fleet[M]) Remove(id string) (M, bool) {
	f.mu.Lock()
	m, ok := f.byID[id]
	delete(f.byID, id)
	f.mu.Unlock()
	if !ok {
		var zero M
		return zero, false
	}
	f.computer(m).Close()
	return *m, true
}

// Do runs fn with the machine id (nil when there is none) under the
// fleet's lock, so that fn may change it; remove true removes it and
// closes its computer.
func (f *Fleet[M]) Do(id string, fn func(m *M) (remove bool)) {
	f.mu.Lock()
	m := f.byID[id]
	remove := fn(m) && m != nil
	if remove {
		delete(f.byID, id)
	}
	f.mu.Unlock()
	if remove {
		f.computer(m).Close()
	}
}

// Matching returns copies of the machines whose labels hold every pair of
// want, sorted by id.
func (f *Fleet[M]) Matching(want map[string]string) []M {
	f.mu.Lock()
	defer f.mu.Unlock()
	ids := make([]string, 0, len(f.byID))
	for id, m := range f.byID {
		if Matches(f.labels(m), want) {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	out := make([]M, 0, len(ids))
	for _, id := range ids {
		out = append(out, *f.byID[id])
	}
	return out
}

// All returns copies of every machine, sorted by id.
func (f *Fleet[M]) All() []M { return f.Matching(nil) }

// Exists reports whether a machine is labelled label=value.
func (f *Fleet[M]) Exists(label, value string) bool {
	return len(f.Matching(map[string]string{label: value})) > 0
}

// Matches reports whether labels hold every pair of want.
func Matches(labels, want map[string]string) bool {
	for k, v := range want {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// RandomHex returns n random bytes in hex, for the ids and tokens a fake
// makes up.
func RandomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Edge serves machines' public URLs (https://<label>.<domain>) on a
// listener of its own, as a provider's proxy or tunnel edge does, and
// forwards each request to the machine's computer.
type Edge struct {
	srv    *httptest.Server
	domain string
	tr     *http.Transport // to the computers
}

// NewEdge starts an edge for domain. route names the computer (its base
// URL) that a host label stands for; where there is none, it writes the
// edge's own refusal and returns "". The edge is closed when the test
// ends.
func NewEdge(t T, domain string, route func(w http.ResponseWriter, r *http.Request, label string) string) *Edge {
	e := &Edge{domain: domain, tr: &http.Transport{}}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		label, ok := strings.CutSuffix(host, "."+domain)
		if !ok {
			http.Error(w, "unknown host", http.StatusBadGateway)
			return
		}
		if base := route(w, r, label); base != "" {
			ReverseTo(base, e.tr).ServeHTTP(w, r)
		}
	}))
	t.Cleanup(func() {
		e.srv.Close()
		e.tr.CloseIdleConnections()
	})
	return e
}

// Transport sends requests for the edge's domain to its listener and the
// rest normally; the provider under test uses it.
func (e *Edge) Transport() *http.Transport {
	return HostTransport("."+e.domain, e.srv.Listener.Addr().String())
}

// CreateAt sorts the requests of an API whose machines are created with
// POST path and removed with DELETE.
func CreateAt(path string) func(*http.Request) Kind {
	return func(r *http.Request) Kind {
		switch {
		case r.Method == http.MethodPost && r.URL.Path == path:
			return Create
		case r.Method == http.MethodDelete:
			return Delete
		}
		return Other
	}
}
