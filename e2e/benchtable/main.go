// Command benchtable turns `go test -bench` output into the one table that
// `make bench` prints: a row per figure a benchmark reports, with the
// baseline measured in the same run, their ratio, and the target.
//
// It reads the benchmark output on stdin. By convention a benchmark reports
// its baseline under a unit starting with "bare-", "direct-", "docker-" or
// "base-", and may report "ratio" (ours divided by the baseline, in the
// units shown; the median of paired runs where the benchmark pairs them).
// Every other unit is one of our figures and gets a row: its baseline is
// the baseline with the same unit after the first '-' (proxy-MB/s and
// direct-MB/s), or the only baseline the benchmark has; a single baseline
// left over with a reported ratio goes to the figure that ratio fits. A benchmark that
// reports nothing of its own shows its ns/op. New benchmarks need no change
// here; a target is added to the targets table below. A benchmark with one
// figure and several baselines (relayed-µs/op against direct-µs/op and
// docker-exec-µs/op) gets a row per baseline: the first is the one its
// unit names, which a reported ratio and the figure's target belong to;
// the others have their ratio computed and a target only when one is
// listed under "figure vs baseline-unit".
//
// Failures (FAIL lines, a failed benchmark's messages, panics) are shown
// after the table and make the exit status 1; other lines (logs) are
// dropped, or passed to stderr with -v.
package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"
)

// target is what a figure must reach, checked on its row: the figure, the
// baseline and the ratio measured. bound, when set, names the limit the
// row's own baseline gives.
type target struct {
	text  string
	ok    func(r row) bool
	bound func(r row) string
}

func atMost(v float64, unit string) target {
	return target{text: fmt.Sprintf("at most %g %s", v, unit), ok: func(r row) bool { return r.ours <= v }}
}

func atLeast(v float64, unit string) target {
	return target{text: fmt.Sprintf("at least %g %s", v, unit), ok: func(r row) bool { return r.ours >= v }}
}

func ratioAtMost(v float64) target {
	return target{text: fmt.Sprintf("ratio at most %gx", v), ok: func(r row) bool { return r.hasRatio && r.ratio <= v }}
}

func ratioAtLeast(v float64) target {
	return target{text: fmt.Sprintf("ratio at least %gx", v), ok: func(r row) bool { return r.hasRatio && r.ratio >= v }}
}

// timesPlus is a limit relative to the baseline: at most k times it plus
// add (in the figure's unit), as in "1.5x + 1 ms of the direct call".
func timesPlus(k, add float64, unit string) target {
	limit := func(r row) float64 { return k*r.base.value + add }
	return target{
		text:  fmt.Sprintf("at most %gx the baseline + %g %s", k, add, unit),
		ok:    func(r row) bool { return r.base != nil && r.ours <= limit(r) },
		bound: func(r row) string { return fmt.Sprintf("here %s %s", num(limit(r)), unit) },
	}
}

// bothAtMost is a limit that the figure and its baseline must both keep
// (the first frame, warm and cold).
func bothAtMost(v float64, unit string) target {
	return target{text: fmt.Sprintf("at most %g %s, ours and baseline", v, unit), ok: func(r row) bool {
		return r.ours <= v && r.base != nil && r.base.value <= v
	}}
}

