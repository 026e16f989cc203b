// charts.js: the dashboard's charts, drawn by hand in SVG: a line chart
// (a job's loss, requests a second), a chart of several named lines (the
// simulator's policies), an attempts timeline, and a usage bar. Labels
// are text nodes, hover texts <title> elements.

import {s, num, duration, when, ms} from './dom.js';

// ticks returns about n round values spanning [lo, hi].
function ticks(lo, hi, n) {
  if (!(hi > lo)) return [lo];
  const step0 = (hi - lo) / n;
  const mag = Math.pow(10, Math.floor(Math.log10(step0)));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((st) => st >= step0);
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
  return out;
}

// lineChart draws points [{x, y, title}] as a line with a dot each.
export function lineChart(points, {width = 640, height = 240, xLabel = '', yLabel = '', cls = ''} = {}) {
  const pad = {l: 56, r: 16, t: 14, b: 36};
  const svg = s('svg', {class: 'chart ' + cls, viewBox: `0 0 ${width} ${height}`, width, height, role: 'img'});
  if (!points.length) {
    svg.append(s('text', {x: width / 2, y: height / 2, 'text-anchor': 'middle', class: 'muted'}, 'no points yet'));
    return svg;
  }
  let [x0, x1] = [Math.min(...points.map((p) => p.x)), Math.max(...points.map((p) => p.x))];
  let [y0, y1] = [Math.min(...points.map((p) => p.y)), Math.max(...points.map((p) => p.y))];
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  if (y0 === y1) { y0 -= Math.abs(y0) * 0.1 || 1; y1 += Math.abs(y1) * 0.1 || 1; }
  const span = y1 - y0;
  y0 -= span * 0.05; y1 += span * 0.05;
  const W = width - pad.l - pad.r;
  const H = height - pad.t - pad.b;
  const X = (x) => pad.l + ((x - x0) / (x1 - x0)) * W;
  const Y = (y) => pad.t + (1 - (y - y0) / (y1 - y0)) * H;
  const axes = s('g', {class: 'axes'});
  for (const t of ticks(y0, y1, 4)) {
    axes.append(s('line', {x1: pad.l, x2: pad.l + W, y1: Y(t), y2: Y(t), class: 'grid'}),
      s('text', {x: pad.l - 6, y: Y(t) + 4, 'text-anchor': 'end'}, num(t)));
  }
  for (const t of ticks(x0, x1, 6)) {
    axes.append(s('line', {x1: X(t), x2: X(t), y1: pad.t + H, y2: pad.t + H + 4, class: 'tick'}),
      s('text', {x: X(t), y: pad.t + H + 16, 'text-anchor': 'middle'}, num(t, 4)));
  }
  axes.append(s('line', {x1: pad.l, x2: pad.l + W, y1: pad.t + H, y2: pad.t + H, class: 'axis'}),
    s('line', {x1: pad.l, x2: pad.l, y1: pad.t, y2: pad.t + H, class: 'axis'}));
  if (xLabel) axes.append(s('text', {x: pad.l + W / 2, y: height - 4, 'text-anchor': 'middle', class: 'label'}, xLabel));
  if (yLabel) axes.append(s('text', {x: 12, y: pad.t + H / 2, 'text-anchor': 'middle', class: 'label', transform: `rotate(-90 12 ${pad.t + H / 2})`}, yLabel));
  svg.append(axes);
  svg.append(s('polyline', {class: 'line', points: points.map((p) => `${X(p.x).toFixed(1)},${Y(p.y).toFixed(1)}`).join(' ')}));
  const dots = s('g', {class: 'dots'});
  for (const p of points) {
    dots.append(s('circle', {class: 'pt', cx: X(p.x).toFixed(1), cy: Y(p.y).toFixed(1), r: 2.5}, s('title', null, p.title || `${num(p.x, 6)}: ${num(p.y, 4)}`)));
  }
  svg.append(dots);
  return svg;
}

// sparkline draws values as a small line, no axes.
export function sparkline(values, {width = 120, height = 24} = {}) {
  const svg = s('svg', {class: 'spark', viewBox: `0 0 ${width} ${height}`, width, height});
  if (values.length < 2) return svg;
  const hi = Math.max(...values, 1e-9);
  const X = (i) => (i / (values.length - 1)) * (width - 2) + 1;
  const Y = (v) => height - 2 - (v / hi) * (height - 4);
  svg.append(s('polyline', {class: 'line', points: values.map((v, i) => `${X(i).toFixed(1)},${Y(v).toFixed(1)}`).join(' ')}));
  return svg;
}

