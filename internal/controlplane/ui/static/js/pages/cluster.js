// The cluster as its topology: spines, leaves and NVLink domains (the
// nodes' labels) holding nodes, each node its GPUs, coloured by use
// (a job's GPUs share its colour) and health; hovering a GPU names its
// job and rank. Two blocking loops: the nodes, and the live jobs.

import {h, fill, badge, hue, bytes, ago, when} from '../dom.js';
import {watch} from '../api.js';

export function cluster(main, signal) {
  const summary = h('div', {class: 'summary'});
  const err = h('p', {class: 'error', hidden: true});
  const body = h('div', {class: 'topology'}, h('p', {class: 'muted'}, 'Loading nodes…'));
  fill(main, h('h1', null, 'Cluster'), summary, legend(), err, body);
  let nodes = null;
  let jobs = [];
  const draw = () => {
    if (nodes) render(summary, body, nodes, jobs);
  };
  const onError = (e) => {
    err.hidden = !e;
    if (e) fill(err, e.message);
  };
  watch('/nodes', signal, (b) => { nodes = b.nodes || []; draw(); }, onError);
  watch('/jobs?live=1', signal, (b) => { jobs = b.jobs || []; draw(); }, onError);
}

function legend() {
  return h('div', {class: 'legend'},
    h('span', {class: 'gpu free'}), 'free',
    h('span', {class: 'gpu used legend-used'}), 'in use (colour per job)',
    h('span', {class: 'gpu fault'}), 'faulty',
    h('span', {class: 'gpu lost'}), 'lost',
    h('span', {class: 'node-swatch cordoned'}), 'cordoned / draining',
    h('span', {class: 'node-swatch lost'}), 'node lost');
}

// holders maps "node/gpu" to the ranks of running jobs on it.
function holders(jobs) {
  const out = new Map();
  for (const j of jobs) {
    if (j.status.phase !== 'Running' && j.status.phase !== 'Stopping') continue;
    const atts = j.status.attempts || [];
    const a = atts[atts.length - 1];
    if (!a || a.phase === 'Ended') continue;
    for (const p of a.placement || []) {
      for (const g of p.gpus || []) {
        const k = p.node + '/' + g;
        if (!out.has(k)) out.set(k, []);
        out.get(k).push({job: j, rank: p.rank, milli: p.milli});
      }
    }
  }
  return out;
}

function render(summary, body, nodes, jobs) {
  const held = holders(jobs);
  let ready = 0; let lost = 0; let out = 0; let gpus = 0; let used = 0; let faulty = 0;
  for (const n of nodes) {
    if (n.status.state === 'Lost') lost++;
    else ready++;
    if (n.status.cordoned || n.status.draining || n.status.fault) out++;
    for (const g of n.gpus || []) {
      gpus++;
      if (held.has(n.name + '/' + g.index)) used++;
      if (g.health && g.health !== 'ok') faulty++;
    }
  }
  fill(summary,
    h('span', null, h('b', null, nodes.length), ' nodes: ', h('b', {class: 'ok'}, ready), ' ready, ', h('b', {class: lost ? 'bad' : ''}, lost), ' lost, ', out, ' out of service'),
    h('span', null, h('b', null, used), ' of ', h('b', null, gpus), ' GPUs in use', faulty ? [', ', h('b', {class: 'bad'}, faulty), ' faulty'] : ''),
    h('span', null, h('b', null, jobs.filter((j) => j.status.phase === 'Running').length), ' running jobs, ',
      h('b', null, jobs.filter((j) => j.status.phase === 'Pending' || j.status.phase === 'Restarting').length), ' waiting'));
  if (!nodes.length) {
    fill(body, h('p', {class: 'muted'}, 'No nodes yet: start an agent (gangway agent --join …).'));
    return;
  }
  // spine → leaf → NVLink domain → nodes; a level a node has no label for
  // is skipped.
  const tree = new Map();
  const sorted = [...nodes].sort((a, b) => a.name.localeCompare(b.name, undefined, {numeric: true}));
  for (const n of sorted) {
    const l = n.labels || {};
    const path = [['spine', l.spine], ['leaf', l.leaf], ['NVLink domain', l['nvlink-domain']]];
    let level = tree;
    for (const [kind, v] of path) {
      if (!v) continue;
      const k = kind + '\u0000' + v;
      if (!level.has(k)) level.set(k, new Map());
      level = level.get(k);
    }
    if (!level.has('')) level.set('', []);
    level.get('').push(n);
  }
  fill(body, group(tree, held));
}