// targets by package, benchmark (without the -N suffix) and unit.
var targets = map[string]target{
	"e2e BenchmarkWarmStart warm-start-to-exec-ms":                           atMost(40, "ms (p50 over 50 starts)"),
	"e2e BenchmarkColdStart start-to-exec-ms":                                ratioAtMost(1.15),
	"e2e BenchmarkWake wake-to-exec-ms":                                      atMost(500, "ms (p50, 100 MB home)"),
	"e2e BenchmarkWarmWake warm-wake-to-exec-ms":                             atMost(500, "ms (p50, 100 MB home)"),
	"apiserver BenchmarkSleep1GiB sleep-MB/s":                                atLeast(300, "MB/s"),
	"apiserver BenchmarkSleep1GiB sleep-s":                                   ratioAtMost(1.5),
	"apiserver BenchmarkCheckpointExec checkpoint-exec-p50-ms":               ratioAtMost(2),
	"apiserver BenchmarkWake1GiB wake-s":                                     ratioAtMost(2),
	"e2e BenchmarkExec rest-exec-ms":                                         ratioAtMost(0.2),
	"e2e BenchmarkExecMCP mcp-exec-ms":                                       ratioAtMost(0.2),
	"e2e BenchmarkExec computerd-rss-MB":                                     atMost(15, "MB"),
	"e2e BenchmarkDensity computers-started":                                 atLeast(100, "computers"),
	"e2e BenchmarkDensity computers-that-fit":                                atLeast(100, "computers"),
	"e2e BenchmarkDensity supervisor-rss-MB":                                 atMost(200, "MB"),
	"apiserver BenchmarkTwoSupervisors/own-cores calls/s":                    ratioAtLeast(1.6),
	"apiserver BenchmarkExecCalls/sqlite calls/s":                            atLeast(2000, "calls/s"),
	"apiserver BenchmarkExecCalls/sqlite overhead-p99-ms":                    atMost(5, "ms"),
	"apiserver BenchmarkExecCalls/postgres overhead-p99-ms":                  atMost(5, "ms"),
	"egress BenchmarkProxyVsDirect/body=1KiB p50-added-µs":                   atMost(1000, "µs"),
	"egress BenchmarkEgressPeers/connect-1GiB/vs=direct berth-MB/s":          ratioAtLeast(0.65),
	"egress BenchmarkEgressPeers/connect-1GiB/vs=squid berth-cpu-ms/GiB":     ratioAtMost(1),
	"egress BenchmarkEgressPeers/small-get/vs=squid berth-added-p50-µs":      atMost(100, "µs"),
	"egress BenchmarkEgressPeers/small-get/vs=tinyproxy berth-added-p50-µs":  atMost(100, "µs"),
	"egress BenchmarkEgressPeers/small-get/vs=relay berth-added-p50-µs":      atMost(100, "µs"),
	"egress BenchmarkEgressPeers/concurrent-200/vs=squid berth-total-MB/s":   ratioAtLeast(1),
	"egress BenchmarkEgressPeers/concurrent-200/vs=squid berth-max-stall-ms": atMost(1000, "ms (the longest wait for a byte)"),
	"relayserver BenchmarkDownload100MB relay-MB/s":                          ratioAtLeast(0.5),
	"relayserver BenchmarkIdleAgentMemory relay-total-B/agent":               atMost(65536, "B"),
	"docker BenchmarkColdStart/network-pool create-ms":                       ratioAtMost(1.15),
	"relayserver BenchmarkRoundTrip relay-µs/req":                            timesPlus(1.5, 1000, "µs"),
	"lender BenchmarkLentExec relayed-µs/op":                                 timesPlus(1.5, 1000, "µs"),
	"e2e BenchmarkLiveViewLatency latency-median-ms":                         atMost(100, "ms"),
	"e2e BenchmarkLiveViewEncoderCPU h264-cpu-%":                             atMost(20, "percent of one core"),
	"e2e BenchmarkLiveViewFirstFrame warm-first-frame-ms":                    bothAtMost(1500, "ms"),
	"e2e BenchmarkLiveViewFirstFrame computerd-idle-rss-MB":                  atMost(15, "MB"),
	"e2e BenchmarkDesktopScreenshot rest-screenshot-ms":                      atMost(100, "ms (p50, 1280x720 PNG)"),
	"e2e BenchmarkDesktopClick rest-click-ms":                                atMost(15, "ms (p50)"),
	"e2e BenchmarkDesktopWarmStart warm-desktop-start-to-screenshot-ms":      atMost(100, "ms (p50)"),
	"e2e BenchmarkPortPreview added-ms":                                      atMost(2, "ms (p50 added over direct)"),
	"e2e BenchmarkPortPreview preview-MB/s":                                  ratioAtLeast(0.5),
	"e2e BenchmarkBrowserSnapshot rest-snapshot-ms":                          atMost(300, "ms (p50, 1,000 elements)"),
	"console BenchmarkComputersPage/computers p50-ms":                        atMost(50, "ms (p50, 1,000 agents with sessions)"),
	"console BenchmarkComputersPage/live-computers p50-ms":                   atMost(50, "ms (p50, 1,000 agents with sessions)"),
	"e2e BenchmarkBurstStarts start-p50-ms":                                  atMost(50, "ms (p50 of 50 concurrent starts to first exec)"),
	"e2e BenchmarkBurstStarts start-p99-ms":                                  atMost(500, "ms (p99 of 50 concurrent starts to first exec)"),
	"e2e BenchmarkSustainedStarts sustained-start-p99-ms":                    ratioAtMost(1.2),
	"e2e BenchmarkIdleSupervisor idle-cpu-%":                                 atMost(2, "percent of one core, 1,000 sessions"),
	"e2e BenchmarkIdleSupervisor rss-MB":                                     atMost(200, "MB, 1,000 sessions"),
	"e2e BenchmarkConsoleFirstPaint first-contentful-paint-ms":               atMost(500, "ms (p50, 1,000 agents with sessions)"),
}

