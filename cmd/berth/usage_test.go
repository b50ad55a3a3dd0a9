package main

import (
	"net/http"
	"net/url"
	"testing"
)

func TestUsageTable(t *testing.T) {
	s := newSupervisor(t)
	s.on("GET /v1/usage", http.StatusOK, `{"by":"workspace","from":"2025-01-01T00:00:00Z","to":"2025-02-01T00:00:00Z",
		"rows":[{"key":"default","seconds":5400,"sessions":7},{"key":"lab","seconds":60,"sessions":1}]}`)
	run(t, "", "usage", "--by", "workspace", "--from", "2025-01-01", "--to", "2025-01-31").want(t, 0, ""+
		"sessions started from 2025-01-01T00:00:00Z to 2025-02-01T00:00:00Z\n"+
		"WORKSPACE  SESSIONS  SECONDS  TIME\n"+
		"default    7         5400     1h30m0s\n"+
		"lab        1         60       1m0s\n"+
		"TOTAL      8         5460     1h31m0s\n", "")
	q, err := url.ParseQuery(s.only(t).Query)
	if err != nil {
		t.Fatal(err)
	}
	// A day given to --to is included: the period ends at the next midnight.
	if q.Get("by") != "workspace" || q.Get("from") != "2025-01-01T00:00:00Z" || q.Get("to") != "2025-02-01T00:00:00Z" {
		t.Errorf("query = %v", q)
	}
}

func TestUsageDefaults(t *testing.T) {
	s := newSupervisor(t)
	s.on("GET /v1/usage", http.StatusOK, `{"by":"provider","rows":[]}`)
	run(t, "", "usage").want(t, 0, "no sessions\n", "")
	if q := s.only(t).Query; q != "by=provider" {
		t.Errorf("query = %q", q)
	}
}

func TestUsageRFC3339(t *testing.T) {
	s := newSupervisor(t)
	s.on("GET /v1/usage", http.StatusOK, `{"by":"provider","rows":[{"key":"docker","seconds":90,"sessions":2}]}`)
	r := run(t, "", "usage", "--from", "2025-01-01T12:00:00+02:00", "--json")
	if r.code != 0 {
		t.Fatalf("%+v", r)
	}
	// The answer is printed as it came, without fields it lacked.
	jsonEqual(t, r.stdout, `{"by":"provider","rows":[{"key":"docker","seconds":90,"sessions":2}]}`)
	q, _ := url.ParseQuery(s.only(t).Query)
	if q.Get("from") != "2025-01-01T10:00:00Z" || q.Has("to") {
		t.Errorf("query = %v", q)
	}
}
