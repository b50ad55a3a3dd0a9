package main

import (
	"io"
	"math"
	"strings"
	"testing"
)

const sample = `goos: linux
pkg: github.com/berthdev/berth/e2e
BenchmarkColdStart-2   	      10	 825498674 ns/op	       616.9 bare-create+start-ms	         0.73 ratio	         451.0 start-to-exec-ms
BenchmarkWarmStart-2   	      50	 825498674 ns/op	       216.9 bare-create+start-ms	         0.04131 ratio	         6.491 warm-start-to-exec-ms
--- BENCH: BenchmarkWarmStart-2
    e2e_test.go:119: time=... level=INFO msg=started
BenchmarkLiveViewLatency-2      	      10	        66.70 base-frame-interval-ms	        80.10 latency-median-ms	       149.0 latency-p90-ms	         1.201 ratio
pkg: github.com/berthdev/berth/egress
BenchmarkProxyVsDirect/body=1KiB-2   	    5000	         0 ns/op	     81000 direct-ns/op	        84.00 p50-added-µs	    165000 proxy-ns/op	         2.04 ratio
BenchmarkEgressPeers/connect-1GiB/vs=direct-2   	       1	  1000 ns/op	      2169 direct-MB/s	       985.0 berth-MB/s	         0.45 ratio
pkg: github.com/berthdev/berth/supervisor/store/sqlstore
BenchmarkLiveSession/sqlite-2   	   10000	     88000 ns/op
pkg: github.com/berthdev/berth/supervisor/api
BenchmarkExecCalls/postgres-2   	    4000	    157134 ns/op	      6360 calls/s	         0.088 direct-p99-ms	         0.968 overhead-p99-ms	         0.152 p50-ms	         1.06 p99-ms
pkg: github.com/berthdev/berth/egress
BenchmarkConnectThroughput-2   	      20	  22643614 ns/op	 740.93 MB/s	      2232 direct-MB/s	      1109 proxy-MB/s	         0.497 ratio
--- FAIL: BenchmarkFiles
    bench_test.go:344: POST write_file: status 422, want 200
BenchmarkEncoder-2   	--- FAIL: BenchmarkEncoder-2
--- BENCH: BenchmarkLive
    --- FAIL: BenchmarkLive/sub
        live_test.go:9: no frame
FAIL	github.com/berthdev/berth/e2e	14.980s
`

