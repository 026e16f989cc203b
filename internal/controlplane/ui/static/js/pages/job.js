// A job: what it is, why it waits, its attempts on a timeline with their
// causes, where its current attempt runs, its loss curve from progress,
// its checkpoints, and its logs' tail, live. One blocking loop on the
// job (it wakes for the job's own record, ranks, checkpoints and
// progress) and one log stream, restarted for each new attempt or rank.

import {h, fill, facts, phaseBadge, badge, when, duration, ms, num, section, table, widthOf} from '../dom.js';
import {watch, follow, sleep, APIError} from '../api.js';
import {lineChart, timeline, attemptClass} from '../charts.js';

const TAIL_LINES = 500;

export function job(main, signal, id) {
  const head = h('div', {class: 'job-head'}, h('h1', null, 'Job ', id));
  const err = h('p', {class: 'error', hidden: true});
  const why = h('div', {class: 'why', hidden: true});
  const about = h('div');
  const atts = h('div', {class: 'attempts'});
  const place = h('div');
  const prog = h('div', {class: 'progress'});
  const ckpts = h('div');
  const logs = logPanel(signal, id);
  fill(main, head, err, why,
    section('Job', about),
    section('Attempts', atts),
    section('Placement', place),
    section('Loss', prog),
    section('Checkpoints', ckpts),
    logs.el);
  watch('/jobs/' + encodeURIComponent(id), signal, (d) => {
    const j = d.job;
    fill(head, h('h1', null, 'Job ', j.id, j.spec.name ? [' · ', h('span', {class: 'job-name'}, j.spec.name)] : ''),
      phaseBadge(j.status.phase), d.archived ? badge('archived', 'muted') : '',
      j.status.cancelRequested && !['Cancelled', 'Succeeded', 'Failed'].includes(j.status.phase) ? badge('cancelling', 'warn') : '');
    renderWhy(why, j);
    renderAbout(about, j);
    renderAttempts(atts, j);
    renderPlacement(place, j, d.ranks || [], d.stragglers || []);
    renderProgress(prog, d.progress);
    renderCheckpoints(ckpts, d.checkpoints || []);
    logs.update(j);
  }, (e) => {
    err.hidden = !e;
    if (e) fill(err, e.message);
  });
}

function renderWhy(el, j) {
  const st = j.status;
  const waiting = st.phase === 'Pending' || st.phase === 'Restarting';
  el.hidden = !st.reason;
  if (!st.reason) return;
  let extra = '';
  if (waiting && ms(st.notBefore) > Date.now()) extra = ` (restart backoff until ${when(st.notBefore)})`;
  fill(el, h('b', null, waiting ? 'Why it waits: ' : 'Reason: '), st.reason, extra);
  el.className = 'why ' + (waiting ? 'waits' : st.phase === 'Failed' ? 'failed' : '');
}

function renderAbout(el, j) {
  const sp = j.spec;
  const st = j.status;
  const gpus = sp.gpuMilli ? `${sp.gpuMilli / 10}% of a GPU` : sp.migProfile ? `MIG ${sp.migProfile}` : `${sp.gpusPerRank || 1} GPU${(sp.gpusPerRank || 1) > 1 ? 's' : ''}`;
  const env = Object.entries(sp.env || {}).sort(([a], [b]) => a.localeCompare(b));
  fill(el, facts([
    ['Name', sp.name || ''],
    ['Queue', sp.queue || 'default'],
    ['User', sp.user || ''],
    ['Priority', sp.priority || 0],
    ['Shape', `${sp.ranks} rank${sp.ranks > 1 ? 's' : ''} × ${gpus}${sp.ranksPerNode ? `, ${sp.ranksPerNode} per node` : ''}${sp.launch ? ', launch ' + sp.launch : ''}`],
    ['Parallelism', sp.parallelism && !sp.parallelism.auto ? `TP ${sp.parallelism.tp || 1} · PP ${sp.parallelism.pp || 1} · DP ${sp.parallelism.dp || ''}` : sp.parallelism ? 'auto' : ''],
    ['Submitted', when(j.submittedAt)],
    ['Started', when(st.startedAt)],
    ['Finished', when(st.finishedAt)],
    ['Restarts', `${st.restarts || 0} of ${sp.maxRestarts ?? 3}`],
    ['Array', j.array ? `task ${j.array.index} of array ${j.array.id}` : ''],
    ['Command', h('code', {class: 'cmd'}, (sp.command || []).join(' '))],
    ['Environment', env.length ? h('ul', {class: 'env'}, env.map(([k, v]) => h('li', null, h('code', null, k, '=', v)))) : ''],
    ['Avoids', (st.avoid || []).join(', ')],
  ]));
}

