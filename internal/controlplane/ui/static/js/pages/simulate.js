// Simulate: replay a trace through the scheduler in virtual time, as
// `gangway simulate` does, on the server (POST /v1/simulate): a trace
// named from the server's --trace-dir or uploaded from this computer,
// the policies to compare and the cluster to size. While it runs the page
// says for how long (Cancel ends it on the server too); then it draws
// each policy's JCT distribution, GPU utilization and jobs waiting over
// time, and a table of their summaries. Trace and file names are shown as
// text, like everything else.

import {h, fill, num, duration, bytes, seconds, section, facts, heads, widthOf} from '../dom.js';
import {get, post} from '../api.js';
import {linesChart, SERIES} from '../charts.js';

// JCT ticks: round durations, in seconds.
const JCT_TICKS = [1, 10, 60, 600, 3600, 6 * 3600, 86400, 7 * 86400, 30 * 86400, 365 * 86400];

export function simulate(main, signal) {
  const err = h('p', {class: 'error', hidden: true});
  const form = h('form', {class: 'sim-form'}, h('p', {class: 'muted'}, 'Loading the traces…'));
  const state = h('p', {class: 'sim-state muted'});
  const result = h('div', {class: 'sim-result'});
  fill(main, h('h1', null, 'Simulate'),
    h('p', {class: 'muted'}, 'Replay a trace through the scheduler the server runs, in virtual time, and compare policies: ',
      'what ', h('code', null, 'gangway simulate'), ' does, run on the server. Traces: Philly, Helios, openb, or gangway’s CSV or JSON lines (',
      h('code', null, 'submit,duration,gpus'), ').'),
    form, state, err, result);
  get('/simulate/traces', signal).then(({body}) => {
    if (!signal.aborted) buildForm(form, body, {err, state, result, signal});
  }, (e) => {
    if (signal.aborted) return;
    fill(form);
    err.hidden = false;
    fill(err, e.message);
  });
}

function buildForm(form, info, ui) {
  const traces = info.traces || [];
  const named = h('select', {id: 'sim-trace', 'data-field': 'trace'},
    traces.map((t) => h('option', {value: t.name}, `${t.name} (${bytes(t.bytes)})`)));
  const file = h('input', {id: 'sim-file', type: 'file', accept: '.csv,.jsonl,.json,.txt', 'data-field': 'traceData'});
  const useNamed = h('input', {type: 'radio', name: 'sim-source', id: 'sim-source-named', value: 'named', checked: traces.length > 0, disabled: !traces.length});
  const useFile = h('input', {type: 'radio', name: 'sim-source', id: 'sim-source-file', value: 'file', checked: !traces.length});
  file.addEventListener('change', () => { useFile.checked = true; });
  named.addEventListener('change', () => { if (traces.length) useNamed.checked = true; });
  const picks = (info.policies || []).map((p) => h('label', {class: 'check'},
    h('input', {type: 'checkbox', value: p, checked: p === info.defaultPolicy || p === 'fifo'}), ' ', p));
  const sizeBy = h('select', {id: 'sim-size-by'}, h('option', {value: 'load'}, 'load'), h('option', {value: 'nodes'}, 'nodes'));
  const size = h('input', {id: 'sim-size', type: 'number', min: '0', step: 'any', value: '0.8', 'data-field': 'load'});
  sizeBy.addEventListener('change', () => {
    size.value = sizeBy.value === 'load' ? '0.8' : '16';
    size.setAttribute('data-field', sizeBy.value);
  });
  const gpn = h('input', {id: 'sim-gpus', type: 'number', min: '1', step: '1', value: '8', 'data-field': 'gpusPerNode'});
  const from = h('input', {id: 'sim-from', type: 'text', placeholder: 'YYYY-MM-DD', 'data-field': 'from'});
  const to = h('input', {id: 'sim-to', type: 'text', placeholder: 'YYYY-MM-DD', 'data-field': 'to'});
  const run = h('button', {id: 'sim-run', type: 'submit', class: 'primary'}, 'Run');
  const cancel = h('button', {id: 'sim-cancel', type: 'button', hidden: true}, 'Cancel');
  fill(form,
    h('div', {class: 'row'}, h('span', {class: 'what'}, 'Trace'),
      h('label', null, useNamed, ' named ', named),
      traces.length ? null : h('span', {class: 'muted small'}, info.traceDir ? 'the trace directory is empty' : 'the server has no --trace-dir'),
      h('label', null, useFile, ' upload ', file),
      h('span', {class: 'muted small'}, 'at most ', bytes(info.maxTraceBytes))),
    h('div', {class: 'row', 'data-field': 'policies'}, h('span', {class: 'what'}, 'Policies'), picks),
    h('div', {class: 'row'}, h('span', {class: 'what'}, 'Cluster'), 'size by ', sizeBy, ' ', size,
      h('label', null, ' of ', gpn, ' GPUs a node'),
      h('span', {class: 'muted small'}, 'load: nodes enough that the trace’s GPU-time is that share of the capacity over its span')),
    h('div', {class: 'row'}, h('span', {class: 'what'}, 'Window'), h('label', null, 'from ', from), h('label', null, 'to ', to),
      h('span', {class: 'muted small'}, 'optional: jobs submitted in it, for traces with dates')),
    h('div', {class: 'row'}, h('span', {class: 'what'}), run, cancel));

  let running = null; // the run's AbortController
  cancel.addEventListener('click', () => { if (running) running.abort(); });
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    if (running) return;
    for (const el of form.querySelectorAll('.bad-field')) el.classList.remove('bad-field');
    ui.err.hidden = true;
    const req = {
      policies: picks.map((l) => l.querySelector('input')).filter((c) => c.checked).map((c) => c.value),
      gpusPerNode: Number(gpn.value) || 0,
      from: from.value.trim() || undefined,
      to: to.value.trim() || undefined,
    };
    req[sizeBy.value] = Number(size.value) || 0;
    let label;
    if (useFile.checked) {
      const f = file.files && file.files[0];
      if (!f) return fail(ui, form, 'Choose a trace file to upload.', ['traceData']);
      if (f.size > info.maxTraceBytes) return fail(ui, form, `${f.name} has ${bytes(f.size)}; an upload may have at most ${bytes(info.maxTraceBytes)}.`, ['traceData']);
      req.traceData = await f.text();
      req.traceName = f.name;
      label = f.name;
    } else {
      req.trace = named.value;
      label = named.value;
    }
    running = new AbortController();
    const sig = AbortSignal.any([ui.signal, running.signal]);
    const started = Date.now();
    const say = () => fill(ui.state, h('span', {class: 'spinner'}), ` Running ${req.policies.join(', ') || 'the default policy'} over `, h('b', null, label), ` for ${duration(Date.now() - started)}…`);
    say();
    const tick = setInterval(say, 500);
    run.disabled = true;
    cancel.hidden = false;
    ui.state.setAttribute('data-state', 'running');
    try {
      const res = await post('/simulate', req, sig);
      fill(ui.state, `Ran in ${seconds(res.seconds)}.`);
      ui.state.setAttribute('data-state', 'done');
      render(ui.result, res);
    } catch (e) {
      if (ui.signal.aborted) return;
      fill(ui.state, running.signal.aborted ? 'Cancelled.' : '');
      ui.state.setAttribute('data-state', running.signal.aborted ? 'cancelled' : 'failed');
      if (!running.signal.aborted) fail(ui, form, e.message, (e.fields || []).map((f) => f.field));
    } finally {
      clearInterval(tick);
      running = null;
      run.disabled = false;
      cancel.hidden = true;
    }
  });
}

