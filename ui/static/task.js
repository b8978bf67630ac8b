// A task's page: its fields, its dependencies and attempts (what blocks it,
// each blocker with its status; what it blocks; attempts, the retry delay,
// the wait before its next attempt and its last error), its live lease
// (admins: force release), and its audit trail (GET /api/tasks/{id}/events)
// drawn as a timeline of leases, with the events listed below.

import { ApiError, get, post, seg, serverNow } from './api.js';
import { $, h, text, attr, reconcile, replace, td, taskLink, statusBadge } from './dom.js';
import { setTime, clock, duration, ms, eventWords, until, isolate, escapeControls } from './format.js';
import { makeBar, updateBar, remaining } from './bar.js';
import { agentName, fillEvent } from './events.js';
import { attemptsWords, blockerList } from './tasks.js';

let taskID = null;
let task = null;
let events = [];
let eventsCut = false; // the trail is longer than the pages read
// tail is where the last page of the trail read starts: the cursor it was
// read at (null: the first page), the index of its first event, and the
// pages read up to it. A refresh reads the trail from there on (events
// are never changed once written, only added), and the events before it
// stay as they were, on screen too.
let tail = null;
let leases = []; // leasesOf(events), read again when events change
let names = ''; // the names of the agents the trail names, as last drawn
let seenAt = 0;
// loads counts the loads started: one overtaken by a later one (the
// refresh after a force release, another task opened) shows nothing, not
// even that its task is missing, so that its older answer cannot bring
// back a lease that ended, or cover the next task's page.
let loads = 0;

const view = {
  title: (id) => `Task ${id}`,

  setup(ctx) {
    $('force-release').addEventListener('click', () => forceRelease(ctx));
  },

  enter(_ctx, id) {
    if (id !== taskID) view.reset();
    taskID = id;
    text($('task-id'), id);
  },

  async load(ctx, id) {
    const me = ++loads;
    // A trail cut short shows its oldest pages, which do not change: it
    // is not read again.
    const from = id === taskID ? tail : null;
    const before = events;
    let t, ev;
    try {
      [t, ev] = await Promise.all([get('/api/tasks/' + seg(id)), from && eventsCut ? null : trail(id, from)]);
    } catch (err) {
      if (me !== loads || id !== taskID) return false;
      if (err instanceof ApiError && (err.status === 404 || err.code === 'invalid_id')) {
        missing(err.message);
        return;
      }
      throw err;
    }
    if (me !== loads || id !== taskID) return false;
    task = t;
    if (ev) {
      events = from ? before.slice(0, from.start).concat(ev.events) : ev.events;
      tail = ev.tail;
      eventsCut = ev.cut;
      leases = leasesOf(events);
    }
    seenAt = performance.now();
    if (t.checkout?.agent_name) ctx.names.set(t.checkout.agent_id, t.checkout.agent_name);
    render(ctx);
  },

  tick(ctx, now) {
    if (!task) return;
    const bar = $('task-lease').querySelector('.bar');
    if (bar && task.checkout) updateBar(bar, { ...task.checkout, seenAt }, now);
    drawTimeline(ctx, now, true);
    updateWait();
  },

  reset() {
    loads++;
    taskID = null;
    task = null;
    events = [];
    eventsCut = false;
    tail = null;
    leases = [];
    names = '';
    // Emptied with their signatures, so that the next task's panels are
    // drawn even when they read as the last task's did.
    for (const id of ['task-fields', 'task-graph', 'task-lease']) clear($(id));
    $('timeline').replaceChildren();
    $('task-events-body').replaceChildren();
    text($('task-title'), '');
    $('task-missing').hidden = true;
    $('task-content').hidden = false;
  },
};

function missing(message) {
  task = null;
  $('task-content').hidden = true;
  text($('task-title'), '');
  const p = $('task-missing');
  text(p, message);
  p.hidden = false;
}

// --- fields and lease ----------------------------------------------------

const FIELDS = [
  ['status', 'Status', (v) => statusBadge(v)],
  ['queue', 'Queue'],
  ['priority', 'Priority'],
  ['version', 'Version'],
  ['created_at', 'Created', 'time'],
  ['started_at', 'Started', 'time'],
  ['completed_at', 'Completed', 'time'],
  ['duration_seconds', 'Duration', (v) => duration(v)],
  ['description', 'Description', 'pre'],
  ['metadata', 'Metadata', 'json'],
];

