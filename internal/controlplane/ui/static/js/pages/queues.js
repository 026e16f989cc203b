// Queues: each queue's guarantee, what it uses (and of that, what it
// borrows beyond its guarantee), what waits, with a bar each on one
// scale. One blocking loop: the queue list wakes for queues and jobs.

import {h, fill, num, heads} from '../dom.js';
import {watch} from '../api.js';
import {usageBar} from '../charts.js';

export function queues(main, signal) {
  const err = h('p', {class: 'error', hidden: true});
  const body = h('div', null, h('p', {class: 'muted'}, 'Loading queues…'));
  fill(main, h('h1', null, 'Queues'), h('div', {class: 'legend'},
    h('span', {class: 'swatch used'}), 'used within guarantee',
    h('span', {class: 'swatch borrowed'}), 'borrowed',
    h('span', {class: 'swatch pending'}), 'pending',
    h('span', {class: 'swatch guarantee'}), 'guarantee'), err, body);
  watch('/queues', signal, (b) => render(body, b.queues || []), (e) => {
    err.hidden = !e;
    if (e) fill(err, e.message);
  });
}

function render(body, qs) {
  const max = Math.max(1, ...qs.map((q) => Math.max(q.spec.guaranteeGPUs || 0, (q.status.usedGPUs || 0) + (q.status.pendingGPUs || 0))));
  const rows = qs.map((q) => {
    const st = q.status || {};
    const limit = q.spec.borrowLimitGPUs;
    return h('tr', {'data-queue': q.spec.name},
      h('td', null, h('b', null, q.spec.name)),
      h('td', null, q.spec.cohort || ''),
      h('td', {class: 'num'}, num(q.spec.weight || 1)),
      h('td', {class: 'num'}, q.spec.guaranteeGPUs || 0),
      h('td', {class: 'num'}, st.usedGPUs || 0),
      h('td', {class: 'num'}, st.borrowedGPUs || 0),
      h('td', {class: 'num'}, limit === undefined || limit === null ? '∞' : limit),
      h('td', {class: 'num'}, st.runningJobs || 0),
      h('td', {class: 'num'}, (st.pendingJobs || 0) + (st.pendingJobs ? ` (${st.pendingGPUs} GPUs)` : '')),
      h('td', null, usageBar(q, max)),
      h('td', null, h('a', {href: '#/jobs?queue=' + encodeURIComponent(q.spec.name)}, 'jobs')));
  });
  fill(body, h('table', {class: 'list queues'},
    heads(['Queue', 'Cohort', 'Weight#', 'Guarantee#', 'Used#', 'Borrowed#', 'Borrow limit#', 'Running#', 'Pending#', 'GPUs', '']),
    h('tbody', null, rows)));
}