var baselinePrefixes = []string{"bare-", "direct-", "docker-", "base-"}

func isBaseline(unit string) bool {
	for _, p := range baselinePrefixes {
		if strings.HasPrefix(unit, p) {
			return true
		}
	}
	return false
}

// tail is a unit without its first dash-separated word.
func tail(unit string) string {
	if _, t, ok := strings.Cut(unit, "-"); ok {
		return t
	}
	return unit
}

type metric struct {
	value float64
	unit  string
}

type row struct {
	pkg, bench, unit string
	ours             float64
	base             *metric
	ratio            float64
	hasRatio         bool
	// extra marks a further row of a figure, against another baseline.
	extra bool
}

// key names the row's target in targets.
func (r row) key() string {
	k := r.pkg + " " + r.bench + " " + r.unit
	if r.extra {
		k += " vs " + r.base.unit
	}
	return k
}

var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(-\d+)?\s+(\d+)\s+(.*)$`)

// parse reads go test output: rows of benchmark figures, the failures, and
// the other lines.
func parse(r io.Reader, other io.Writer) (rows []row, failures []string) {
	pkg := ""
	inFail := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		indented := strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t")
		switch {
		case inFail && indented:
			// The messages that say why, not the logs before them.
			if !strings.Contains(line, " level=INFO ") && !strings.Contains(line, " level=DEBUG ") {
				failures = append(failures, line)
			}
			continue
		case strings.HasPrefix(line, "pkg: "):
			pkg = path.Base(strings.TrimSpace(strings.TrimPrefix(line, "pkg: ")))
			inFail = false
			continue
		case strings.HasPrefix(line, "FAIL") || strings.Contains(line, "--- FAIL") || strings.HasPrefix(line, "panic:"):
			// A failed sub-benchmark's line is indented, and a benchmark
			// that fails at once prints it after its own name.
			failures = append(failures, line)
			inFail = !strings.HasPrefix(line, "FAIL")
			continue
		}
		inFail = false
		m := benchLine.FindStringSubmatch(line)
		if m == nil {
			fmt.Fprintln(other, line)
			continue
		}
		rows = append(rows, rowsOf(pkg, m[1], strings.Fields(m[4]))...)
	}
	return rows, failures
}

// rowsOf makes the rows of one benchmark result from its value-unit pairs.
func rowsOf(pkg, bench string, fields []string) []row {
	var ours, bases []metric
	var nsop *metric
	ratio, hasRatio := 0.0, false
	for i := 0; i+1 < len(fields); i += 2 {
		v, err := strconv.ParseFloat(fields[i], 64)
		if err != nil {
			continue
		}
		u := fields[i+1]
		switch {
		case u == "ratio":
			ratio, hasRatio = v, true
		case u == "ns/op":
			nsop = &metric{v, u}
		case u == "B/op" || u == "allocs/op" || u == "MB/s":
			// Go's own figures; MB/s is ns/op over the bytes set.
		case isBaseline(u):
			bases = append(bases, metric{v, u})
		default:
			ours = append(ours, metric{v, u})
		}
	}
	if len(ours) == 0 && nsop != nil && nsop.value != 0 {
		ours = append(ours, *nsop)
	}
	// A baseline goes to the figure it names exactly (direct-p99-ms is the
	// baseline of p99-ms), else to the one figure with the same unit after
	// the first word (direct-MB/s of proxy-MB/s).
	rows := make([]row, len(ours))
	taken := make([]bool, len(bases))
	for i, o := range ours {
		rows[i] = row{pkg: pkg, bench: bench, unit: o.unit, ours: o.value}
		for j := range bases {
			if !taken[j] && tail(bases[j].unit) == o.unit {
				rows[i].base, taken[j] = &bases[j], true
			}
		}
	}
	for i, o := range ours {
		for j := range bases {
			if rows[i].base == nil && !taken[j] && tail(bases[j].unit) == tail(o.unit) {
				rows[i].base, taken[j] = &bases[j], true
			}
		}
	}
	if len(ours) == 1 && len(bases) == 1 {
		rows[0].base = &bases[0]
	}
	// One baseline left over and a reported ratio: it is the baseline of
	// the figure whose own ratio to it comes closest.
	if left := untaken(taken); hasRatio && len(left) == 1 && !anyBase(rows) && bases[left[0]].value != 0 {
		b, best := &bases[left[0]], -1
		for i := range rows {
			d := math.Abs(rows[i].ours/b.value - ratio)
			if best < 0 || d < math.Abs(rows[best].ours/b.value-ratio) {
				best = i
			}
		}
		rows[best].base = b
	}
	// The reported ratio belongs to the one row with a baseline; other rows
	// with a baseline get theirs computed.
	withBase := 0
	for _, r := range rows {
		if r.base != nil {
			withBase++
		}
	}
	for i := range rows {
		r := &rows[i]
		switch {
		case r.base != nil && withBase == 1 && hasRatio:
			r.ratio, r.hasRatio = ratio, true
		case r.base != nil && r.base.value != 0:
			r.ratio, r.hasRatio = r.ours/r.base.value, true
		case len(rows) == 1 && hasRatio:
			r.ratio, r.hasRatio = ratio, true
		}
	}
	// One figure and baselines still left: a row against each.
	if len(ours) == 1 {
		for _, j := range untaken(taken) {
			if rows[0].base == &bases[j] {
				continue
			}
			x := row{pkg: pkg, bench: bench, unit: ours[0].unit, ours: ours[0].value, base: &bases[j], extra: true}
			if bases[j].value != 0 {
				x.ratio, x.hasRatio = x.ours/bases[j].value, true
			}
			rows = append(rows, x)
		}
	}
	return rows
}

func untaken(taken []bool) []int {
	var out []int
	for i, t := range taken {
		if !t {
			out = append(out, i)
		}
	}
	return out
}

func anyBase(rows []row) bool {
	for _, r := range rows {
		if r.base != nil {
			return true
		}
	}
	return false
}

func num(v float64) string {
	switch a := v; {
	case a == 0:
		return "0"
	case a >= 10000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// table renders rows, in the order they came, as an aligned Markdown table.
func table(w io.Writer, rows []row) (missed int) {
	cells := [][]string{{"benchmark", "figure", "ours", "baseline (same run)", "ratio", "target"}}
	for _, r := range rows {
		base, ratio, tgt := "", "", ""
		if r.base != nil {
			base = num(r.base.value) + " " + r.base.unit
		}
		if r.hasRatio {
			ratio = num(r.ratio) + "x"
		}
		if t, ok := targets[r.key()]; ok {
			verdict := "met"
			if !t.ok(r) {
				verdict = "NOT MET"
				missed++
			}
			tgt = t.text
			if t.bound != nil && r.base != nil {
				tgt += " (" + t.bound(r) + ")"
			}
			tgt += ": " + verdict
		}
		cells = append(cells, []string{r.pkg + " " + strings.TrimPrefix(r.bench, "Benchmark"), r.unit, num(r.ours), base, ratio, tgt})
	}
	width := make([]int, len(cells[0]))
	for _, c := range cells {
		for i, s := range c {
			width[i] = max(width[i], len([]rune(s)))
		}
	}
	line := func(c []string) {
		var b strings.Builder
		b.WriteString("|")
		for i, s := range c {
			b.WriteString(" " + s + strings.Repeat(" ", width[i]-len([]rune(s))) + " |")
		}
		fmt.Fprintln(w, b.String())
	}
	line(cells[0])
	sep := make([]string, len(width))
	for i, n := range width {
		sep[i] = strings.Repeat("-", n)
	}
	line(sep)
	for _, c := range cells[1:] {
		line(c)
	}
	return missed
}

func main() {
	other := io.Discard
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		other = os.Stderr
	}
	rows, failures := parse(os.Stdin, other)
	missed := table(os.Stdout, rows)
	if missed > 0 {
		fmt.Printf("\n%d figure(s) miss their target.\n", missed)
	}
	if len(failures) > 0 {
		fmt.Println()
	}
	for _, f := range failures {
		fmt.Println(f)
	}
	if len(failures) > 0 {
		os.Exit(1)
	}
}