function renderAttempts(el, j) {
  const atts = j.status.attempts || [];
  const rows = [...atts].reverse().map((a) => {
    const end = ms(a.endedAt) || (a.phase === 'Ended' ? 0 : Date.now());
    return [
      h('span', {class: 'att-dot ' + attemptClass(a)}, a.number),
      a.phase,
      a.outcome || '',
      a.cause ? badge(a.cause, 'cause') : '',
      h('span', {class: 'reason'}, a.reason || ''),
      [...new Set((a.placement || []).map((p) => p.node))].join(', '),
      when(a.createdAt),
      end ? duration(end - ms(a.createdAt)) : '',
      a.resumeFrom ? `step ${a.resumeFrom.step}` : '',
    ];
  });
  fill(el, timeline(j, {width: widthOf(el)}), atts.length ? table(['#', 'Phase', 'Outcome', 'Cause', 'Reason', 'Nodes', 'Created', 'Ran', 'Resumed from'], rows, {class: 'list'}) : '');
}

function renderPlacement(el, j, ranks, stragglers) {
  const atts = j.status.attempts || [];
  const a = atts[atts.length - 1];
  if (!a) {
    fill(el, h('p', {class: 'muted'}, 'Not placed yet.'));
    return;
  }
  const status = new Map(ranks.filter((r) => r.attempt === a.number).map((r) => [r.rank, r]));
  const slow = new Set(stragglers.filter((s) => s.attempt === a.number).map((s) => s.rank));
  const grid = a.grid ? `grid TP ${a.grid.tp} × PP ${a.grid.pp} × DP ${a.grid.dp}` : '';
  const span = a.span ? `${a.span.nodes} node${a.span.nodes > 1 ? 's' : ''}, ${a.span.leaves} lea${a.span.leaves > 1 ? 'ves' : 'f'}` : '';
  const rows = (a.placement || []).map((p) => {
    const r = status.get(p.rank);
    return [p.rank, p.node, (p.gpus || []).join(',') + (p.milli ? ` (${p.milli / 10}%)` : '') + (p.migProfile ? ` MIG ${p.migProfile}` : ''),
      `${p.tp}/${p.pp}/${p.dp}`,
      r ? badge(r.state, 'rank-' + r.state) : '',
      r && r.state === 'exited' ? (r.signal || `code ${r.exitCode}`) : '',
      r && r.pid ? r.pid : '',
      slow.has(p.rank) ? badge('straggler', 'warn') : '',
      h('span', {class: 'reason'}, r ? r.message || '' : '')];
  });
  fill(el, h('p', {class: 'muted'}, `Attempt ${a.number}: `, [span, grid, a.masterAddr ? `master ${a.masterAddr}:${a.masterPort}` : ''].filter(Boolean).join(' · ')),
    table(['Rank', 'Node', 'GPUs', 'TP/PP/DP', 'State', 'Exit', 'PID', '', 'Message'], rows, {class: 'list placement'}));
}

// lossPoints are the progress lines with a loss, by step (rank 0's where
// it wrote any; a step written again, by a resumed attempt, keeps the
// newest).
function lossPoints(p) {
  if (!p) return [];
  const lines = [...(p.recent || []), p.latest].filter((l) => l && l.loss !== undefined && l.loss !== null);
  const zero = lines.filter((l) => !l.rank);
  const use = zero.length ? zero : lines;
  const by = new Map();
  for (const l of use) by.set(l.step, l);
  return [...by.values()].sort((a, b) => a.step - b.step)
    .map((l) => ({x: l.step, y: l.loss, title: `step ${l.step}: loss ${num(l.loss, 5)}${l.attempt ? ` (attempt ${l.attempt})` : ''}`}));
}

