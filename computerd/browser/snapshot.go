package browser

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/chromedp/cdproto/accessibility"
	"github.com/chromedp/cdproto/cdp"
)

// Snapshot implements Tools.
func (d *Driver) Snapshot(ctx context.Context, req SnapshotRequest) (Snapshot, error) {
	if err := validate(req); err != nil {
		return Snapshot{}, err
	}
	limit := req.MaxBytes
	if limit == 0 {
		limit = DefaultSnapshotBytes
	}
	var s Snapshot
	err := d.do(ctx, DefaultTimeout, "snapshot", func(ctx context.Context, t *tab) error {
		if !t.axOn {
			// With the domain on, the page keeps its accessibility tree
			// between snapshots instead of building it for each.
			if _, err := cdp.Call(ctx, t.t, accessibility.Enable, cdp.Empty{}); err != nil {
				return err
			}
			t.axOn = true
		}
		start := time.Now()
		res, err := cdp.Call(ctx, t.t, accessibility.GetFullAXTree, accessibility.GetFullAXTreeParams{})
		d.log.Debug("accessibility tree", "nodes", len(res.Nodes), "took", time.Since(start))
		if err != nil {
			return err
		}
		s.Tree, s.Nodes, s.Truncated = renderTree(res.Nodes, limit)
		s.BrowserPage, err = d.page(ctx, t)
		return err
	})
	return s, err
}

// refRoles are the roles an agent acts on; their nodes carry a ref.
var refRoles = map[string]bool{
	"button": true, "checkbox": true, "combobox": true, "link": true, "listbox": true, "menuitem": true,
	"menuitemcheckbox": true, "menuitemradio": true, "option": true, "radio": true, "searchbox": true,
	"slider": true, "spinbutton": true, "switch": true, "tab": true, "textbox": true, "treeitem": true,
	"textField": true, "searchBox": true, "comboBoxGrouping": true, "comboBoxMenuButton": true, "PopUpButton": true,
	"MenuListPopup": true, "gridcell": true, "columnheader": true, "rowheader": true, "summary": true,
	"DisclosureTriangle": true, "ListBoxOption": true, "MenuListOption": true,
}

// liftRoles have nothing to say by themselves: without a name they are
// left out and their children lifted.
var liftRoles = map[string]bool{
	"": true, "generic": true, "none": true, "presentation": true, "GenericContainer": true, "Section": true,
	"group": false, "LayoutTable": true, "LayoutTableRow": true, "LayoutTableCell": true, "Ignored": true,
	"RootWebArea": true, "WebArea": true, "IframePresentational": true, "paragraph": true, "LabelText": true,
	"div": true, "Div": true, "Canvas": false,
}

// skipRoles are left out with their subtrees.
var skipRoles = map[string]bool{"InlineTextBox": true, "LineBreak": true}

// The states a line shows, as [name] or [name=value].
var stateProps = []string{"checked", "pressed", "selected", "expanded", "disabled", "required", "readonly", "invalid", "focused", "level"}

// axValue is a property value as text: strings as they are, numbers and
// booleans in JSON.
func axValue(v *accessibility.Value) string {
	if v == nil || len(v.Value) == 0 {
		return ""
	}
	raw := []byte(v.Value)
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
	}
	return string(raw)
}

// renderTree writes the accessibility tree in the Snapshot format, at
// most limit bytes (cut at a line's end).
func renderTree(nodes []*accessibility.Node, limit int) (tree string, lines int, truncated bool) {
	if len(nodes) == 0 {
		return "", 0, false
	}
	byID := make(map[accessibility.NodeID]*accessibility.Node, len(nodes))
	for _, n := range nodes {
		byID[n.NodeID] = n
	}
	root := nodes[0]
	for _, n := range nodes {
		if n.ParentID == "" {
			root = n
			break
		}
	}
	var b strings.Builder
	b.Grow(min(limit, 64<<10))
	var line []byte
	full := false
	// parentSays is what the nearest shown ancestor's line says (its
	// name and value): text repeating it is left out.
	var walk func(n *accessibility.Node, depth int, parentSays [2]string)
	walk = func(n *accessibility.Node, depth int, parentSays [2]string) {
		if full {
			return
		}
		role := axValue(n.Role)
		if skipRoles[role] {
			return
		}
		name := strings.TrimSpace(axValue(n.Name))
		show := !n.Ignored
		if show && name == "" && liftRoles[role] {
			show = false
		}
		if show && role == "StaticText" {
			// Text a parent's name already says adds nothing.
			show = name != "" && name != parentSays[0] && name != parentSays[1]
		}
		if show && role == "RootWebArea" {
			show = false
		}
		childDepth, childParent := depth, parentSays
		if show {
			line = appendLine(line[:0], n, role, name, depth)
			if b.Len()+len(line) > limit {
				full = true
				return
			}
			b.Write(line)
			lines++
			childDepth, childParent = depth+1, [2]string{name, strings.TrimSpace(axValue(n.Value))}
		}
		for _, id := range n.ChildIDs {
			if c := byID[id]; c != nil {
				walk(c, childDepth, childParent)
			}
		}
	}
	walk(root, 0, [2]string{})
	return b.String(), lines, full
}

func appendLine(line []byte, n *accessibility.Node, role, name string, depth int) []byte {
	for range depth {
		line = append(line, "  "...)
	}
	line = append(line, "- "...)
	if role == "StaticText" {
		role = "text"
	}
	line = append(line, role...)
	if name != "" {
		line = append(line, ' ')
		line = strconv.AppendQuote(line, truncate(name, 300))
	}
	var states []byte
	focusable := false
	for _, p := range n.Properties {
		pn := string(p.Name)
		if pn == "focusable" && axValue(p.Value) == "true" {
			focusable = true
			continue
		}
		for _, s := range stateProps {
			if pn != s {
				continue
			}
			v := axValue(p.Value)
			switch {
			case v == "false" || v == "":
			case v == "true":
				states = append(states, " ["+s+"]"...)
			default:
				states = append(states, " ["+s+"="+v+"]"...)
			}
		}
	}
	if n.BackendDOMNodeID != 0 && (refRoles[role] || focusable) {
		line = append(line, " [ref=e"...)
		line = strconv.AppendInt(line, int64(n.BackendDOMNodeID), 10)
		line = append(line, ']')
	}
	line = append(line, states...)
	if v := axValue(n.Value); v != "" && role != "text" {
		line = append(line, " value="...)
		line = strconv.AppendQuote(line, truncate(v, 300))
	}
	return append(line, '\n')
}
