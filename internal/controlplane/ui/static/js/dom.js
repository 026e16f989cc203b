// dom.js: building the page. Everything a user or a workload wrote (job
// names, commands, env, reasons, logs) goes into the page as text nodes
// or attribute values, never as markup: the dashboard has no innerHTML,
// outerHTML, insertAdjacentHTML or document.write (ui_test.go greps for
// them), so a job named <script>…</script> shows as those characters.

const SVGNS = 'http://www.w3.org/2000/svg';

// h makes an HTML element: attrs maps attribute names (written here, never
// taken from data) to values; "on…" keys with functions add listeners.
// Children may be nodes, strings or numbers (as text), arrays of them,
// or null/undefined/false (skipped).
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  add(el, children);
  return el;
}

// s makes an SVG element, as h does.
export function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVGNS, tag);
  setAttrs(el, attrs);
  add(el, children);
  return el;
}

function setAttrs(el, attrs) {
  if (!attrs) return;
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') {
      el.addEventListener(k.slice(2), v);
      continue;
    }
    const val = v === true ? '' : String(v);
    if (k === 'href' && !/^[#/]/.test(val)) {
      throw new Error('dom: links stay inside the dashboard: ' + val);
    }
    el.setAttribute(k, val);
  }
}

// add appends children to el (see h).
export function add(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// fill replaces el's children.
export function fill(el, ...children) {
  el.replaceChildren();
  return add(el, children);
}

// Formatting.

export function ms(t) {
  if (!t || t.startsWith('0001-')) return 0;
  const v = Date.parse(t);
  return Number.isNaN(v) ? 0 : v;
}

export function when(t) {
  const v = ms(t);
  if (!v) return '';
  const d = new Date(v);
  const pad = (n) => String(n).padStart(2, '0');
  const today = new Date();
  const time = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  if (d.toDateString() === today.toDateString()) return time;
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${time}`;
}

export function duration(millis) {
  if (!(millis >= 0)) return '';
  const sec = Math.round(millis / 1000);
  if (sec < 60) return sec + 's';
  if (sec < 3600) return Math.floor(sec / 60) + 'm' + String(sec % 60).padStart(2, '0') + 's';
  if (sec < 86400) return Math.floor(sec / 3600) + 'h' + String(Math.floor(sec / 60) % 60).padStart(2, '0') + 'm';
  return Math.floor(sec / 86400) + 'd' + String(Math.floor(sec / 3600) % 24).padStart(2, '0') + 'h';
}

export function ago(t) {
  const v = ms(t);
  return v ? duration(Date.now() - v) + ' ago' : '';
}

export function bytes(n) {
  if (!n) return '';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (n >= 10 || i === 0 ? Math.round(n) : n.toFixed(1)) + ' ' + units[i];
}

export function num(v, digits = 3) {
  if (v === null || v === undefined || Number.isNaN(v)) return '';
  if (v === 0) return '0';
  const a = Math.abs(v);
  if (a >= 1e6 || a < 1e-3) return v.toExponential(2);
  return String(Number(v.toPrecision(digits)));
}

// seconds formats a latency in seconds as ms or s.
export function seconds(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return '—';
  return v < 1 ? num(v * 1000) + ' ms' : num(v) + ' s';
}

// hue gives a stable colour for a key (a job's GPUs share one): greens,
// blues and purples, never the reds and greys that mean faulty and lost.
export function hue(key) {
  let x = 0;
  for (const c of String(key)) x = (x * 31 + c.charCodeAt(0)) >>> 0;
  return `hsl(${140 + ((x * 47) % 160)} 55% 48%)`;
}

// badge is a small coloured label; cls picks its colour (phase-running…).
export function badge(text, cls) {
  return h('span', {class: 'badge ' + (cls || '')}, text);
}

export function phaseBadge(phase) {
  return badge(phase || 'Unknown', 'phase-' + String(phase || 'unknown').toLowerCase());
}

// table builds a table from column heads and rows of cells.
export function table(heads, rows, attrs) {
  return h('table', attrs,
    h('thead', null, h('tr', null, heads.map((x) => h('th', null, x)))),
    h('tbody', null, rows.map((r) => h('tr', null, r.map((c) => h('td', null, c))))));
}

// heads is a table's header row: a head "Used#" is a numeric column's
// (right-aligned, like its cells).
export function heads(names) {
  return h('thead', null, h('tr', null, names.map((x) => (x.endsWith('#') ? h('th', {class: 'num'}, x.slice(0, -1)) : h('th', null, x)))));
}

// widthOf is the width a chart drawn into el may take.
export function widthOf(el, least = 480) {
  return Math.max(least, Math.floor(el.clientWidth || 0));
}

// section is a titled panel.
export function section(title, ...children) {
  return h('section', {class: 'panel'}, h('h2', null, title), ...children);
}

// facts is a definition list of [term, value] pairs, skipping empty values.
export function facts(pairs) {
  return h('dl', {class: 'facts'}, pairs.filter(([, v]) => v !== '' && v !== null && v !== undefined)
    .map(([k, v]) => [h('dt', null, k), h('dd', null, v)]));
}