function fieldValue(v, kind) {
  if (v === null || v === undefined || v === '') return h('span', { class: 'muted' }, '—');
  if (kind === 'time') {
    const el = h('time');
    setTime(el, v);
    return el;
  }
  if (kind === 'pre') return h('pre', { class: 'pre' }, isolate(String(v)));
  if (kind === 'json') return h('pre', { class: 'pre mono', dir: 'ltr' }, jsonNodes(v));
  if (typeof kind === 'function') return kind(v);
  return String(v);
}

// jsonNodes is v as indented JSON text, each string's contents in a <bdi>
// of its own: a key and its value in a right-to-left script would
// otherwise make one right-to-left run with the ": " between them, and
// read value first. The bidirectional controls in them are written as
// JSON's escapes (escapeControls), so that they show and reorder nothing.
export function jsonNodes(v) {
  const json = escapeControls(JSON.stringify(v, null, 2));
  const out = [];
  let at = 0;
  for (const m of json.matchAll(/"((?:[^"\\]|\\.)*)"/g)) {
    out.push(json.slice(at, m.index + 1), h('bdi', {}, m[1]), '"');
    at = m.index + m[0].length;
  }
  out.push(json.slice(at));
  return out;
}

// dl fills a <dl> with [label, node] pairs, rebuilding it only when the
// words change (or it was emptied meanwhile).
function dl(el, pairs) {
  const sig = JSON.stringify(pairs.map(([k, v]) => [k, v instanceof Node ? v.textContent : String(v)]));
  if (el.dataset.sig === sig && el.children.length === pairs.length * 2) return false;
  el.dataset.sig = sig;
  replace(el, ...pairs.flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
  return true;
}

// clear empties a panel dl fills, and forgets what it showed.
function clear(el) {
  delete el.dataset.sig;
  el.replaceChildren();
}

function render(ctx) {
  $('task-missing').hidden = true;
  $('task-content').hidden = false;
  text($('task-title'), isolate(task.title) || '(no title)');
  dl($('task-fields'), FIELDS.filter(([k]) => k in task).map(([k, label, kind]) => [label, fieldValue(task[k], kind)]));
  drawGraph();

  const c = task.checkout;
  $('task-free').hidden = Boolean(c);
  $('task-lease').hidden = !c;
  $('task-admin').hidden = !(c && ctx.admin);
  if (c) {
    const holder = c.agent_name && c.agent_name !== c.agent_id ? `${isolate(c.agent_name)} (${c.agent_id})` : c.agent_id;
    const expires = h('time');
    setTime(expires, c.expires_at);
    const locked = h('time');
    setTime(locked, c.locked_at);
    dl($('task-lease'), [
      ['Holder', holder],
      ['Fence', '#' + c.fence],
      ...('attempt' in c ? [['Attempt', typeof task.max_attempts === 'number' ? `${c.attempt} of ${task.max_attempts}` : String(c.attempt)]] : []),
      ['Run id', h('span', { class: 'mono' }, c.run_id)],
      ['Locked at', locked],
      ['Expires at', expires],
      ['Remaining', makeBar()],
      ['Timeout', duration(c.timeout_seconds)],
      ['Reason', isolate(c.reason) || '—'],
    ]);
    const bar = $('task-lease').querySelector('.bar');
    updateBar(bar, { ...c, seenAt }, performance.now());
  } else {
    clear($('task-lease'));
  }
  // A name learnt since (an agent's, from a lease) is written into the
  // rows already drawn.
  const ids = new Set();
  for (const e of events) { if (e.agent_id) ids.add(e.agent_id); if (e.by) ids.add(e.by); }
  const now = JSON.stringify([...ids].map((id) => ctx.names.get(id) || ''));
  const renamed = now !== names;
  names = now;
  drawTimeline(ctx, performance.now(), false);
  drawEvents(ctx, renamed);
}

function forceRelease(ctx) {
  const c = task?.checkout;
  if (!c || !ctx.admin) return;
  const id = task.task_id;
  const holder = c.agent_name && c.agent_name !== c.agent_id ? `${isolate(c.agent_name)} (${c.agent_id})` : c.agent_id;
  ctx.confirm({
    title: `Force release task ${id}?`,
    body: [
      `${holder} holds it (fence #${c.fence}, run ${c.run_id}) since ${clock(c.locked_at)}.`,
      'Its lease ends now and is recorded as a force release with your reason. The holder’s next renew, release or complete is refused, so it learns it lost the task.',
      'The task goes back to “to do” at once and its watchers are told it is available.',
    ],
    reason: true,
    action: 'Force release',
    run: async (reason) => {
      let r;
      try {
        r = await post('/api/tasks/' + seg(id) + '/release', { force: true, reason, fence: c.fence });
      } catch (err) {
        // The release names the lease shown (its fence): one that ended
        // or was replaced meanwhile is refused, which is no lack of rights.
        if (err instanceof ApiError && (err.code === 'not_holder' || err.code === 'not_checked_out')) {
          ctx.refresh();
          throw new ApiError(err.status, err.code, `The lease shown (fence #${c.fence}) ended or was replaced since this page showed it: nothing was released. Look at the task again.`);
        }
        throw err;
      }
      ctx.notice(`Force released task ${id}; ${holder} had held it for ${duration(r.held_seconds)}.`);
      ctx.refresh();
    },
  });
}

// --- dependencies and attempts ---------------------------------------------

// drawGraph fills the dependencies-and-attempts panel (hidden for a server
// that does not send these fields). Every id and error is text; blockers
// and dependents are links to their pages.
function drawGraph() {
  const panel = $('task-graph-panel');
  const has = ['blocked_by', 'blocks', 'attempts', 'max_attempts', 'retry_delay_seconds', 'not_before', 'last_error'].some((k) => k in task);
  panel.hidden = !has;
  if (!has) return;
  const none = (words) => h('span', { class: 'muted' }, words);
  const blockedBy = task.blocked_by || [];
  const blocks = task.blocks || [];
  const waiting = blockedBy.filter((b) => b.status !== 'done').length;
  // A cancelled or failed blocker never completes by itself.
  const stuck = blockedBy.filter((b) => b.status === 'cancelled' || b.status === 'failed').map((b) => b.task_id);
  // Only a todo task nobody holds can be taken: a blocked, held or
  // finished one is not claimable, whatever its not_before.
  const notBefore = task.not_before
    ? h('span', { id: 'task-not-before' }, h('time', { class: 'nb-at' }), ' ', h('span', { class: 'nb-in' }))
    : none(task.status === 'todo' && !task.checkout ? '— (claimable now)' : '—');
  if (task.not_before) setTime(notBefore.querySelector('.nb-at'), task.not_before);
  dl($('task-graph'), [
    ['Blocked by', blockedBy.length
      ? h('div', { id: 'task-blocked-by' },
        blockerList(blockedBy, 'blockers'),
        h('span', { class: 'sub' }, waiting ? `waiting on ${waiting} of ${blockedBy.length}` : 'every blocker is done'),
        stuck.length ? h('span', { class: 'sub stuck' }, `${stuck.join(', ')} will not finish by ${stuck.length > 1 ? 'themselves' : 'itself'}: reopen and complete ${stuck.length > 1 ? 'them' : 'it'}, or change this task’s blockers`) : null)
      : none('nothing')],
    ['Blocks', blocks.length
      ? h('ul', { id: 'task-blocks', class: 'deps' }, blocks.map((id) => h('li', { dataset: { task: id } }, taskLink(id))))
      : none('nothing')],
    ['Attempts', h('span', { id: 'task-attempts' }, attemptsWords(task))],
    ['Retry delay', typeof task.retry_delay_seconds === 'number' ? `${duration(task.retry_delay_seconds)}, doubling after each failed attempt` : none('—')],
    ['Not before', notBefore],
    ['Last error', task.last_error ? h('pre', { id: 'task-last-error', class: 'pre last-error' }, isolate(task.last_error)) : none('none')],
  ]);
  updateWait();
}

// updateWait writes how long until not_before, every second.
function updateWait() {
  const el = $('task-graph').querySelector('.nb-in');
  if (!el || !task) return;
  const left = until(task.not_before);
  text(el, left ? `(${left})` : '(passed)');
}

// --- timeline ------------------------------------------------------------

const ENDS = new Set(['release', 'complete', 'timeout', 'agent_death', 'force_release', 'cancel']);

// leasesOf reads the audit trail (oldest first) into one entry per lease,
// by fence: who took it and when, and the event that ended it, if any.
export function leasesOf(evs) {
  const byFence = new Map();
  const out = [];
  for (const e of evs) {
    if (!e.fence) continue; // a task-level event (a cancel with no lease)
    let l = byFence.get(e.fence);
    if (!l) {
      const at = ms(e.at);
      const held = typeof e.held_seconds === 'number' ? e.held_seconds : 0;
      l = { fence: e.fence, agent_id: e.agent_id, run_id: e.run_id, start: e.type === 'checkout' ? at : at - held * 1000, reason: '', renewals: 0, end: null };
      byFence.set(e.fence, l);
      out.push(l);
    }
    if (e.type === 'checkout') l.reason = e.reason || '';
    else if (e.type === 'renew') l.renewals++;
    else if (ENDS.has(e.type) && !l.end) {
      l.end = { type: e.type, at: ms(e.at), by: e.by, reason: e.reason || '', held: e.held_seconds, outcome: e.outcome || '', error: e.error || '' };
    }
  }
  return out;
}

// how says how a lease ended, in words.
function how(ctx, l, live) {
  if (live) return `live · ${duration(remaining(live, performance.now()))} left`;
  if (!l.end) return 'expired; the sweeper has not recorded its end yet';
  const by = l.end.by && l.end.by !== 'system' ? ` by ${agentName(ctx, l.end.by)}` : '';
  switch (l.end.type) {
    case 'release': return l.end.outcome === 'failed' ? `released${by}: the attempt failed` : `released${by}`;
    case 'complete': return `completed${by}`;
    case 'timeout': return 'timed out: not renewed before it expired';
    case 'agent_death': return l.end.reason === 'agent removed' ? 'ended: its holder was removed' : 'ended: its holder died (missed heartbeats)';
    case 'force_release': return `force released${by}`;
    case 'cancel': return `ended: the task was cancelled${by}`;
    default: return eventWords(l.end.type);
  }
}

// drawTimeline draws the leases on one time scale, the oldest lease's
// start to now or the live lease's expiry. Each lease is placed in seconds
// from that start (--s, --e), and the scale's length (--span) is the
// list's: as time passes (liveOnly, every second) only the scale and the
// live lease change, and the leases that ended are not touched (a
// selection in them stays, and a trail of thousands of events costs
// nothing between refreshes).
function drawTimeline(ctx, now, liveOnly) {
  if (!task) return;
  const c = task.checkout;
  const live = c ? { ...c, seenAt } : null;
  const nowMs = serverNow();
  const liveEnd = live ? nowMs + remaining(live, now) * 1000 : nowMs;
  let t0 = nowMs;
  let last = 0;
  for (const l of leases) {
    if (l.start < t0) t0 = l.start;
    if (l.end && l.end.at > last) last = l.end.at;
  }
  const t1 = Math.max(nowMs, liveEnd, last);
  const list = $('timeline');
  setVar(list, '--span', Math.max(0.001, (t1 - t0) / 1000));
  const isLive = (l) => (live && live.fence === l.fence && !l.end ? live : null);
  const draw = (el, l) => drawLease(ctx, el, l, isLive(l), t0, nowMs, liveEnd);
  if (liveOnly) {
    for (const el of list.children) if (el.lease && (isLive(el.lease) || el.dataset.end === 'live')) draw(el, el.lease);
    return;
  }
  $('timeline-empty').hidden = leases.length > 0;
  reconcile(list, leases.slice().reverse(), (l) => l.fence, makeLease, draw);
}

// setVar sets a custom property, only when it changes.
function setVar(el, name, seconds) {
  const v = seconds.toFixed(3);
  if (el.style.getPropertyValue(name) !== v) el.style.setProperty(name, v);
}

function drawLease(ctx, el, l, isLive, t0, nowMs, liveEnd) {
  el.lease = l;
  const state = isLive ? 'live' : l.end ? (l.end.type === 'release' && l.end.outcome === 'failed' ? 'failed' : l.end.type) : 'expired';
  if (el.dataset.end !== state) el.dataset.end = state;
  text(el.querySelector('.lease-fence'), '#' + l.fence);
  text(el.querySelector('.lease-holder'), agentName(ctx, l.agent_id));
  text(el.querySelector('.lease-how'), how(ctx, l, isLive));
  const endAt = l.end ? l.end.at : isLive ? nowMs : null;
  const held = l.end?.held ?? (endAt !== null ? (endAt - l.start) / 1000 : null);
  const parts = [`${clock(new Date(l.start).toISOString())} → ${endAt !== null && !isLive ? clock(new Date(endAt).toISOString()) : isLive ? 'now' : '?'}`];
  if (held !== null) parts.push(`held ${duration(held)}`);
  if (l.renewals) parts.push(`renewed ${l.renewals}×`);
  if (l.reason) parts.push(`reason: ${isolate(l.reason)}`);
  if (l.end?.reason && l.end.type !== 'agent_death') parts.push(`${eventWords(l.end.type)} because: ${isolate(l.end.reason)}`);
  if (l.end?.error) parts.push(`error: ${isolate(l.end.error)}`);
  text(el.querySelector('.lease-when'), parts.join(' · '));
  const until = l.end ? l.end.at : isLive ? nowMs : l.start;
  setVar(el, '--s', (l.start - t0) / 1000);
  setVar(el, '--e', (until - t0) / 1000);
  const rest = el.querySelector('.lease-rest');
  attr(rest, 'hidden', !isLive);
  if (isLive) {
    setVar(el, '--r0', (nowMs - t0) / 1000);
    setVar(el, '--r1', (liveEnd - t0) / 1000);
  }
}

function makeLease() {
  return h('li', { class: 'lease' },
    h('p', { class: 'lease-head' },
      h('span', { class: 'lease-fence mono' }), ' ',
      h('strong', { class: 'lease-holder' }), ' — ',
      h('span', { class: 'lease-how' })),
    h('div', { class: 'lease-track' }, h('span', { class: 'lease-span' }), h('span', { class: 'lease-rest', hidden: true })),
    h('p', { class: 'lease-when sub' }),
  );
}

// --- events --------------------------------------------------------------

// trail reads a task's audit trail, following its pages (1,000 events
// each) up to maxTrailPages of them: a task renewed for days has a long
// one, and the page shows the oldest events first. from (a tail) reads it
// from the page there on. It returns the events read, the tail of the last
// page read, and whether more pages remain (cut).
const maxTrailPages = 10;

async function trail(id, from) {
  const base = '/api/tasks/' + seg(id) + '/events';
  const at = (cursor) => (cursor ? base + '?cursor=' + encodeURIComponent(cursor) : base);
  let last = from || { cursor: null, start: 0, pages: 1 };
  let page = await get(at(last.cursor));
  const all = [...(page.events || [])];
  while (page.next_cursor && last.pages < maxTrailPages) {
    last = { cursor: page.next_cursor, start: last.start + (page.events || []).length, pages: last.pages + 1 };
    page = await get(at(last.cursor));
    all.push(...(page.events || []));
  }
  return { events: all, tail: last, cut: Boolean(page.next_cursor) };
}

// drawEvents lists the events, oldest first: the rows drawn stay as they
// are (events are never changed once written), the new ones are added
// below them; all are written again only when a name changed (renamed).
function drawEvents(ctx, renamed) {
  $('task-events-more').hidden = !eventsCut;
  const body = $('task-events-body');
  const key = (e) => `${e.type}:${e.fence}:${e.at}`;
  let rows = body.children;
  if (rows.length > events.length) {
    body.replaceChildren();
    rows = body.children;
  }
  // The events read again (the tail's page) are checked against their rows.
  for (let i = renamed ? 0 : Math.min(tail?.start ?? 0, rows.length); i < rows.length; i++) {
    if (renamed || rows[i].dataset.key !== key(events[i])) {
      if (rows[i].dataset.key !== key(events[i])) rows[i].dataset.key = key(events[i]);
      fillEvent(ctx, rows[i], events[i]);
    }
  }
  if (rows.length === events.length) return;
  const added = document.createDocumentFragment();
  for (let i = rows.length; i < events.length; i++) {
    const row = makeEventRow();
    row.dataset.key = key(events[i]);
    fillEvent(ctx, row, events[i]);
    added.append(row);
  }
  body.append(added);
}

function makeEventRow() {
  return h('tr', {},
    td('At', h('time', { class: 'ev-at' })),
    td('Event', h('span', { class: 'ev-type' }), h('span', { class: 'ev-outcome sub', hidden: true })),
    td('Agent', h('span', { class: 'ev-agent' })),
    td('Fence', h('span', { class: 'ev-fence mono' })),
    td('Held', h('span', { class: 'ev-held' })),
    td('By', h('span', { class: 'ev-by' })),
    td('Reason', h('span', { class: 'ev-reason' }), h('span', { class: 'ev-error sub', hidden: true })),
  );
}

export default view;
