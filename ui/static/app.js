// The dashboard's shell: sign-in, the views and their hash routes, the
// refresh loop ("updated N s ago"), errors in words, and the confirm dialog.

import { ApiError, session, get, probe } from './api.js';
import { $, text, attr } from './dom.js';
import { ago } from './format.js';
import checkouts from './checkouts.js';
import agents from './agents.js';
import queues from './queues.js';
import events from './events.js';
import task from './task.js';
import tasks from './tasks.js';

const REFRESH_MS = 3000;

const views = { checkouts, tasks, agents, queues, events, task };

// ctx is what every view shares.
const ctx = {
  admin: false,
  // features says which optional routes this deployment serves: true,
  // false (it answered 404 not_found: an older server), or null while
  // that is not known (the check failed: it is made again at each
  // refresh until it answers).
  features: { queues: null, events: null },
  // names maps agent ids to names, from leases and (for admins) the agents
  // list, so that events, which carry ids only, can show names.
  names: new Map(),
  confirm,
  notice,
  refresh: () => refresh(),
  // setArg records a view's own change of its argument (a filter) in the
  // address, without moving focus, and loads again.
  setArg: (arg) => setArg(arg),
  signOut: (message) => signOut(message),
};

let signedIn = false;
let current = null; // { view, arg }
let timer = null;
let generation = 0;
let lastOK = null; // performance.now() of the last successful load
// shownAt keeps, per view, the argument and time of the last load whose
// data it shows: a view entered again with that argument shows that data
// until its new load comes back, and the "updated" line must date it, not
// say it was never updated (which, if the server is down by then, would
// hide that the screen holds older data).
const shownAt = new Map(); // view -> { arg, at }
let failing = false;

// --- errors --------------------------------------------------------------

// words is what a person is told about err: the API's errors are already
// sentences; anything else is a bug in the page, reported without details.
function words(err) {
  if (err instanceof ApiError) return err.message;
  console.error(err);
  return 'The dashboard hit an unexpected problem showing this view. Reload the page; if it happens again, the browser console has the details for a bug report.';
}

function showBanner(message) {
  const b = $('banner');
  text(b, message);
  b.hidden = !message;
}

function notice(message) {
  const n = $('notice');
  text(n, '');
  // A fresh text node, so that screen readers announce a repeated notice.
  requestAnimationFrame(() => text(n, message));
  clearTimeout(notice.timer);
  notice.timer = setTimeout(() => text(n, ''), 8000);
}

window.addEventListener('error', (e) => {
  e.preventDefault();
  console.error(e.error || e.message);
  showBanner(words(new Error('uncaught')));
});
window.addEventListener('unhandledrejection', (e) => {
  e.preventDefault();
  showBanner(words(e.reason));
});

// --- sign-in -------------------------------------------------------------

function showSignIn(message) {
  signedIn = false;
  signIns++; // a check under way changes nothing
  clearTimeout(timer);
  generation++;
  current = null;
  lastOK = null;
  shownAt.clear();
  failing = false;
  document.title = 'Sign in · checkout';
  for (const v of Object.values(views)) v.reset?.();
  for (const el of document.querySelectorAll('.view')) el.hidden = true;
  $('nav').hidden = true;
  $('session').hidden = true;
  $('status-line').hidden = true;
  showBanner('');
  $('signin').hidden = false;
  text($('signin-error'), message || '');
  attr($('key'), 'aria-invalid', message ? 'true' : null);
  $('signin-retry').hidden = !session.key;
  $('key').focus();
}

// signIn checks key: GET /api/agents answers 200 to an admin key, 403 to an
// agent's and 401 to anything else. Then it asks which optional routes this
// deployment serves.
async function signIn(key) {
  session.key = key;
  let admin;
  try {
    await get('/api/agents?limit=1'); // one agent is enough to tell
    admin = true;
  } catch (err) {
    if (err instanceof ApiError && err.status === 403) {
      admin = false;
    } else {
      if (err instanceof ApiError && err.status === 401) session.clear();
      throw err;
    }
  }
  ctx.admin = admin;
  ctx.features = { queues: null, events: null };
  signIns++;
  checking = null;
  told = false;
  await checkFeatures();
  signedIn = true;
  document.body.classList.toggle('is-admin', admin);
  showNav();
  text($('role'), admin ? 'Admin key' : 'Agent key');
  $('signin').hidden = true;
  $('nav').hidden = false;
  $('session').hidden = false;
  $('status-line').hidden = false;
  route(true);
}

