// The page side of the snapshot tools, run in the driver's isolated world of
// a page's main frame (see snapshot.go): the page's own scripts cannot see
// or change it. It defines globalThis.berth with
//
//   snapshot(limit, next): the page as the Snapshot text, at most limit
//     bytes of UTF-8 cut at a line's end: {tree, lines, truncated, next};
//     refs it gives new elements start at next or above;
//   lookup(n): the element of ref e<n>, or null when it is unknown or no
//     longer in the page.
//
// It walks the DOM once, through open shadow roots and slots as the page
// is rendered, and computes roles, names, states and values the way the
// browser's accessibility tree does for the common cases.
(() => {
  if (globalThis.berth) return;

  // The registry of refs: element -> number, number -> element, never
  // keeping an element alive.
  const numbers = new WeakMap();
  const elements = new Map();
  let nextRef = 1;

  const refOf = (el) => {
    let n = numbers.get(el);
    if (n === undefined) {
      n = nextRef++;
      numbers.set(el, n);
      elements.set(n, new WeakRef(el));
    }
    return n;
  };

  const lookup = (n) => {
    const r = elements.get(n);
    const el = r && r.deref();
    return el && el.isConnected ? el : null;
  };

  const prune = () => {
    for (const [n, r] of elements) {
      if (!r.deref()) elements.delete(n);
    }
  };

  // Elements left out with their subtrees.
  const skipTags = new Set(['script', 'style', 'template', 'noscript', 'head', 'meta', 'link', 'title', 'base', 'datalist', 'param', 'source', 'track']);
  // Elements whose children are not walked.
  const leafTags = new Set(['iframe', 'frame', 'object', 'embed', 'video', 'audio', 'canvas', 'img', 'input', 'textarea', 'math', 'svg', 'progress', 'meter', 'br', 'hr']);
  // Roles that carry a ref: the ones an agent acts on.
  const refRoles = new Set(['button', 'checkbox', 'combobox', 'link', 'listbox', 'menuitem', 'menuitemcheckbox', 'menuitemradio',
    'option', 'radio', 'searchbox', 'slider', 'spinbutton', 'switch', 'tab', 'textbox', 'treeitem', 'gridcell',
    'columnheader', 'rowheader', 'summary']);
  // Roles with nothing to say by themselves: without a name they are left
  // out and their children lifted.
  const liftRoles = new Set(['', 'generic', 'none', 'presentation', 'paragraph', 'rowgroup']);
  // Roles named by their content.
  const contentRoles = new Set(['button', 'cell', 'checkbox', 'columnheader', 'gridcell', 'heading', 'link', 'menuitem',
    'menuitemcheckbox', 'menuitemradio', 'option', 'radio', 'rowheader', 'switch', 'tab', 'tooltip', 'treeitem', 'summary',
    'term', 'caption']);
  // Roles whose children are presentational.
  const leafRoles = new Set(['img', 'separator', 'progressbar', 'meter', 'slider', 'scrollbar', 'math']);
  const tagRoles = {
    article: 'article', aside: 'complementary', blockquote: 'blockquote', button: 'button', caption: 'caption', code: 'code',
    dd: 'definition', del: 'deletion', details: 'group', dialog: 'dialog', dl: 'list', dt: 'term', fieldset: 'group',
    figure: 'figure', form: 'form', h1: 'heading', h2: 'heading', h3: 'heading', h4: 'heading', h5: 'heading', h6: 'heading',
    hr: 'separator', iframe: 'iframe', ins: 'insertion', li: 'listitem', main: 'main', mark: 'mark', math: 'math',
    menu: 'list', meter: 'meter', nav: 'navigation', ol: 'list', optgroup: 'group', option: 'option', output: 'status',
    p: 'paragraph', progress: 'progressbar', search: 'search', summary: 'summary', table: 'table', textarea: 'textbox',
    time: 'time', tr: 'row', ul: 'list',
  };
  const inputRoles = {
    button: 'button', submit: 'button', reset: 'button', image: 'button', file: 'button', color: 'button',
    checkbox: 'checkbox', radio: 'radio', range: 'slider', number: 'spinbutton', search: 'searchbox',
  };
  const textInputs = new Set(['text', 'email', 'tel', 'url', 'password', 'search', 'number', 'date', 'datetime-local', 'month', 'time', 'week']);

  const clean = (s) => (s || '').replace(/\s+/g, ' ').trim();

  const cut = (s) => {
    if (s.length <= 300) return s;
    const cps = Array.from(s);
    return cps.length <= 300 ? s : cps.slice(0, 300).join('') + '…';
  };

  const quote = (s) => JSON.stringify(cut(s));

  const utf8Length = (s) => {
    let n = s.length;
    for (let i = 0; i < s.length; i++) {
      const c = s.charCodeAt(i);
      if (c >= 0x80) n += c >= 0x800 && (c < 0xd800 || c > 0xdfff) ? 2 : 1;
    }
    return n;
  };

  // The children of a node as the page is rendered: a shadow host's shadow
  // tree, a slot's assigned nodes.
  const kids = (node) => {
    if (node.nodeType === 1) {
      if (node.shadowRoot) return node.shadowRoot.childNodes;
      if (node.localName === 'slot') {
        const a = node.assignedNodes();
        if (a.length) return a;
      }
    }
    return node.childNodes;
  };

  const roleOf = (el, tag) => {
    const explicit = (el.getAttribute('role') || '').trim().split(/\s+/)[0];
    if (explicit && /^[a-z]+$/i.test(explicit)) return explicit === 'presentation' ? 'none' : explicit;
    switch (tag) {
      case 'a':
      case 'area':
        return el.hasAttribute('href') ? 'link' : '';
      case 'input': {
        const type = el.type;
        if (type === 'hidden') return null;
        if ((type === 'text' || type === 'search' || type === 'email' || type === 'tel' || type === 'url') && el.hasAttribute('list')) return 'combobox';
        return inputRoles[type] || 'textbox';
      }
      case 'select':
        return el.multiple || el.size > 1 ? 'listbox' : 'combobox';
      case 'img':
        return el.getAttribute('alt') === '' ? 'none' : 'img';
      case 'svg':
        return el.hasAttribute('aria-label') || el.hasAttribute('aria-labelledby') || el.querySelector(':scope > title') ? 'img' : null;
      case 'td': {
        const table = el.closest('table');
        const r = table && table.getAttribute('role');
        return r === 'grid' || r === 'treegrid' ? 'gridcell' : 'cell';
      }
      case 'th':
        return el.getAttribute('scope') === 'row' ? 'rowheader' : 'columnheader';
      case 'header':
        return el.closest('article, aside, main, nav, section') ? '' : 'banner';
      case 'footer':
        return el.closest('article, aside, main, nav, section') ? '' : 'contentinfo';
      case 'section':
        return el.hasAttribute('aria-label') || el.hasAttribute('aria-labelledby') ? 'region' : '';
    }
    return tagRoles[tag] || '';
  };

  const hiddenForText = (el) => {
    if (el.getAttribute('aria-hidden') === 'true') return true;
    const cs = getComputedStyle(el);
    return cs.display === 'none' || cs.visibility !== 'visible';
  };

  // The text an element's content contributes to a name, at most about
  // 1,000 characters.
  const textOf = (node, skip, depth) => {
    let s = '';
    for (const c of kids(node)) {
      if (s.length > 1000) break;
      if (c.nodeType === 3) {
        s += c.data;
        continue;
      }
      if (c.nodeType !== 1 || c === skip || depth > 50) continue;
      const tag = c.localName;
      if (skipTags.has(tag) || hiddenForText(c)) continue;
      const label = c.getAttribute('aria-label');
      let t;
      if (label && label.trim()) t = label;
      else if (tag === 'img' || tag === 'area') t = c.getAttribute('alt') || c.getAttribute('title') || '';
      else if (tag === 'input') t = c.type === 'checkbox' || c.type === 'radio' || c.type === 'hidden' ? '' : c.value;
      else if (tag === 'textarea') t = c.value;
      else if (tag === 'select') t = c.selectedOptions.length ? c.selectedOptions[0].text : '';
      else if (tag === 'br') t = ' ';
      else if (tag === 'svg') t = '';
      else t = textOf(c, skip, depth + 1);
      s += getComputedStyle(c).display.startsWith('inline') ? t : ' ' + t + ' ';
    }
    return s;
  };

  const byIds = (el, ids) => {
    const root = el.getRootNode();
    const parts = [];
    for (const id of ids.split(/\s+/)) {
      const r = id && (root.getElementById ? root.getElementById(id) : document.getElementById(id));
      if (r) parts.push(r.getAttribute('aria-label') || textOf(r, null, 0));
    }
    return clean(parts.join(' '));
  };

  // The element's accessible name, and whether it came from its content.
  const nameOf = (el, tag, role) => {
    const ids = el.getAttribute('aria-labelledby');
    if (ids) {
      const s = byIds(el, ids);
      if (s) return [s, false];
    }
    const label = clean(el.getAttribute('aria-label'));
    if (label) return [label, false];
    if (tag === 'input') {
      const type = el.type;
      if (type === 'button' || type === 'submit' || type === 'reset') {
        return [clean(el.value) || (type === 'submit' ? 'Submit' : type === 'reset' ? 'Reset' : ''), false];
      }
      if (type === 'image') return [clean(el.getAttribute('alt')) || clean(el.value) || 'Submit', false];
    }
    if (el.labels && el.labels.length) {
      const s = clean(Array.from(el.labels, (l) => textOf(l, el, 0)).join(' '));
      if (s) return [s, false];
    }
    let s = '';
    switch (tag) {
      case 'img':
      case 'area':
        s = el.getAttribute('alt');
        break;
      case 'fieldset':
        s = (el.querySelector(':scope > legend') || {}).textContent;
        break;
      case 'figure':
        s = (el.querySelector(':scope > figcaption') || {}).textContent;
        break;
      case 'table':
        s = (el.querySelector(':scope > caption') || {}).textContent;
        break;
      case 'svg':
        s = (el.querySelector(':scope > title') || {}).textContent;
        break;
    }
    s = clean(s);
    if (s) return [s, false];
    if (contentRoles.has(role)) {
      s = clean(textOf(el, null, 0));
      if (s) return [s, true];
    }
    s = clean(el.getAttribute('title')) || clean(el.getAttribute('placeholder'));
    return [s, false];
  };

  const states = (el, tag, role, active) => {
    let s = '';
    const add = (name, v) => {
      if (v === true || v === 'true') s += ' [' + name + ']';
      else if (v && v !== 'false') s += ' [' + name + '=' + v + ']';
    };
    const aria = (name) => el.getAttribute('aria-' + name);
    const isInput = tag === 'input';
    if (isInput && (el.type === 'checkbox' || el.type === 'radio')) add('checked', el.indeterminate ? 'mixed' : el.checked);
    else add('checked', aria('checked'));
    add('pressed', aria('pressed'));
    add('selected', tag === 'option' ? el.selected : aria('selected'));
    add('expanded', tag === 'summary' && el.parentElement && el.parentElement.localName === 'details' ? el.parentElement.open : aria('expanded'));
    const control = isInput || tag === 'button' || tag === 'select' || tag === 'textarea' || tag === 'option' || tag === 'optgroup' || tag === 'fieldset';
    add('disabled', (control && el.matches(':disabled')) || aria('disabled'));
    add('required', ((isInput || tag === 'select' || tag === 'textarea') && el.required) || aria('required'));
    add('readonly', (((isInput && textInputs.has(el.type)) || tag === 'textarea') && el.readOnly) || aria('readonly'));
    add('invalid', aria('invalid'));
    add('focused', el === active);
    let level = aria('level');
    if (!level && role === 'heading' && /^h[1-6]$/.test(tag)) level = tag[1];
    add('level', level);
    return s;
  };

  const valueOf = (el, tag, role) => {
    if (tag === 'input') {
      const type = el.type;
      if (type === 'password') return '•'.repeat(el.value.length);
      if (textInputs.has(type) || type === 'range' || type === 'color' || !inputRoles[type]) return el.value;
      if (type === 'file') return Array.from(el.files || [], (f) => f.name).join(', ');
      return '';
    }
    if (tag === 'textarea') return el.value;
    if (tag === 'select') return role === 'combobox' && el.selectedOptions.length ? clean(el.selectedOptions[0].text) : '';
    if (tag === 'progress' || tag === 'meter') return el.hasAttribute('value') ? String(el.value) : '';
    return el.getAttribute('aria-valuetext') || el.getAttribute('aria-valuenow') || '';
  };

  const deepActive = () => {
    let a = document.activeElement;
    while (a && a.shadowRoot && a.shadowRoot.activeElement) a = a.shadowRoot.activeElement;
    return a === document.body || a === document.documentElement ? null : a;
  };

  const snapshot = (limit, next) => {
    if (next > nextRef) nextRef = next;
    prune();
    const active = deepActive();
    const out = [];
    let bytes = 0;
    let full = false;

    const emit = (depth, text) => {
      const line = '  '.repeat(depth) + '- ' + text + '\n';
      const n = utf8Length(line);
      if (bytes + n > limit) {
        full = true;
        return false;
      }
      out.push(line);
      bytes += n;
      return true;
    };

    // parent is what the nearest shown ancestor says (its name and value:
    // text repeating it is left out), whether text here is visible, and
    // whether the text was already said by an ancestor's name.
    const visit = (node, depth, parent, level) => {
      if (full) return;
      if (node.nodeType === 3) {
        if (!parent.visible || parent.named) return;
        const t = clean(node.data);
        if (t && t !== parent.name && t !== parent.value) emit(depth, 'text ' + quote(t));
        return;
      }
      if (node.nodeType !== 1) return;
      const el = node;
      const tag = el.localName;
      if (skipTags.has(tag) || el.getAttribute('aria-hidden') === 'true' || el.inert || level > 500) return;
      const cs = getComputedStyle(el);
      if (cs.display === 'none') return;
      const inSelect = tag === 'option' || tag === 'optgroup';
      if (cs.display !== 'contents' && !inSelect && tag !== 'area' && !el.checkVisibility()) return;
      const role = roleOf(el, tag);
      if (role === null) return;
      const visible = cs.visibility === 'visible' || (inSelect && parent.visible);
      // A label's text is its control's name, said on the control's line.
      const labels = tag === 'label' && el.control && !el.control.hasAttribute('aria-label') && !el.control.hasAttribute('aria-labelledby');
      let here = { name: parent.name, value: parent.value, visible, named: parent.named || labels };
      let childDepth = depth;
      if (visible) {
        let [name, fromContent] = nameOf(el, tag, role);
        const interactive = (el.tabIndex >= 0 && tag !== 'body' && tag !== 'html') || el.hasAttribute('onclick') ||
          (el.isContentEditable && !(el.parentElement && el.parentElement.isContentEditable));
        let shown = role;
        if (liftRoles.has(role) && !name) shown = interactive ? 'generic' : '';
        if (shown) {
          const value = valueOf(el, tag, shown);
          let line = shown;
          if (name) line += ' ' + quote(name);
          if (refRoles.has(shown) || interactive) line += ' [ref=e' + refOf(el) + ']';
          line += states(el, tag, shown, active);
          if (value) line += ' value=' + quote(value);
          if (!emit(depth, line)) return;
          here = { name, value: clean(value), visible, named: parent.named || fromContent };
          childDepth = depth + 1;
        }
        if (leafRoles.has(shown)) return;
      }
      if (leafTags.has(tag)) return;
      if (cs.contentVisibility === 'hidden') return;
      for (const c of kids(el)) {
        if (full) return;
        visit(c, childDepth, here, level + 1);
      }
    };

    const root = document.documentElement;
    if (root) visit(root, 0, { name: '', value: '', visible: true, named: false }, 0);
    return { tree: out.join(''), lines: out.length, truncated: full, next: nextRef };
  };

  Object.defineProperty(globalThis, 'berth', { value: Object.freeze({ snapshot, lookup }) });
})();