// attemptClass is the colour class of an attempt: running, or how it ended.
export function attemptClass(a) {
  if (a.phase !== 'Ended') return 'att-' + String(a.phase || 'running').toLowerCase();
  return 'att-' + String(a.cause || a.outcome || 'ended').toLowerCase();
}

// timeline draws a job's attempts as bars on one time axis, from the
// job's submission to its end (or now), each labelled with its number
// and cause.
export function timeline(job, {width = 900} = {}) {
  const atts = job.status.attempts || [];
  const rowH = 26;
  const pad = {l: 80, r: 16, t: 8, b: 28};
  const height = pad.t + pad.b + Math.max(1, atts.length) * rowH;
  const svg = s('svg', {class: 'chart timeline', viewBox: `0 0 ${width} ${height}`, width, height});
  const now = Date.now();
  const t0 = ms(job.submittedAt) || (atts.length ? ms(atts[0].createdAt) : now);
  const t1 = Math.max(ms(job.status.finishedAt) || now, t0 + 1000);
  const W = width - pad.l - pad.r;
  const X = (t) => pad.l + ((t - t0) / (t1 - t0)) * W;
  const g = s('g', {class: 'axes'});
  for (const f of [0, 0.25, 0.5, 0.75, 1]) {
    const t = t0 + f * (t1 - t0);
    g.append(s('line', {x1: X(t), x2: X(t), y1: pad.t, y2: height - pad.b, class: 'grid'}),
      s('text', {x: X(t), y: height - pad.b + 16, 'text-anchor': f === 0 ? 'start' : f === 1 ? 'end' : 'middle'}, f === 0 ? when(new Date(t).toISOString()) : '+' + duration(t - t0)));
  }
  svg.append(g);
  if (!atts.length) {
    svg.append(s('text', {x: pad.l, y: pad.t + 17}, 'waiting: no attempt yet'));
    return svg;
  }
  atts.forEach((a, i) => {
    const start = ms(a.createdAt) || t0;
    const end = ms(a.endedAt) || (a.phase === 'Ended' ? start : now);
    const y = pad.t + i * rowH + 3;
    const x = X(start);
    const w = Math.max(3, X(end) - x);
    const label = a.phase === 'Ended' ? (a.cause || a.outcome || 'ended') : a.phase.toLowerCase();
    const hover = `attempt ${a.number}: ${label}${a.reason ? ' — ' + a.reason : ''}\n${when(a.createdAt)} → ${a.endedAt ? when(a.endedAt) : 'now'} (${duration(end - start)})`;
    // The label goes after the bar, else inside it, else before it.
    const room = label.length * 6.5 + 8;
    let lx = x + w + 6; let anchor = 'start'; let cls = '';
    if (lx + room > width) {
      if (w > room + 6) { lx = x + 6; cls = 'inside'; } else { lx = x - 6; anchor = 'end'; }
    }
    svg.append(s('g', {class: 'attempt ' + attemptClass(a), 'data-attempt': a.number},
      s('text', {x: pad.l - 8, y: y + 14, 'text-anchor': 'end'}, 'attempt ' + a.number),
      s('rect', {x, y, width: w, height: rowH - 8, rx: 3}),
      s('text', {x: lx, y: y + 14, 'text-anchor': anchor, class: cls}, label),
      s('title', null, hover)));
  });
  return svg;
}

// usageBar draws a queue's guarantee, use (borrowed part apart) and
// pending demand on one scale of max GPUs.
export function usageBar(q, max, {width = 220, height = 18} = {}) {
  const st = q.status || {};
  const g = q.spec.guaranteeGPUs || 0;
  const used = st.usedGPUs || 0;
  const borrowed = st.borrowedGPUs || 0;
  const pending = st.pendingGPUs || 0;
  const X = (v) => (v / Math.max(max, 1)) * (width - 2) + 1;
  const svg = s('svg', {class: 'bar', viewBox: `0 0 ${width} ${height}`, width, height},
    s('rect', {class: 'used', x: 1, y: 3, width: X(used - borrowed) - 1, height: height - 6}),
    s('rect', {class: 'borrowed', x: X(used - borrowed), y: 3, width: X(used) - X(used - borrowed), height: height - 6}),
    s('rect', {class: 'pending', x: X(used), y: 3, width: X(used + pending) - X(used), height: height - 6}),
    s('rect', {class: 'guarantee', x: 1, y: 1, width: X(g) - 1, height: height - 2}),
    s('title', null, `guarantee ${g}, used ${used} (borrowed ${borrowed}), pending ${pending} GPUs`));
  return svg;
}

