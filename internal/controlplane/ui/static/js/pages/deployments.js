// Deployments: each one's replicas (ready of desired, within min and max),
// and from this server's gateway its requests a second, mean time to
// first token and mean time per output token over the last interval. One
// blocking loop on the deployments; the gateway's counters, which have no
// index, are read every few seconds while the page is open.

import {h, fill, badge, num, seconds, heads} from '../dom.js';
import {watch, poll} from '../api.js';
import {sparkline} from '../charts.js';

const PERIOD = 5000;
const HISTORY = 60;

export function deployments(main, signal) {
  const err = h('p', {class: 'error', hidden: true});
  const body = h('div', null, h('p', {class: 'muted'}, 'Loading deployments…'));
  fill(main, h('h1', null, 'Deployments'),
    h('p', {class: 'muted'}, 'Latency and rates are what this server’s gateway served, over the last ', PERIOD / 1000, ' seconds.'), err, body);
  let list = null;
  // rates by model: the last counters read, and each interval's figures.
  const rates = new Map();
  const draw = () => { if (list) render(body, list, rates); };
  watch('/deployments', signal, (b) => { list = b.deployments || []; draw(); }, (e) => {
    err.hidden = !e;
    if (e) fill(err, e.message);
  });
  poll('/gateway/stats', PERIOD, signal, (st) => {
    const at = Date.parse(st.at);
    for (const m of st.models || []) {
      const r = rates.get(m.model) || {history: []};
      const prev = r.last;
      r.last = {...m, at};
      if (prev && at > prev.at && m.requests >= prev.requests) {
        const dt = (at - prev.at) / 1000;
        const dn = m.requests - prev.requests;
        r.rps = dn / dt;
        r.errors = (m.errors - prev.errors) / dt;
        const dTTFT = m.ttftCount - prev.ttftCount;
        const dTPOT = m.tpotCount - prev.tpotCount;
        r.ttft = dTTFT > 0 && m.ttftSeconds >= prev.ttftSeconds ? (m.ttftSeconds - prev.ttftSeconds) / dTTFT : null;
        r.tpot = dTPOT > 0 && m.tpotSeconds >= prev.tpotSeconds ? (m.tpotSeconds - prev.tpotSeconds) / dTPOT : null;
        r.history.push(r.rps);
        if (r.history.length > HISTORY) r.history.shift();
      } else if (!prev) {
        // Until a second read, the means since the gateway started.
        r.ttft = m.ttftCount ? m.ttftSeconds / m.ttftCount : null;
        r.tpot = m.tpotCount ? m.tpotSeconds / m.tpotCount : null;
      }
      rates.set(m.model, r);
    }
    draw();
  }, (e) => {
    if (e && e.status !== 401) {
      err.hidden = false;
      fill(err, 'gateway figures: ' + e.message);
    }
  });
}

function render(body, list, rates) {
  if (!list.length) {
    fill(body, h('p', {class: 'muted'}, 'No deployments: gangway deploy FILE.'));
    return;
  }
  const rows = [...list].sort((a, b) => a.spec.name.localeCompare(b.spec.name)).map((d) => {
    const sp = d.spec;
    const st = d.status || {};
    const model = sp.servedModelName || sp.model;
    const r = rates.get(model) || {};
    const live = (st.replicas || []).filter((x) => !x.retiring);
    const range = sp.autoscale ? `autoscale ${sp.minReplicas ?? 0}–${sp.maxReplicas}` : '';
    return h('tr', {'data-deployment': sp.name},
      h('td', null, h('b', null, sp.name), st.deleting ? [' ', badge('deleting', 'warn')] : ''),
      h('td', null, model, model !== sp.model ? h('span', {class: 'muted'}, ' (', sp.model, ')') : ''),
      h('td', null, sp.engine || ''),
      h('td', {class: 'num'}, `${st.ready || 0} / ${st.desired ?? live.length}`, range ? h('div', {class: 'muted small'}, range) : ''),
      h('td', {class: 'num rps'}, r.rps === undefined ? '—' : num(r.rps, 3), r.errors ? h('div', {class: 'bad small'}, num(r.errors, 2), ' err/s') : ''),
      h('td', null, sparkline(r.history || [])),
      h('td', {class: 'num ttft'}, seconds(r.ttft)),
      h('td', {class: 'num tpot'}, seconds(r.tpot)),
      h('td', null, live.map((x) => h('a', {href: '#/jobs/' + encodeURIComponent(x.jobId), class: 'replica ' + (x.ready ? 'ready' : 'starting')}, x.jobId))),
      h('td', {class: 'reason'}, st.reason || ''));
  });
  fill(body, h('table', {class: 'list deployments'},
    heads(['Deployment', 'Model', 'Engine', 'Ready / desired#', 'Requests/s#', '', 'TTFT#', 'TPOT#', 'Replicas', 'Reason']),
    h('tbody', null, rows)));
}