func TestParse(t *testing.T) {
	rows, failures := parse(strings.NewReader(sample), io.Discard)
	type want struct {
		bench, unit string
		ours, base  float64
		ratio       float64
	}
	wants := []want{
		{"BenchmarkColdStart", "start-to-exec-ms", 451, 616.9, 0.73},
		{"BenchmarkWarmStart", "warm-start-to-exec-ms", 6.491, 216.9, 0.04131},
		{"BenchmarkLiveViewLatency", "latency-median-ms", 80.1, 66.7, 1.201},
		{"BenchmarkLiveViewLatency", "latency-p90-ms", 149, 0, 0},
		{"BenchmarkProxyVsDirect/body=1KiB", "p50-added-µs", 84, 0, 0},
		{"BenchmarkProxyVsDirect/body=1KiB", "proxy-ns/op", 165000, 81000, 2.04},
		{"BenchmarkEgressPeers/connect-1GiB/vs=direct", "berth-MB/s", 985, 2169, 0.45},
		{"BenchmarkLiveSession/sqlite", "ns/op", 88000, 0, 0},
		{"BenchmarkExecCalls/postgres", "calls/s", 6360, 0, 0},
		{"BenchmarkExecCalls/postgres", "overhead-p99-ms", 0.968, 0, 0},
		{"BenchmarkExecCalls/postgres", "p50-ms", 0.152, 0, 0},
		{"BenchmarkExecCalls/postgres", "p99-ms", 1.06, 0.088, 1.06 / 0.088},
		{"BenchmarkConnectThroughput", "proxy-MB/s", 1109, 2232, 0.497},
	}
	if len(rows) != len(wants) {
		t.Fatalf("%d rows, want %d: %+v", len(rows), len(wants), rows)
	}
	for i, w := range wants {
		r := rows[i]
		base := 0.0
		if r.base != nil {
			base = r.base.value
		}
		if r.bench != w.bench || r.unit != w.unit || r.ours != w.ours || base != w.base || math.Abs(r.ratio-w.ratio) > 1e-9 {
			t.Errorf("row %d: %s %s %g base %g ratio %g, want %+v", i, r.bench, r.unit, r.ours, base, r.ratio, w)
		}
	}
	if len(failures) != 6 || !strings.Contains(failures[1], "status 422") || !strings.Contains(failures[2], "BenchmarkEncoder") || !strings.Contains(failures[4], "no frame") {
		t.Errorf("failures %q", failures)
	}
	var out strings.Builder
	// The 1 GiB CONNECT misses its target; the table says so.
	if missed := table(&out, rows); missed != 1 {
		t.Errorf("%d targets missed, want 1:\n%s", missed, out.String())
	}
	for _, want := range []string{"| e2e WarmStart ", "216.9 bare-create+start-ms", "at most 40 ms (p50 over 50 starts): met", "ratio at least 0.65x: NOT MET"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

func TestSeveralBaselinesAndRelativeTarget(t *testing.T) {
	const in = `pkg: github.com/berthdev/berth/agent/lender
BenchmarkLentExec-2   	     300	   4000000 ns/op	      1500 direct-µs/op	     31000 docker-exec-µs/op	      2400 relayed-µs/op	         1.60 ratio
pkg: github.com/berthdev/berth/relay/relayserver
BenchmarkRoundTrip-2   	   10000	         0 ns/op	        40.0 direct-µs/req	      1100 relay-µs/req	        27.5 ratio
pkg: github.com/berthdev/berth/e2e
BenchmarkLiveViewFirstFrame-2   	       3	         0 ns/op	      1600 base-cold-first-frame-ms	        10.5 computerd-idle-rss-MB	         0.25 ratio	       400.0 warm-first-frame-ms
`
	rows, failures := parse(strings.NewReader(in), io.Discard)
	if len(failures) != 0 {
		t.Fatalf("failures %q", failures)
	}
	type want struct {
		bench, unit, base string
		ratio             float64
	}
	wants := []want{
		{"BenchmarkLentExec", "relayed-µs/op", "direct-µs/op", 1.60},
		{"BenchmarkLentExec", "relayed-µs/op", "docker-exec-µs/op", 2400.0 / 31000},
		{"BenchmarkRoundTrip", "relay-µs/req", "direct-µs/req", 27.5},
		{"BenchmarkLiveViewFirstFrame", "computerd-idle-rss-MB", "", 0},
		{"BenchmarkLiveViewFirstFrame", "warm-first-frame-ms", "base-cold-first-frame-ms", 0.25},
	}
	if len(rows) != len(wants) {
		t.Fatalf("%d rows, want %d: %+v", len(rows), len(wants), rows)
	}
	for i, w := range wants {
		r := rows[i]
		base := ""
		if r.base != nil {
			base = r.base.unit
		}
		if r.bench != w.bench || r.unit != w.unit || base != w.base || math.Abs(r.ratio-w.ratio) > 1e-9 {
			t.Errorf("row %d: %s %s base %q ratio %g, want %+v", i, r.bench, r.unit, base, r.ratio, w)
		}
	}
	if !rows[1].extra || rows[0].extra {
		t.Errorf("the second baseline's row is not the extra one: %+v", rows[:2])
	}
	var out strings.Builder
	// The relayed exec keeps 1.5x + 1 ms of the direct call (3,250 µs); the
	// relay round trip does not (1,060 µs); the cold first frame misses
	// 1.5 s though the warm one keeps it.
	if missed := table(&out, rows); missed != 2 {
		t.Errorf("%d targets missed, want 2:\n%s", missed, out.String())
	}
	for _, want := range []string{
		"at most 1.5x the baseline + 1000 µs (here 3250.0 µs): met",
		"at most 1.5x the baseline + 1000 µs (here 1060.0 µs): NOT MET",
		"| 31000 docker-exec-µs/op ",
		"at most 1500 ms, ours and baseline: NOT MET",
		"at most 15 MB: met",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Count(out.String(), "here ") != 2 {
		t.Errorf("the docker-exec row has the direct call's target:\n%s", out.String())
	}
}