// fail says what went wrong and marks the fields at fault.
function fail(ui, form, msg, fields) {
  ui.err.hidden = false;
  fill(ui.err, msg);
  for (const f of fields) {
    for (const el of form.querySelectorAll('[data-field]')) {
      if (el.getAttribute('data-field') === f) el.classList.add('bad-field');
    }
  }
}

// short writes a duration in seconds as its largest unit: 90s → 1.5m.
function short(sec) {
  if (sec < 60) return num(sec, 2) + 's';
  if (sec < 3600) return num(sec / 60, 2) + 'm';
  if (sec < 86400) return num(sec / 3600, 2) + 'h';
  return num(sec / 86400, 3) + 'd';
}

function render(el, res) {
  const runs = res.runs || [];
  const width = widthOf(el, 640) - 34; // a panel's padding
  const span = Math.max(1, ...runs.map((r) => r.series.seconds.at(-1) || 0));
  const [unit, per] = span > 3 * 86400 ? ['days', 86400] : ['hours', 3600];
  const swatch = (i) => h('span', {class: `swatch s${i % SERIES}`});
  const legend = h('div', {class: 'legend'}, runs.map((r, i) => h('span', null, swatch(i), ' ', r.summary.policy)));
  const over = (pick) => runs.map((r) => ({name: r.summary.policy, x: r.series.seconds.map((t) => t / per), y: r.series[pick].map((v) => (pick === 'busyGPUs' ? v / res.gpus : v))}));
  const rows = runs.map((r, i) => {
    const m = r.summary;
    return h('tr', {'data-policy': m.policy},
      h('td', null, swatch(i), ' ', h('b', null, m.policy)),
      h('td', {class: 'num'}, m.jobs), h('td', {class: 'num'}, m.unfinished || ''),
      ...[m.avgJCTSeconds, m.p50JCTSeconds, m.p95JCTSeconds, m.p99JCTSeconds, m.avgQueueSeconds, m.maxQueueSeconds, m.makespanSeconds]
        .map((v) => h('td', {class: 'num'}, short(v))),
      h('td', {class: 'num'}, num(100 * m.gpuUtilization, 3) + '%'),
      h('td', {class: 'num'}, m.preemptions),
      h('td', {class: 'num'}, num(100 * m.fragBlocked, 2) + '%'));
  });
  fill(el,
    facts([['Trace', res.trace], ['Jobs', `${res.jobs}${res.skipped ? ` (${res.skipped} left out)` : ''}`],
      ['Cluster', `${res.cluster} (${res.gpus} GPUs)`], ['Placement', res.placement]]),
    section('Summary', h('table', {class: 'list sim-summary'},
      heads(['Policy', 'Jobs#', 'Unfinished#', 'Avg JCT#', 'p50#', 'p95#', 'p99#', 'Avg queue#', 'Max queue#', 'Makespan#', 'GPU util#', 'Preempted#', 'Frag-blocked#']),
      h('tbody', null, rows))),
    section('Job completion time', legend.cloneNode(true),
      linesChart(runs.map((r) => ({name: r.summary.policy, x: r.jct.seconds, y: r.jct.fraction})),
        {cls: 'sim-jct', width, logX: true, xTicks: JCT_TICKS, xFormat: short, yMin: 0, yMax: 1, xLabel: 'job completion time (log scale)', yLabel: 'share of jobs done', yFormat: (v) => num(100 * v) + '%'})),
    section('GPU utilization', legend.cloneNode(true),
      linesChart(over('busyGPUs'), {cls: 'sim-util', width, yMin: 0, yMax: 1, xLabel: unit + ' since the first submission', yLabel: 'GPUs busy', yFormat: (v) => num(100 * v) + '%'})),
    section('Jobs waiting', legend.cloneNode(true),
      linesChart(over('pending'), {cls: 'sim-queue', width, xLabel: unit + ' since the first submission', yLabel: 'jobs waiting'})));
}
