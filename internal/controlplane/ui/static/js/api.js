// api.js: talking to /v1. The token lives in this tab's sessionStorage
// and goes to the server alone, as Authorization: Bearer; a server that
// lets a request through without one gets none.
//
// Live updates are blocking queries (?index=N&wait=30s): watch runs one
// loop per list on the page, each request waiting until what it lists
// changed, at most one answer a second per loop, paused while the tab is
// hidden, backing off on errors. Leaving a page aborts its loops.

const KEY = 'gangway.token';

export const auth = {
  token() { return sessionStorage.getItem(KEY) || ''; },
  set(t) {
    if (t) sessionStorage.setItem(KEY, t);
    else sessionStorage.removeItem(KEY);
    window.dispatchEvent(new Event('gangway:auth'));
  },
};

export class APIError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// Hooks the app sets: a 401 (show the login box), and the connection's
// state for the header (ok true, or false with what failed).
export const hooks = {
  unauthorized(message) {},
  connection(ok, message) {},
};

function headers() {
  const hd = {Accept: 'application/json'};
  const t = auth.token();
  if (t) hd.Authorization = 'Bearer ' + t;
  return hd;
}

async function failure(resp) {
  let msg = resp.status + ' ' + resp.statusText;
  let fields = [];
  try {
    const body = await resp.json();
    if (body && body.error) msg = body.error;
    if (body && body.fields) fields = body.fields;
  } catch (e) { /* not JSON */ }
  if (resp.status === 401) hooks.unauthorized(msg);
  const err = new APIError(resp.status, msg);
  err.fields = fields;
  return err;
}

// get fetches /v1+path: its body and its index (X-Gangway-Index, or the
// body's index).
export async function get(path, signal) {
  const resp = await fetch('/v1' + path, {headers: headers(), signal, cache: 'no-store', credentials: 'omit'});
  if (!resp.ok) throw await failure(resp);
  const body = await resp.json();
  const index = Number(resp.headers.get('X-Gangway-Index')) || (body && body.index) || 0;
  return {body, index};
}

// post sends body as JSON to /v1+path and resolves to the answer's body;
// a failure throws an APIError with the server's message and, for bad
// input, the fields at fault (error.fields).
export async function post(path, body, signal) {
  const hd = headers();
  hd['Content-Type'] = 'application/json';
  const resp = await fetch('/v1' + path, {method: 'POST', headers: hd, body: JSON.stringify(body), signal, cache: 'no-store', credentials: 'omit'});
  if (!resp.ok) throw await failure(resp);
  return resp.json();
}

// sleep resolves after millis, or at once when signal aborts.
export function sleep(millis, signal) {
  return new Promise((resolve) => {
    if (signal && signal.aborted) return resolve();
    const t = setTimeout(done, Math.max(0, millis));
    function done() {
      clearTimeout(t);
      if (signal) signal.removeEventListener('abort', done);
      resolve();
    }
    if (signal) signal.addEventListener('abort', done);
  });
}

// until resolves on the first of window's event name, or on abort.
function until(name, signal) {
  return new Promise((resolve) => {
    const done = () => {
      window.removeEventListener(name, done);
      document.removeEventListener(name, done);
      if (signal) signal.removeEventListener('abort', done);
      resolve();
    };
    window.addEventListener(name, done);
    document.addEventListener(name, done);
    if (signal) signal.addEventListener('abort', done);
  });
}

// draw hands an answer to a page. A page that fails to draw it is a bug,
// said on the console (the browser test fails on it); the loop goes on.
function draw(onData, ...args) {
  try {
    onData(...args);
  } catch (e) {
    console.error('gangway: drawing an answer failed:', e);
  }
}

const aborted = (e, signal) => (signal && signal.aborted) || (e && e.name === 'AbortError');

// watch calls onData(body, index) with path's answer, then with each
// answer whose index moved, until signal aborts. onError (optional) hears
// failures, and null once one succeeds again.
export async function watch(path, signal, onData, onError, opts = {}) {
  const minGap = opts.minGap ?? 1000;
  const wait = opts.wait ?? '30s';
  let index = 0;
  let backoff = 0;
  let failing = false;
  const sep = path.includes('?') ? '&' : '?';
  while (!signal.aborted) {
    while (document.hidden && !signal.aborted) await until('visibilitychange', signal);
    if (signal.aborted) return;
    const started = Date.now();
    try {
      const r = await get(index ? `${path}${sep}index=${index}&wait=${wait}` : path, signal);
      if (signal.aborted) return;
      backoff = 0;
      if (failing) {
        failing = false;
        if (onError) onError(null);
      }
      hooks.connection(true);
      if (!index || r.index !== index) {
        index = r.index;
        draw(onData, r.body, r.index);
      }
      await sleep(minGap - (Date.now() - started), signal);
    } catch (e) {
      if (aborted(e, signal)) return;
      failing = true;
      if (onError) onError(e);
      if (e instanceof APIError && e.status === 401) {
        await until('gangway:auth', signal);
        index = 0;
        continue;
      }
      if (!(e instanceof APIError)) hooks.connection(false, e.message);
      backoff = Math.min(30000, backoff ? backoff * 2 : 1000);
      await sleep(backoff, signal);
    }
  }
}

// poll calls onData with path's answer every period until signal aborts
// (for what has no index: the gateway's counters), backing off on errors.
export async function poll(path, period, signal, onData, onError) {
  let backoff = 0;
  while (!signal.aborted) {
    while (document.hidden && !signal.aborted) await until('visibilitychange', signal);
    try {
      const r = await get(path, signal);
      if (signal.aborted) return;
      backoff = 0;
      draw(onData, r.body);
      if (onError) onError(null);
      await sleep(period, signal);
    } catch (e) {
      if (aborted(e, signal)) return;
      if (onError) onError(e);
      if (e instanceof APIError && e.status === 401) {
        await until('gangway:auth', signal);
        continue;
      }
      backoff = Math.min(60000, backoff ? backoff * 2 : period);
      await sleep(backoff, signal);
    }
  }
}

// follow streams /v1+path (a log with follow=1) into onText until it
// ends, fails or signal aborts; it returns normally when the stream ends.
export async function follow(path, signal, onText) {
  const resp = await fetch('/v1' + path, {headers: headers(), signal, cache: 'no-store', credentials: 'omit'});
  if (!resp.ok) throw await failure(resp);
  const reader = resp.body.getReader();
  const dec = new TextDecoder();
  for (;;) {
    const {done, value} = await reader.read();
    if (done) break;
    onText(dec.decode(value, {stream: true}));
  }
  const rest = dec.decode();
  if (rest) onText(rest);
}