function renderProgress(el, p) {
  const pts = lossPoints(p);
  const latest = p ? p.latest : null;
  fill(el,
    latest ? h('p', {class: 'muted'}, `step ${latest.step}`, latest.loss !== undefined ? ` · loss ${num(latest.loss, 5)}` : '',
      latest.tokens ? ` · ${latest.tokens.toLocaleString()} tokens` : '', latest.time ? ` · ${when(latest.time)}` : '') :
      h('p', {class: 'muted'}, 'No progress yet: a workload appends {"step":…,"loss":…} lines to $GANGWAY_PROGRESS_FILE.'),
    pts.length ? lineChart(pts, {xLabel: 'step', yLabel: 'loss', cls: 'loss', width: Math.min(widthOf(el), 1100), height: 280}) : '');
}

function renderCheckpoints(el, cs) {
  if (!cs.length) {
    fill(el, h('p', {class: 'muted'}, 'None committed.'));
    return;
  }
  fill(el, table(['Step', 'Attempt', 'Committed', 'Path'], [...cs].reverse().slice(0, 20).map((c) => [c.step, c.attempt, when(c.time), h('code', null, c.path)]), {class: 'list'}));
}

// logPanel is the live tail of one rank's log: the current attempt's,
// followed while it runs, the last TAIL_LINES lines kept.
function logPanel(pageSignal, id) {
  const rank = h('select', {id: 'log-rank'}, h('option', {value: '0'}, 'rank 0'));
  const stream = h('select', {id: 'log-stream'}, ['both', 'stdout', 'stderr'].map((v) => h('option', {value: v}, v)));
  const state = h('span', {class: 'muted'});
  const pre = h('pre', {class: 'logs', id: 'logs'});
  const el = section('Logs', h('div', {class: 'controls'}, rank, stream, state), pre);
  let ranks = 1;
  let attempt = 0;
  let final = false;
  let ctl = null;
  let text = '';
  let pending = false;
  const show = () => {
    pending = false;
    const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    pre.textContent = text;
    if (atBottom) pre.scrollTop = pre.scrollHeight;
  };
  const append = (chunk) => {
    text += chunk;
    const lines = text.split('\n');
    if (lines.length > TAIL_LINES + 1) text = lines.slice(lines.length - TAIL_LINES - 1).join('\n');
    if (!pending) { pending = true; requestAnimationFrame(show); }
  };
  const start = async () => {
    if (ctl) ctl.abort();
    ctl = new AbortController();
    const signal = AbortSignal.any([pageSignal, ctl.signal]);
    text = '';
    show();
    if (!attempt) { fill(state, 'no attempt yet'); return; }
    const path = `/jobs/${encodeURIComponent(id)}/logs?rank=${rank.value}&attempt=${attempt}&stream=${stream.value}&follow=${final ? 0 : 1}`;
    let backoff = 1000;
    while (!signal.aborted) {
      fill(state, final ? `attempt ${attempt}` : `attempt ${attempt}, following`);
      try {
        await follow(path, signal, append);
        fill(state, `attempt ${attempt}, ended`);
        return;
      } catch (e) {
        if (signal.aborted) return;
        fill(state, e.message);
        // A rank not started yet has no log to follow: try again, unless
        // the job is over or the caller may not read it.
        if (e instanceof APIError && (e.status === 401 || e.status === 403 || final)) return;
        await sleep(backoff, signal);
        backoff = Math.min(30000, backoff * 2);
      }
    }
  };
  rank.addEventListener('change', start);
  stream.addEventListener('change', start);
  return {
    el,
    update(j) {
      const n = j.spec.ranks || 1;
      if (n !== ranks) {
        ranks = n;
        fill(rank, Array.from({length: Math.min(n, 4096)}, (_, i) => h('option', {value: i}, 'rank ' + i)));
      }
      const atts = j.status.attempts || [];
      const isFinal = ['Succeeded', 'Failed', 'Cancelled'].includes(j.status.phase);
      if (atts.length !== attempt) {
        attempt = atts.length;
        final = isFinal;
        start();
      } else if (isFinal && !final) {
        final = true; // the stream ends on its own with the attempt
      }
    },
  };
}