// The optional routes, and the words for their views.
const FEATURES = { queues: ['/api/queues?limit=1', 'queues'], events: ['/api/events?limit=1', 'events'] };
let signIns = 0; // sign-ins made: a check answered after the next one changes nothing
let checking = null; // the check under way
let told = false; // the person was told a check failed, this sign-in

// checkFeatures asks which of the optional routes whose presence is not
// known yet this deployment serves. Only the API's 404 not_found means
// it does not (probe): any other failure leaves the route unknown, its
// view hidden for now, and is told once; the next refresh asks again.
// A route that turns out to be served shows its view, and the view the
// address names if it is that one.
function checkFeatures() {
  if (checking) return checking;
  const unknown = Object.keys(FEATURES).filter((f) => ctx.features[f] === null);
  if (!unknown.length) return Promise.resolve();
  const me = signIns;
  const check = (async () => {
    const failed = [];
    let why = null;
    const found = await Promise.all(unknown.map(async (f) => {
      try {
        return [f, await probe(FEATURES[f][0])];
      } catch (err) {
        failed.push(FEATURES[f][1]);
        why = err;
        return [f, null];
      }
    }));
    if (me !== signIns) return;
    for (const [f, has] of found) ctx.features[f] = has;
    if (failed.length && !told) {
      told = true;
      notice(`Could not tell whether this server has the ${failed.join(' and ')} ${failed.length > 1 ? 'views' : 'view'}: ${words(why)} The dashboard asks again at each refresh.`);
    }
    if (!signedIn) return;
    showNav();
    const wanted = parse(location.hash);
    if (found.some(([f, has]) => has && wanted?.view === f) && current?.view !== wanted.view) route();
  })().finally(() => { if (checking === check) checking = null; });
  checking = check;
  return check;
}

// showNav shows the links to the views this key and this server have.
function showNav() {
  for (const a of document.querySelectorAll('#nav a')) {
    const need = a.dataset.feature;
    a.hidden = (a.hasAttribute('data-admin') && !ctx.admin) || (need !== undefined && !ctx.features[need]);
  }
}

// A key is printable ASCII without spaces. A character pasted along with
// it (a zero-width space, curly quotes, another script's letters) would
// make the browser refuse the request outright, which read as a server
// that cannot be reached.
const KEY_CHARS = /^[\x21-\x7e]+$/;

async function trySignIn(key) {
  const button = $('signin-submit');
  key = key.trim();
  if (!KEY_CHARS.test(key)) {
    showSignIn('This key has a character no API key has (a space, an invisible character or a curly quote, perhaps copied along with it): paste the key again.');
    return;
  }
  button.disabled = true;
  text($('signin-error'), '');
  try {
    await signIn(key);
    $('key').value = '';
    // The form that had focus is gone: the view's heading takes it, as
    // after any move between views.
    if (current) $(current.view + '-h').focus();
  } catch (err) {
    showSignIn(words(err));
  } finally {
    button.disabled = false;
  }
}

function signOut(message) {
  session.clear();
  ctx.admin = false;
  ctx.names.clear();
  document.body.classList.remove('is-admin');
  showSignIn(message);
  if (location.hash && location.hash !== '#/checkouts') history.replaceState(null, '', location.pathname);
}

// --- routing -------------------------------------------------------------

function parse(hash) {
  const m = /^#\/([a-z]+)(?:\/(.*))?$/.exec(hash);
  if (!m) return null;
  const [, name, rest] = m;
  if (name === 'task' && rest) {
    try { return { view: 'task', arg: decodeURIComponent(rest) }; } catch { return null; }
  }
  // #/tasks/<status>/<queue>: the task list, filtered ("all" for any status).
  if (name === 'tasks') return { view: 'tasks', arg: rest || null };
  if (views[name] && name !== 'task') return { view: name, arg: null };
  return null;
}

function allowed(name) {
  if (name === 'agents') return ctx.admin;
  if (name === 'queues' || name === 'events') return ctx.features[name];
  return true;
}

