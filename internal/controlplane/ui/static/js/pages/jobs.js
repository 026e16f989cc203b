// Jobs: the newest jobs, filtered by text and phase, sorted by any
// column, with why each waiting job waits. One blocking loop; filtering
// and sorting redraw from what it last brought, without a request.

import {h, fill, phaseBadge, when, ms} from '../dom.js';
import {watch} from '../api.js';

const LIMIT = 1000;
const PHASES = ['all', 'active', 'Pending', 'Running', 'Restarting', 'Stopping', 'Succeeded', 'Failed', 'Cancelled'];

const columns = [
  {key: 'id', head: 'ID', value: (j) => Number(j.id) || 0},
  {key: 'name', head: 'Name', value: (j) => j.spec.name || ''},
  {key: 'queue', head: 'Queue', value: (j) => j.spec.queue || ''},
  {key: 'user', head: 'User', value: (j) => j.spec.user || ''},
  {key: 'phase', head: 'Phase', value: (j) => j.status.phase || ''},
  {key: 'gpus', head: 'GPUs', num: true, value: (j) => gpus(j)},
  {key: 'attempts', head: 'Attempts', num: true, value: (j) => (j.status.attempts || []).length},
  {key: 'submitted', head: 'Submitted', value: (j) => ms(j.submittedAt)},
  {key: 'reason', head: 'Why / reason', value: (j) => j.status.reason || ''},
];

function gpus(j) {
  const s = j.spec;
  if (s.gpuMilli) return (s.ranks * s.gpuMilli) / 1000;
  return s.ranks * (s.gpusPerRank || 1);
}

// Kept across visits, as a person expects of a list they filtered.
const state = {text: '', phase: 'all', sort: 'id', desc: true};

export function jobs(main, signal, query) {
  const params = new URLSearchParams(query || '');
  if (params.has('queue')) state.text = 'queue:' + params.get('queue');
  const text = h('input', {type: 'search', id: 'job-filter', placeholder: 'filter: id, name, user, queue:NAME …', value: state.text});
  const phase = h('select', {id: 'job-phase'}, PHASES.map((p) => h('option', {value: p, selected: p === state.phase}, p)));
  const count = h('span', {class: 'muted'});
  const err = h('p', {class: 'error', hidden: true});
  const body = h('div', null, h('p', {class: 'muted'}, 'Loading jobs…'));
  fill(main, h('h1', null, 'Jobs'), h('div', {class: 'controls'}, text, phase, count), err, body);
  let list = null;
  const draw = () => { if (list) render(body, count, list); };
  text.addEventListener('input', () => { state.text = text.value; draw(); });
  phase.addEventListener('change', () => { state.phase = phase.value; draw(); });
  body.addEventListener('click', (ev) => {
    const th = ev.target.closest('th[data-key]');
    if (!th) return;
    const key = th.getAttribute('data-key');
    if (state.sort === key) state.desc = !state.desc;
    else { state.sort = key; state.desc = key === 'id' || key === 'submitted'; }
    draw();
  });
  watch('/jobs?limit=' + LIMIT, signal, (b) => { list = b.jobs || []; draw(); }, (e) => {
    err.hidden = !e;
    if (e) fill(err, e.message);
  });
}

function matches(j, words) {
  for (const w of words) {
    const [k, v] = w.includes(':') ? w.split(/:(.*)/s) : ['', w];
    const field = {queue: j.spec.queue, user: j.spec.user, name: j.spec.name, id: j.id, phase: j.status.phase}[k];
    if (k && field !== undefined) {
      if (!String(field || '').toLowerCase().includes(v)) return false;
      continue;
    }
    const hay = [j.id, j.spec.name, j.spec.user, j.spec.queue, j.status.phase, j.status.reason].join(' ').toLowerCase();
    if (!hay.includes(w)) return false;
  }
  return true;
}

function render(body, count, list) {
  const words = state.text.toLowerCase().split(/\s+/).filter(Boolean);
  const final = (p) => p === 'Succeeded' || p === 'Failed' || p === 'Cancelled';
  const shown = list.filter((j) => {
    if (state.phase === 'active' && final(j.status.phase)) return false;
    if (state.phase !== 'all' && state.phase !== 'active' && j.status.phase !== state.phase) return false;
    return matches(j, words);
  });
  const col = columns.find((c) => c.key === state.sort) || columns[0];
  shown.sort((a, b) => {
    const x = col.value(a); const y = col.value(b);
    const c = typeof x === 'number' ? x - y : String(x).localeCompare(String(y));
    return state.desc ? -c : c;
  });
  fill(count, `${shown.length} of ${list.length}${list.length >= LIMIT ? ` (the newest ${LIMIT})` : ''}`);
  const head = h('tr', null, columns.map((c) => h('th', {'data-key': c.key, class: 'sortable' + (c.num ? ' num' : '') + (c.key === state.sort ? (state.desc ? ' desc' : ' asc') : '')}, c.head)));
  const rows = shown.map((j) => {
    const waiting = j.status.phase === 'Pending' || j.status.phase === 'Restarting';
    return h('tr', {'data-job': j.id, class: 'phase-row-' + String(j.status.phase).toLowerCase()},
      h('td', null, h('a', {href: '#/jobs/' + encodeURIComponent(j.id)}, j.id)),
      h('td', {class: 'name'}, h('a', {href: '#/jobs/' + encodeURIComponent(j.id)}, j.spec.name || '')),
      h('td', null, j.spec.queue || ''),
      h('td', null, j.spec.user || ''),
      h('td', {class: 'phase'}, phaseBadge(j.status.phase)),
      h('td', {class: 'num'}, gpus(j)),
      h('td', {class: 'num'}, (j.status.attempts || []).length),
      h('td', null, when(j.submittedAt)),
      h('td', {class: 'reason' + (waiting ? ' waits' : '')}, j.status.reason || ''));
  });
  fill(body, h('table', {class: 'list jobs'}, h('thead', null, head), h('tbody', null, rows)));
  if (!shown.length) body.append(h('p', {class: 'muted'}, list.length ? 'No job matches.' : 'No jobs yet: gangway submit …'));
}
