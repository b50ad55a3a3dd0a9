package fakeapi

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/berthdev/berth/internal/token"
)

type machine struct {
	id     string
	labels map[string]string
	c      *Computer
}

// TestFleetAndEdge holds machines with real computers, finds them by
// label, reaches one through the edge by its host name, and closes the
// computer of a removed machine.
func TestFleetAndEdge(t *testing.T) {
	f := NewFleet(t, func(m *machine) *Computer { return m.c }, func(m *machine) map[string]string { return m.labels })
	for _, id := range []string{"b", "a"} {
		c, err := StartComputer(t.TempDir(), token.Hash("tok"), nil)
		if err != nil {
			t.Fatal(err)
		}
		f.Add(id, &machine{id: id, labels: map[string]string{"k": "v", "id": id}, c: c})
	}
	if all := f.All(); len(all) != 2 || all[0].id != "a" || all[1].id != "b" {
		t.Errorf("All: %+v, want a and b in order", all)
	}
	if !f.Exists("id", "a") || f.Exists("id", "c") || f.Exists("k", "") {
		t.Error("Exists answers wrong")
	}
	if m := f.Matching(map[string]string{"k": "v", "id": "b"}); len(m) != 1 || m[0].id != "b" {
		t.Errorf("Matching: %+v", m)
	}
	e := NewEdge(t, "edge.test", func(w http.ResponseWriter, r *http.Request, label string) string {
		m, ok := f.Get(label)
		if !ok {
			http.Error(w, "no such machine", http.StatusNotFound)
			return ""
		}
		return m.c.URL
	})
	tr := e.Transport()
	defer tr.CloseIdleConnections()
	get := func(host string) int {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", "http://"+host+"/healthz", nil)
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", host, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := get("a.edge.test"); st != http.StatusOK {
		t.Errorf("a through the edge: %d", st)
	}
	if st := get("zz.edge.test"); st != http.StatusNotFound {
		t.Errorf("unknown machine: %d, want the route's 404", st)
	}
	m, _ := f.Get("a")
	removed := false
	f.Do("a", func(*machine) bool { removed = true; return true })
	if _, ok := f.Get("a"); ok || !removed {
		t.Error("Do did not remove a")
	}
	if _, err := http.Get(m.c.URL + "/healthz"); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("the removed machine's computer still answers: %v", err)
	}
	if _, ok := f.Remove("a"); ok {
		t.Error("removed a twice")
	}
}
