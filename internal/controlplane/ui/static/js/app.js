// app.js: the dashboard's shell: the header, the login box, the hover
// tip, and the router (#/cluster, #/queues, #/jobs, #/jobs/ID,
// #/deployments, #/simulate). Each page gets an AbortSignal that ends
// when another page opens, which stops its loops and streams.

import {h, fill} from './dom.js';
import {auth, hooks, get} from './api.js';
import {cluster} from './pages/cluster.js';
import {queues} from './pages/queues.js';
import {jobs} from './pages/jobs.js';
import {job} from './pages/job.js';
import {deployments} from './pages/deployments.js';
import {simulate} from './pages/simulate.js';

const routes = [
  [/^#\/cluster$/, 'cluster', cluster],
  [/^#\/queues$/, 'queues', queues],
  [/^#\/jobs(?:\?(.*))?$/, 'jobs', jobs],
  [/^#\/jobs\/([^/?]+)$/, 'jobs', job],
  [/^#\/deployments$/, 'deployments', deployments],
  [/^#\/simulate$/, 'simulate', simulate],
];

const $ = (id) => document.getElementById(id);
let page = null; // the open page's AbortController

function route() {
  if (page) page.abort();
  page = new AbortController();
  const hash = location.hash || '#/cluster';
  const main = $('main');
  for (const [re, name, open] of routes) {
    const m = hash.match(re);
    if (!m) continue;
    for (const a of document.querySelectorAll('nav a')) a.classList.toggle('active', a.getAttribute('data-page') === name);
    document.title = 'gangway · ' + name;
    open(main, page.signal, ...m.slice(1).map((x) => (x === undefined ? x : decodeURIComponent(x))));
    return;
  }
  fill(main, h('h1', null, 'No such page'), h('p', null, 'Nothing at ', h('code', null, hash), '. ', h('a', {href: '#/cluster'}, 'The cluster')));
}

// Login.

function showLogin(why) {
  const d = $('login');
  fill($('login-why'), why || 'This server needs a token.');
  $('login-error').hidden = true;
  $('token').value = '';
  if (!d.open) d.showModal();
  $('token').focus();
}

async function whoami() {
  try {
    const {body} = await get('/whoami');
    fill($('who'), body ? `${body.name}${body.role ? ' (' + body.role + ')' : ''}` : 'anonymous');
    $('signin').hidden = true;
    $('signout').hidden = !auth.token();
    return true;
  } catch (e) {
    fill($('who'), '');
    $('signin').hidden = false;
    $('signout').hidden = true;
    return false;
  }
}

function setupLogin() {
  $('login-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const tok = $('token').value.trim();
    if (!tok) return;
    sessionStorage.setItem('gangway.token', tok);
    if (await whoami()) {
      $('login').close();
      auth.set(tok); // wakes the loops waiting for a token
    } else {
      sessionStorage.removeItem('gangway.token');
      $('login-error').hidden = false;
      fill($('login-error'), 'The server refused that token.');
    }
  });
  $('login-cancel').addEventListener('click', () => $('login').close());
  $('signin').addEventListener('click', () => showLogin('Sign in with an API token.'));
  $('signout').addEventListener('click', () => {
    auth.set('');
    whoami();
    route();
  });
  let asked = false;
  hooks.unauthorized = (msg) => {
    fill($('who'), '');
    $('signin').hidden = false;
    $('signout').hidden = true;
    if (!$('login').open && !asked) {
      asked = true; // once per page load; the button asks again
      showLogin(auth.token() ? 'The server refused the token: ' + msg : 'This server needs a token.');
    }
  };
  window.addEventListener('gangway:auth', () => { asked = false; });
}

// The connection indicator.

hooks.connection = (ok, msg) => {
  const c = $('conn');
  c.className = 'conn ' + (ok ? 'conn-ok' : 'conn-down');
  fill(c, ok ? 'live' : 'reconnecting');
  c.setAttribute('title', ok ? 'updates as the cluster changes' : msg || '');
};

// The hover tip: any element with data-tip shows its text.

function setupTip() {
  const tip = $('tip');
  document.addEventListener('mouseover', (ev) => {
    const el = ev.target instanceof Element ? ev.target.closest('[data-tip]') : null;
    if (!el) { tip.hidden = true; return; }
    tip.textContent = el.getAttribute('data-tip');
    tip.hidden = false;
    place(ev);
  });
  document.addEventListener('mousemove', (ev) => { if (!tip.hidden) place(ev); });
  function place(ev) {
    const x = Math.min(ev.clientX + 14, window.innerWidth - tip.offsetWidth - 8);
    const y = ev.clientY + 18 + tip.offsetHeight > window.innerHeight ? ev.clientY - tip.offsetHeight - 10 : ev.clientY + 18;
    tip.style.left = Math.max(4, x) + 'px';
    tip.style.top = Math.max(4, y) + 'px';
  }
}

// A link with the token in its fragment (gangway demo prints one):
// kept in this tab, then taken out of the address bar and history. The
// fragment never reaches the server.
if (location.hash.startsWith('#token=')) {
  auth.set(decodeURIComponent(location.hash.slice('#token='.length)));
  history.replaceState(null, '', location.pathname + '#/cluster');
}
setupLogin();
setupTip();
window.addEventListener('hashchange', route);
whoami();
route();
