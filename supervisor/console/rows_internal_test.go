package console

import (
	"html/template"
	"strings"
	"testing"
)

// rowsTemplate is the computers table's rows as html/template draws
// them: the reference that computerRowsHTML is held to.
var rowsTemplate = template.Must(template.New("rows").Parse(`{{$csrf := .CSRF}}{{range .Rows}}<tr>
<th scope="row"><a href="/agents/{{.ID}}">{{.ID}}</a><span class="sub">{{.Name}}</span></th>
<td>{{.Workspace}}</td>
<td>{{if .Connected}}{{.Conn}}<span class="sub">{{.ConnSub}}</span>{{else}}<span class="muted">Not connected</span>{{end}}</td>
<td>{{if .Session}}<span class="state s-{{.State}}">{{.StateText}}</span><span class="sub">{{.SessSub}} · <a href="/sessions/{{.SessionID}}" aria-label="calls of {{.ID}}">calls</a></span>{{else if .Connected}}<span class="muted">No session</span>{{else}}—{{end}}</td>
<td>{{with .Machine}}<code>{{.}}</code>{{else}}—{{end}}</td>
<td>{{if .Connected}}<form method="post" action="/agents/{{.ID}}/{{if .Session}}stop{{else}}start{{end}}" class="inline"><input type="hidden" name="csrf" value="{{$csrf}}"><input type="hidden" name="back" value="computers"><button type="submit" aria-label="{{if .Session}}Stop{{else}}Start{{end}} {{.ID}}">{{if .Session}}Stop{{else}}Start{{end}}</button></form>{{end}}
{{- if and $.Links .Running}}{{if .Desktop}}
<form method="post" action="/agents/{{.ID}}/open" target="_blank" class="inline"><input type="hidden" name="csrf" value="{{$csrf}}"><input type="hidden" name="kind" value="view"><button type="submit" aria-label="Open live view of {{.ID}} in a new tab">Live view</button></form>{{end}}
<form method="post" action="/agents/{{.ID}}/open" target="_blank" class="inline"><input type="hidden" name="csrf" value="{{$csrf}}"><input type="hidden" name="kind" value="terminal"><button type="submit" aria-label="Open a terminal on {{.ID}} in a new tab">Terminal</button></form>{{end}}
{{- if .Persistent}}
<a href="/agents/{{.ID}}#cp-h" aria-label="Checkpoints of {{.ID}}">Checkpoints</a>{{end}}
<a href="/agents/{{.ID}}" aria-label="Manage {{.ID}}">Manage</a></td>
</tr>
{{else}}<tr><td colspan="6">No agents yet. Create one below.</td></tr>{{end}}`))

// TestRowsAsTheTemplate: computerRowsHTML writes what the template writes,
// byte for byte, for every combination of a row's states and for text
// that needs escaping in each place text appears.
func TestRowsAsTheTemplate(t *testing.T) {
	hostile := []string{"", "plain", `<script>alert("x")</script>`, "a&b 'c' +d", "nul\x00here", "ünïcødé — ok", `"><img src=x onerror=y>`}
	ids := []string{"agent-1", "A.b_c-9"} // agent ids are idRE's
	var rows []computerRow
	n := 0
	for _, id := range ids {
		for bits := range 1 << 6 {
			h := func(k int) string { return hostile[(n+k)%len(hostile)] }
			r := computerRow{
				ID: id, Name: h(0), Workspace: h(1),
				Connected: bits&1 != 0, Conn: h(2), ConnSub: h(3),
				Session: bits&2 != 0, SessionID: "s_0123456789abcdef", State: h(4), StateText: h(5), SessSub: h(6),
				Running: bits&4 != 0, Desktop: bits&8 != 0, Persistent: bits&16 != 0,
			}
			if bits&32 != 0 {
				r.Machine = h(1)
			}
			rows = append(rows, r)
			n++
		}
	}
	for _, csrf := range []string{"tok_en", `a"b<c`} {
		for _, links := range []bool{false, true} {
			for _, set := range [][]computerRow{nil, rows[:1], rows} {
				var want strings.Builder
				err := rowsTemplate.Execute(&want, map[string]any{"CSRF": csrf, "Rows": set, "Links": links})
				if err != nil {
					t.Fatal(err)
				}
				got := string(computerRowsHTML(set, csrf, links))
				if got != want.String() {
					i := 0
					for i < len(got) && i < len(want.String()) && got[i] == want.String()[i] {
						i++
					}
					t.Fatalf("%d rows, csrf %q, links %v: differs from the template at byte %d:\n got %q\nwant %q",
						len(set), csrf, links, i, got[max(i-80, 0):min(i+80, len(got))], want.String()[max(i-80, 0):min(i+80, want.Len())])
				}
			}
		}
	}
}