function route(initial = false) {
  if (!signedIn) return;
  let next = parse(location.hash);
  if (!next || !allowed(next.view)) {
    // A view whose route is not known yet to be served keeps its address:
    // it is shown once the check answers (checkFeatures).
    const pending = next && ctx.features[next.view] === null;
    next = { view: 'checkouts', arg: null };
    if (!pending && location.hash && location.hash !== '#/checkouts') history.replaceState(null, '', '#/checkouts');
  } else if (views[next.view].canonical) {
    // An address the view reads otherwise than written (#/tasks/bogus
    // shows every status) is replaced by the one it shows, and why said.
    const { arg, problem } = views[next.view].canonical(next.arg);
    if (arg !== next.arg) {
      next = { ...next, arg };
      history.replaceState(null, '', `#/${next.view}${arg ? '/' + arg : ''}`);
      if (problem) notice(problem);
    }
  }
  const changed = !current || current.view !== next.view || current.arg !== next.arg;
  current = next;
  for (const [name, v] of Object.entries(views)) {
    $('view-' + name).hidden = name !== next.view;
    if (name !== next.view) v.leave?.();
  }
  for (const a of document.querySelectorAll('#nav a')) {
    attr(a, 'aria-current', a.dataset.view === next.view ? 'page' : null);
  }
  if (changed) {
    const shown = shownAt.get(next.view);
    lastOK = shown && shown.arg === next.arg ? shown.at : null;
    failing = false;
    showBanner('');
    views[next.view].enter?.(ctx, next.arg);
    document.title = `${views[next.view].title(next.arg)} · checkout`;
    if (!initial) $(next.view + '-h').focus({ preventScroll: false });
  }
  refresh();
}

window.addEventListener('hashchange', () => route());

function setArg(arg) {
  if (!current) return;
  current = { ...current, arg };
  history.replaceState(null, '', `#/${current.view}${arg ? '/' + arg : ''}`);
  document.title = `${views[current.view].title(arg)} · checkout`;
  refresh();
}

// --- refresh -------------------------------------------------------------

async function refresh() {
  clearTimeout(timer);
  // A hidden tab reads nothing (every load reads every page of its view):
  // showing it again refreshes at once.
  if (!signedIn || !current || document.hidden) return;
  if (Object.values(ctx.features).includes(null)) checkFeatures();
  const gen = ++generation;
  const { view, arg } = current;
  try {
    // A view's load may say it showed nothing (false): a later one
    // superseded it.
    const shown = await views[view].load(ctx, arg);
    if (gen !== generation) {
      // A later refresh of the same view superseded this one, but what
      // this one loaded is on screen: the "updated" line must date it,
      // so that a failing later refresh says it shows older data.
      if (shown !== false && current && current.view === view && current.arg === arg) {
        lastOK = performance.now();
        shownAt.set(view, { arg, at: lastOK });
      }
      return;
    }
    lastOK = performance.now();
    shownAt.set(view, { arg, at: lastOK });
    failing = false;
    showBanner('');
  } catch (err) {
    if (gen !== generation) return;
    if (err instanceof ApiError && err.status === 401) {
      signOut('The server no longer accepts this key (it may have been revoked). Sign in again.');
      return;
    }
    failing = true;
    showBanner(words(err));
  } finally {
    if (gen === generation && signedIn) {
      tick();
      timer = setTimeout(refresh, REFRESH_MS);
    }
  }
}

// tick runs every second: the "updated" line and the views' clocks (the
// remaining bars run down between refreshes).
function tick() {
  if (!signedIn || !current) return;
  const now = performance.now();
  const el = $('updated');
  if (lastOK === null) {
    text(el, failing ? 'Not updated yet' : 'Loading…');
  } else {
    const s = (now - lastOK) / 1000;
    text(el, `Updated ${ago(s)}${failing ? ' (showing older data)' : ''}`);
  }
  el.dataset.stale = failing ? 'true' : 'false';
  views[current.view].tick?.(ctx, now);
}
setInterval(tick, 1000);

document.addEventListener('visibilitychange', () => {
  if (!document.hidden && signedIn) refresh();
});

// --- confirm dialog ------------------------------------------------------

