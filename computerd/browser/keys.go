package browser

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp/kb"
)

// key is one key of a combination, as Input.dispatchKeyEvent wants it.
type key struct {
	key     string // DOM key value: "Enter", "a", "A"
	code    string // DOM code: "Enter", "KeyA"
	text    string // the text it types, if any
	keyCode int64  // Windows virtual key code
}

// combo is a parsed press: modifiers held around one key.
type combo struct {
	modifiers int64
	mods      []key // in the order pressed
	key       key
}

// Modifier bits of Input.dispatchKeyEvent and dispatchMouseEvent.
const (
	modAlt   = 1
	modCtrl  = 2
	modMeta  = 4
	modShift = 8
)

var modifierKeys = map[string]struct {
	bit int64
	key key
}{
	"control": {modCtrl, key{key: "Control", code: "ControlLeft", keyCode: 17}},
	"ctrl":    {modCtrl, key{key: "Control", code: "ControlLeft", keyCode: 17}},
	"shift":   {modShift, key{key: "Shift", code: "ShiftLeft", keyCode: 16}},
	"alt":     {modAlt, key{key: "Alt", code: "AltLeft", keyCode: 18}},
	"option":  {modAlt, key{key: "Alt", code: "AltLeft", keyCode: 18}},
	"meta":    {modMeta, key{key: "Meta", code: "MetaLeft", keyCode: 91}},
	"cmd":     {modMeta, key{key: "Meta", code: "MetaLeft", keyCode: 91}},
	"command": {modMeta, key{key: "Meta", code: "MetaLeft", keyCode: 91}},
}

// namedKeys are the DOM key names longer than one character ("Enter",
// "ArrowDown", "F5"), by lower-case name.
var namedKeys = func() map[string]key {
	m := make(map[string]key)
	for _, k := range kb.Keys {
		if utf8.RuneCountInString(k.Key) < 2 || k.Key == "Unidentified" {
			continue
		}
		m[strings.ToLower(k.Key)] = key{key: k.Key, code: k.Code, text: k.Text, keyCode: k.Windows}
	}
	m["space"] = key{key: " ", code: "Space", text: " ", keyCode: 32}
	m["esc"] = m["escape"]
	m["del"] = m["delete"]
	m["return"] = m["enter"]
	return m
}()

// parseCombo reads a key or combination such as "Enter", "Control+a" or
// "Shift+Tab".
func parseCombo(s string) (combo, error) {
	if s == "" {
		return combo{}, badRequest("key: required (a key such as Enter, Tab, ArrowDown or a, or a combination such as Control+a)")
	}
	if utf8.RuneCountInString(s) > MaxKeyChars {
		return combo{}, badRequest("key: %d characters, at most %d", utf8.RuneCountInString(s), MaxKeyChars)
	}
	parts := strings.Split(s, "+")
	if strings.HasSuffix(s, "++") || s == "+" {
		// The key is "+" itself.
		parts = append(strings.Split(strings.TrimSuffix(s, "++"), "+"), "+")
		if s == "+" {
			parts = []string{"+"}
		}
	}
	var c combo
	for i, p := range parts {
		if i < len(parts)-1 {
			m, ok := modifierKeys[strings.ToLower(p)]
			if !ok {
				return combo{}, badRequest("key: %q in %q is not a modifier (Control, Shift, Alt, Meta)", p, s)
			}
			if c.modifiers&m.bit == 0 {
				c.modifiers |= m.bit
				c.mods = append(c.mods, m.key)
			}
			continue
		}
		k, ok := lookupKey(p, c.modifiers&modShift != 0)
		if !ok {
			return combo{}, badRequest("key: unknown key %q in %q; use DOM key names such as Enter, Tab, Escape, ArrowDown, PageDown, F5, or one character", p, s)
		}
		c.key = k
	}
	return c, nil
}

func lookupKey(name string, shift bool) (key, bool) {
	if utf8.RuneCountInString(name) == 1 {
		r, _ := utf8.DecodeRuneInString(name)
		if shift {
			r = unicode.ToUpper(r)
		}
		k, ok := kb.Keys[r]
		if !ok {
			// Any other character types itself.
			return key{key: string(r), text: string(r)}, unicode.IsPrint(r)
		}
		out := key{key: k.Key, code: k.Code, text: k.Text, keyCode: k.Windows}
		if lr := unicode.ToUpper(r); lr >= 'A' && lr <= 'Z' {
			out.keyCode = int64(lr) // VK_A..VK_Z, whatever the case
		}
		return out, true
	}
	k, ok := namedKeys[strings.ToLower(name)]
	return k, ok
}

// events are the key events of pressing c: modifiers down, the key down
// and up, modifiers up.
func (c combo) events() []*input.DispatchKeyEventParams {
	var evs []*input.DispatchKeyEventParams
	var held int64
	for _, m := range c.mods {
		held |= modifierKeys[strings.ToLower(m.key)].bit
		evs = append(evs, &input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeRawKeyDown, Modifiers: held, Key: m.key, Code: m.code,
			WindowsVirtualKeyCode: m.keyCode, NativeVirtualKeyCode: m.keyCode})
	}
	k := c.key
	down := &input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeRawKeyDown, Modifiers: c.modifiers, Key: k.key, Code: k.code,
		WindowsVirtualKeyCode: k.keyCode, NativeVirtualKeyCode: k.keyCode}
	// Text is typed only without Control, Alt or Meta held.
	if k.text != "" && c.modifiers&^modShift == 0 {
		down.Type = input.DispatchKeyEventTypeKeyDown
		down.Text = k.text
		down.UnmodifiedText = k.text
	}
	up := &input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeKeyUp, Modifiers: c.modifiers, Key: k.key, Code: k.code,
		WindowsVirtualKeyCode: k.keyCode, NativeVirtualKeyCode: k.keyCode}
	evs = append(evs, down, up)
	for i := len(c.mods) - 1; i >= 0; i-- {
		m := c.mods[i]
		held &^= modifierKeys[strings.ToLower(m.key)].bit
		evs = append(evs, &input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeKeyUp, Modifiers: held, Key: m.key, Code: m.code,
			WindowsVirtualKeyCode: m.keyCode, NativeVirtualKeyCode: m.keyCode})
	}
	return evs
}