function group(level, held) {
  const out = [];
  const leaves = level.get('');
  if (leaves) out.push(h('div', {class: 'nodes'}, leaves.map((n) => node(n, held))));
  const keys = [...level.keys()].filter((k) => k).sort((a, b) => a.localeCompare(b, undefined, {numeric: true}));
  for (const k of keys) {
    const [kind, name] = k.split('\u0000');
    out.push(h('div', {class: 'group group-' + kind.split(' ')[0].toLowerCase()},
      h('div', {class: 'group-head'}, kind + ' ', h('b', null, name)), group(level.get(k), held)));
  }
  return out;
}

function node(n, held) {
  const st = n.status;
  const lost = st.state === 'Lost';
  const flags = [];
  if (lost) flags.push(badge('lost', 'bad'));
  else flags.push(badge('ready', 'good'));
  if (st.draining) flags.push(badge('draining', 'warn'));
  else if (st.cordoned) flags.push(badge('cordoned', 'warn'));
  if (st.fault) flags.push(badge('fault', 'bad'));
  if (st.lemon) flags.push(badge('lemon', 'warn'));
  const cls = ['node', lost ? 'lost' : 'ready', st.cordoned || st.draining ? 'cordoned' : '', st.fault ? 'fault' : ''].filter(Boolean).join(' ');
  const info = [
    n.name, `${(n.gpus || []).length} GPUs, ${n.cpus || '?'} CPUs, ${bytes(n.memoryBytes)}`,
    lost ? `lost ${ago(st.lostAt)} (last heard ${when(st.lastHeartbeat || st.lastSeenAt)})` : `heartbeat ${ago(st.lastHeartbeat)}`,
  ];
  if (st.reason) info.push(st.reason);
  if (st.fault) info.push('fault: ' + st.fault);
  const labels = Object.entries(n.labels || {}).map(([k, v]) => `${k}=${v}`).join(' ');
  if (labels) info.push(labels);
  return h('div', {class: cls, 'data-node': n.name},
    h('div', {class: 'node-head', 'data-tip': info.join('\n')}, h('span', {class: 'node-name'}, n.name), flags),
    h('div', {class: 'gpus'}, (n.gpus || []).map((g) => gpu(n, g, held.get(n.name + '/' + g.index), lost))));
}

function gpu(n, g, on, nodeLost) {
  let cls = 'gpu free';
  const lines = [`${n.name} GPU ${g.index}: ${g.model} ${bytes(g.memoryBytes)}`];
  if (g.health === 'fault') { cls = 'gpu fault'; lines.push('fault: ' + (g.fault || 'out of service')); }
  else if (g.health === 'lost' || nodeLost) { cls = 'gpu lost'; lines.push(nodeLost ? 'node lost' : 'lost: NVML no longer answers'); }
  let job = '';
  if (on && on.length) {
    cls += ' used';
    job = on[0].job.id;
    for (const r of on) {
      lines.push(`job ${r.job.id} “${r.job.spec.name || '(no name)'}” rank ${r.rank}${r.milli ? ` (${r.milli / 10}%)` : ''} · ${r.job.spec.queue || 'default'} · ${r.job.spec.user || ''}`);
    }
  } else if (cls === 'gpu free') {
    lines.push('free');
  }
  const el = h('span', {class: cls, 'data-gpu': g.index, 'data-job': job || null, 'data-tip': lines.join('\n'), 'aria-label': lines.join('; ')}, String(g.index));
  if (job && !nodeLost && (!g.health || g.health === 'ok')) el.style.backgroundColor = hue(job);
  return el;
}
