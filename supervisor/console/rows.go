package console

import (
	"html/template"
	"net/url"
	"strings"
)

// The computers table is the console's one page whose size grows with the
// number of agents, and the page's script draws it again every few
// seconds. Through the template, a thousand rows cost about two thirds of
// the page's time in reflection, for actions whose context never changes:
// so the rows are written here, escaped as html/template escapes them in
// those contexts. TestRowsAsTheTemplate holds this to the template it
// replaces, byte for byte.

// htmlText escapes a value for HTML text or a quoted attribute, with the
// same replacements as html/template.
var htmlText = strings.NewReplacer(
	"\x00", "\uFFFD",
	`"`, "&#34;",
	"&", "&amp;",
	"'", "&#39;",
	"+", "&#43;",
	"<", "&lt;",
	">", "&gt;",
)

// rowWriter writes computer rows to a builder.
type rowWriter struct {
	b strings.Builder
}

// text writes s escaped for HTML text or a quoted attribute.
func (w *rowWriter) text(s string) { htmlText.WriteString(&w.b, s) }

// path writes s as one segment of a URL path in a quoted attribute.
func (w *rowWriter) path(s string) { w.text(url.PathEscape(s)) }

// raw writes markup as it is.
func (w *rowWriter) raw(s string) { w.b.WriteString(s) }

// computerRowsHTML draws the rows of the computers table; links says
// whether live-view and terminal links can be made.
func computerRowsHTML(rows []computerRow, csrf string, links bool) template.HTML {
	if len(rows) == 0 {
		return `<tr><td colspan="6">No agents yet. Create one below.</td></tr>`
	}
	w := &rowWriter{}
	w.b.Grow(len(rows) * 1024)
	for i := range rows {
		w.row(&rows[i], csrf, links)
	}
	return template.HTML(w.b.String())
}

func (w *rowWriter) row(r *computerRow, csrf string, links bool) {
	w.raw("<tr>\n<th scope=\"row\"><a href=\"/agents/")
	w.path(r.ID)
	w.raw(`">`)
	w.text(r.ID)
	w.raw(`</a><span class="sub">`)
	w.text(r.Name)
	w.raw("</span></th>\n<td>")
	w.text(r.Workspace)
	w.raw("</td>\n<td>")
	if r.Connected {
		w.text(r.Conn)
		w.raw(`<span class="sub">`)
		w.text(r.ConnSub)
		w.raw(`</span>`)
	} else {
		w.raw(`<span class="muted">Not connected</span>`)
	}
	w.raw("</td>\n<td>")
	switch {
	case r.Session:
		w.raw(`<span class="state s-`)
		w.text(r.State)
		w.raw(`">`)
		w.text(r.StateText)
		w.raw(`</span><span class="sub">`)
		w.text(r.SessSub)
		w.raw(` · <a href="/sessions/`)
		w.path(r.SessionID)
		w.raw(`" aria-label="calls of `)
		w.text(r.ID)
		w.raw(`">calls</a></span>`)
	case r.Connected:
		w.raw(`<span class="muted">No session</span>`)
	default:
		w.raw("—")
	}
	w.raw("</td>\n<td>")
	if r.Machine != "" {
		w.raw("<code>")
		w.text(r.Machine)
		w.raw("</code>")
	} else {
		w.raw("—")
	}
	w.raw("</td>\n<td>")
	if r.Connected {
		verb, Verb := "start", "Start"
		if r.Session {
			verb, Verb = "stop", "Stop"
		}
		w.raw(`<form method="post" action="/agents/`)
		w.path(r.ID)
		w.raw("/" + verb + `" class="inline">`)
		w.csrf(csrf)
		w.raw(`<input type="hidden" name="back" value="computers"><button type="submit" aria-label="` + Verb + " ")
		w.text(r.ID)
		w.raw(`">` + Verb + `</button></form>`)
	}
	if links && r.Running {
		if r.Desktop {
			w.open(r.ID, csrf, "view", "Open live view of ", "Live view")
		}
		w.open(r.ID, csrf, "terminal", "Open a terminal on ", "Terminal")
	}
	if r.Persistent {
		w.raw("\n<a href=\"/agents/")
		w.path(r.ID)
		w.raw(`#cp-h" aria-label="Checkpoints of `)
		w.text(r.ID)
		w.raw(`">Checkpoints</a>`)
	}
	w.raw("\n<a href=\"/agents/")
	w.path(r.ID)
	w.raw(`" aria-label="Manage `)
	w.text(r.ID)
	w.raw("\">Manage</a></td>\n</tr>\n")
}

// csrf writes the form field that carries the session's CSRF token.
func (w *rowWriter) csrf(token string) {
	w.raw(`<input type="hidden" name="csrf" value="`)
	w.text(token)
	w.raw(`">`)
}

// open writes a form that opens the agent's live view or terminal in a
// new tab.
func (w *rowWriter) open(id, csrf, kind, label, button string) {
	w.raw("\n<form method=\"post\" action=\"/agents/")
	w.path(id)
	w.raw(`/open" target="_blank" class="inline">`)
	w.csrf(csrf)
	w.raw(`<input type="hidden" name="kind" value="` + kind + `"><button type="submit" aria-label="` + label)
	w.text(id)
	w.raw(` in a new tab">` + button + `</button></form>`)
}