// confirm asks before a destructive action. opts: title, body (nodes or
// strings), action (the button's words), reason (ask for one: its label),
// run (async, given the reason; an ApiError it throws is shown in the
// dialog, which stays open). Resolves true when run succeeded.
//
// One at a time: a second ask while one is open (a double click on an
// action that reads something before it asks) resolves false at once.
// Its listeners on the one dialog would otherwise run with the next
// confirmation too, and act again on what the first one named (remove an
// agent registered again under that id, say).
let asking = false;

function confirm(opts) {
  if (asking) return Promise.resolve(false);
  asking = true;
  const dialog = $('confirm');
  const form = $('confirm-form');
  const reasonRow = $('confirm-reason-row');
  const reason = $('confirm-reason');
  const ok = $('confirm-ok');
  const cancel = $('confirm-cancel');
  const error = $('confirm-error');
  text($('confirm-title'), opts.title);
  $('confirm-body').replaceChildren(...[].concat(opts.body).map((b) => (b instanceof Node ? b : Object.assign(document.createElement('p'), { textContent: b }))));
  text(ok, opts.action);
  text(error, '');
  reason.value = '';
  reasonRow.hidden = !opts.reason;
  reason.required = Boolean(opts.reason);
  const returnFocus = document.activeElement;

  return new Promise((resolve) => {
    let busy = false;
    let finished = false;
    const done = (result) => {
      if (finished) return;
      finished = true;
      asking = false;
      form.removeEventListener('submit', onSubmit);
      cancel.removeEventListener('click', onCancel);
      dialog.removeEventListener('cancel', onEscape);
      dialog.removeEventListener('close', onClose);
      if (dialog.open) dialog.close();
      if (result) {
        // The action usually removes or hides what opened it (the force
        // release button of a lease that ended, an agent's row): focus
        // goes to the view's heading, where the keyboard can go on,
        // rather than fall to the page.
        const view = returnFocus?.closest?.('.view');
        const heading = view?.querySelector('h1[tabindex]');
        (heading || $('main')).focus();
      } else if (returnFocus && returnFocus.isConnected) {
        returnFocus.focus();
      }
      resolve(result);
    };
    const onCancel = () => { if (!busy) done(false); };
    const onEscape = (e) => { e.preventDefault(); onCancel(); };
    // The browser may close the dialog itself (a second Escape in a row
    // cannot be held off): that is a cancel, or, while the action runs,
    // the end of the ask once it has run.
    const onClose = () => { if (!busy) done(false); };
    const onSubmit = async (e) => {
      e.preventDefault();
      if (busy) return;
      const why = reason.value.trim();
      if (opts.reason && !why) {
        text(error, 'Give a reason: it goes into the task’s audit trail.');
        attr(reason, 'aria-invalid', 'true');
        reason.focus();
        return;
      }
      attr(reason, 'aria-invalid', null);
      busy = true;
      ok.disabled = true;
      text(error, '');
      try {
        await opts.run(why);
        done(true);
      } catch (err) {
        if (dialog.open) {
          text(error, words(err));
        } else {
          // Closed while it ran: the error is told as a notice.
          done(false);
          notice(words(err));
        }
      } finally {
        busy = false;
        ok.disabled = false;
      }
    };
    form.addEventListener('submit', onSubmit);
    cancel.addEventListener('click', onCancel);
    dialog.addEventListener('cancel', onEscape);
    dialog.addEventListener('close', onClose);
    dialog.showModal();
    (opts.reason ? reason : cancel).focus();
  });
}

// --- start ---------------------------------------------------------------

function start() {
  $('signin-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const key = $('key').value.trim();
    if (!key) {
      showSignIn('Paste an API key first.');
      return;
    }
    trySignIn(key);
  });
  $('signin-retry').addEventListener('click', () => {
    if (session.key) trySignIn(session.key);
  });
  $('signout').addEventListener('click', () => signOut('Signed out. The key was removed from this tab.'));
  $('refresh').addEventListener('click', () => refresh());
  $('skip').addEventListener('click', (e) => {
    e.preventDefault();
    $('main').focus();
  });
  $('goto').addEventListener('submit', (e) => {
    e.preventDefault();
    const id = $('goto-id').value.trim();
    if (!id) return;
    $('goto-id').value = '';
    location.hash = '#/task/' + encodeURIComponent(id);
  });
  for (const v of Object.values(views)) v.setup?.(ctx);
  if (session.key) {
    $('signin').hidden = true;
    trySignIn(session.key);
  } else {
    showSignIn('');
  }
}

start();
