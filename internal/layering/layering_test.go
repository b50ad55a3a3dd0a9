package layering

import (
	"bufio"
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/berthdev/berth"

// floors ranks the module's top-level rooms. A package may import its own
// room and rooms on lower floors, never a room on its own floor or above:
// so the supervisor and the lending agent (floor 4) stand side by side and
// reach each other only through the contracts beneath them.
var floors = map[string]int{
	// the binaries and the tests that cross every part
	"cmd":       6,
	"e2e":       6,
	"packaging": 6, // helper programs for the test cluster
	// the companion app; the provider conformance suite, which drives a
	// whole supervisor
	"app":         5,
	"conformance": 5,
	// the control plane and the lending agent
	"supervisor": 4,
	"agent":      4,
	// where computers run
	"providers": 3,
	// parts both sides run: the relay, computerd, the egress proxy
	"relay":     2,
	"computerd": 2,
	"egress":    2,
	// wire contracts: the REST API and the lending protocol
	"api":     1,
	"lending": 1,
	// the ground floor
	"internal": 0,
}

func room(pkg string) string {
	rest := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
	r, _, _ := strings.Cut(rest, "/")
	return r
}

type edge struct{ from, to string }

// imports lists the module's non-test imports between its packages.
func imports(t *testing.T) []edge {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"/...")
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var edges []edge
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		for _, imp := range f[1:] {
			if imp == module || strings.HasPrefix(imp, module+"/") {
				edges = append(edges, edge{f[0], imp})
			}
		}
		edges = append(edges, edge{f[0], ""}) // every package's room is checked
	}
	if len(edges) < 100 {
		t.Fatalf("go list found only %d imports inside the module", len(edges))
	}
	return edges
}

// check returns the broken rules among edges, one line each.
func check(edges []edge) []string {
	var bad []string
	seen := map[string]bool{}
	for _, e := range edges {
		from := room(e.from)
		if _, ok := floors[from]; !ok && !seen[from] {
			seen[from] = true
			bad = append(bad, "room "+from+"/ ("+e.from+") has no floor in the layering table")
		}
		if e.to == "" {
			continue
		}
		to := room(e.to)
		if from == to {
			continue
		}
		fa, ok1 := floors[from]
		fb, ok2 := floors[to]
		if ok1 && ok2 && fb >= fa {
			bad = append(bad, e.from+" imports "+e.to+": "+from+"/ may import only rooms below it")
		}
	}
	return bad
}

func TestLayering(t *testing.T) {
	for _, b := range check(imports(t)) {
		t.Error(b)
	}
}

// TestCheckCatches: the rule fails on an import running up, across a floor
// and from a room missing from the table.
func TestCheckCatches(t *testing.T) {
	for _, tc := range []struct {
		e    edge
		want bool
	}{
		{edge{module + "/providers/local", module + "/agent/lender"}, true},
		{edge{module + "/supervisor/liveview", module + "/agent/control"}, true},
		{edge{module + "/agent/lender", module + "/supervisor/egress"}, true},
		{edge{module + "/computerd", module + "/egress"}, true},
		{edge{module + "/newroom/x", module + "/internal/clock"}, true},
		{edge{module + "/agent/lender", module + "/lending"}, false},
		{edge{module + "/supervisor", module + "/supervisor/store"}, false},
		{edge{module + "/cmd/berth", module + "/app/ui"}, false},
	} {
		if got := len(check([]edge{tc.e})) > 0; got != tc.want {
			t.Errorf("%s -> %s: broken %v, want %v", tc.e.from, tc.e.to, got, tc.want)
		}
	}
}