// SERIES is how many colours linesChart has (classes s0…s5); lines past
// them reuse them.
export const SERIES = 6;

// linesChart draws named lines [{name, x: [], y: []}] on one pair of axes,
// each a path of its own colour (class sN, as the legend's swatches),
// with the line's name as its hover text. logX puts x on a log scale (of
// positive values); xTicks are the x ticks to draw where in range
// (default: round values); xFormat and yFormat write the ticks; yMin and
// yMax fix the y range.
export function linesChart(lines, {width = 640, height = 260, xLabel = '', yLabel = '', logX = false, xTicks = null,
  xFormat = (v) => num(v, 4), yFormat = (v) => num(v), yMin, yMax, cls = ''} = {}) {
  const pad = {l: 56, r: 16, t: 14, b: 36};
  const svg = s('svg', {class: 'chart lines ' + cls, viewBox: `0 0 ${width} ${height}`, width, height, role: 'img'});
  const fx = logX ? (x) => Math.log10(Math.max(x, 1e-9)) : (x) => x;
  const xs = lines.flatMap((l) => l.x.filter((x) => !logX || x > 0).map(fx));
  const ys = lines.flatMap((l) => l.y);
  if (!xs.length) {
    svg.append(s('text', {x: width / 2, y: height / 2, 'text-anchor': 'middle', class: 'muted'}, 'nothing to draw'));
    return svg;
  }
  let [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  let y0 = yMin ?? Math.min(0, ...ys);
  let y1 = yMax ?? Math.max(...ys);
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  if (y0 === y1) y1 = y0 + 1;
  const W = width - pad.l - pad.r;
  const H = height - pad.t - pad.b;
  const X = (x) => pad.l + ((fx(x) - x0) / (x1 - x0)) * W;
  const Y = (y) => pad.t + (1 - (y - y0) / (y1 - y0)) * H;
  const axes = s('g', {class: 'axes'});
  for (const t of ticks(y0, y1, 4)) {
    axes.append(s('line', {x1: pad.l, x2: pad.l + W, y1: Y(t), y2: Y(t), class: 'grid'}),
      s('text', {x: pad.l - 6, y: Y(t) + 4, 'text-anchor': 'end'}, yFormat(t)));
  }
  let xt;
  if (xTicks) xt = xTicks.filter((t) => fx(t) >= x0 && fx(t) <= x1);
  else if (logX) xt = ticks(Math.ceil(x0), Math.floor(x1), 6).filter(Number.isInteger).map((e) => 10 ** e);
  else xt = ticks(x0, x1, 6);
  for (const t of xt) {
    axes.append(s('line', {x1: X(t), x2: X(t), y1: pad.t + H, y2: pad.t + H + 4, class: 'tick'}),
      s('text', {x: X(t), y: pad.t + H + 16, 'text-anchor': 'middle'}, xFormat(t)));
  }
  axes.append(s('line', {x1: pad.l, x2: pad.l + W, y1: pad.t + H, y2: pad.t + H, class: 'axis'}),
    s('line', {x1: pad.l, x2: pad.l, y1: pad.t, y2: pad.t + H, class: 'axis'}));
  if (xLabel) axes.append(s('text', {x: pad.l + W / 2, y: height - 4, 'text-anchor': 'middle', class: 'label'}, xLabel));
  if (yLabel) axes.append(s('text', {x: 12, y: pad.t + H / 2, 'text-anchor': 'middle', class: 'label', transform: `rotate(-90 12 ${pad.t + H / 2})`}, yLabel));
  svg.append(axes);
  lines.forEach((l, i) => {
    let d = '';
    l.x.forEach((x, k) => {
      if (logX && !(x > 0)) return;
      d += (d ? 'L' : 'M') + X(x).toFixed(1) + ',' + Y(l.y[k]).toFixed(1);
    });
    if (d) svg.append(s('path', {class: `series s${i % SERIES}`, d, 'data-series': l.name}, s('title', null, l.name)));
  });
  return svg;
}
