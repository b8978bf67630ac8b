// Events (shown only when the API serves GET /api/events): the latest
// transitions across the fleet, newest first.

import { get, serverNow } from './api.js';
import { $, h, text, attr, reconcile, taskLink, td } from './dom.js';
import { setTime, duration, eventWords, isolate } from './format.js';

const WINDOW_MS = 15 * 60 * 1000;
const MIN_WINDOW_MS = 5 * 1000;
const MAX_PAGES = 5;
const SHOWN = 200;

// windowMs is the window read: the last 15 minutes, or less while the
// fleet writes more events in them than MAX_PAGES pages hold.
let windowMs = WINDOW_MS;
let loads = 0; // loads started: only the latest shows what it read

// readWindow reads the events of the last ms, oldest first (as the API
// lists them), up to MAX_PAGES pages; complete says it reached the end.
async function readWindow(ms) {
  const since = new Date(serverNow() - ms).toISOString();
  let path = `/api/events?since=${encodeURIComponent(since)}&limit=1000`;
  let events = [];
  for (let i = 0; i < MAX_PAGES; i++) {
    const page = await get(path);
    events = events.concat(page.events || []);
    if (!page.next_cursor || !(page.events || []).length) return { events, complete: true };
    path = `/api/events?cursor=${encodeURIComponent(page.next_cursor)}&limit=1000`;
  }
  return { events, complete: false };
}

const view = {
  title: () => 'Events',

  async load(ctx) {
    const me = ++loads;
    // The API lists oldest first from `since`: read the window, keep the
    // newest. A window the pages do not cover would show its oldest
    // events for the newest: it is narrowed until they do, and widened
    // again when the fleet quietens.
    let read = await readWindow(windowMs);
    while (!read.complete && windowMs > MIN_WINDOW_MS) {
      windowMs = Math.max(MIN_WINDOW_MS, windowMs / 4);
      read = await readWindow(windowMs);
    }
    if (read.complete && read.events.length < SHOWN && windowMs < WINDOW_MS) {
      const wider = Math.min(WINDOW_MS, windowMs * 4);
      const more = await readWindow(wider);
      if (more.complete) {
        windowMs = wider;
        read = more;
      }
    }
    if (me !== loads) return false;
    const all = read.events;
    // Events are never changed once written: a key of their fields (and a
    // counter for exact repeats) keeps each row in place across refreshes.
    const seen = new Map();
    const rows = all.slice(-SHOWN).reverse().map((e) => {
      const base = `${e.task_id}:${e.type}:${e.fence}:${e.at}`;
      const n = (seen.get(base) || 0) + 1;
      seen.set(base, n);
      return { ...e, key: `${base}:${n}` };
    });
    reconcile($('events-body'), rows, (e) => e.key, makeRow, (row, e) => updateRow(ctx, row, e));
    $('events-empty').hidden = rows.length > 0;
  },

  reset() {
    loads++;
    $('events-body').replaceChildren();
    windowMs = WINDOW_MS;
  },
};

// agentName is an agent as the dashboard shows it: its name and id, or the
// id alone when it has no other name.
export function agentName(ctx, id) {
  const n = ctx.names.get(id);
  return n && n !== id ? `${isolate(n)} (${id})` : id;
}

function makeRow() {
  return h('tr', {},
    td('At', h('time', { class: 'ev-at' })),
    td('Event', h('span', { class: 'ev-type badge' }), h('span', { class: 'ev-outcome sub', hidden: true })),
    td('Task', h('span', { class: 'ev-task' })),
    td('Agent', h('span', { class: 'ev-agent' })),
    td('Fence', h('span', { class: 'ev-fence mono' })),
    td('Held', h('span', { class: 'ev-held' })),
    td('By', h('span', { class: 'ev-by' })),
    td('Reason', h('span', { class: 'ev-reason' }), h('span', { class: 'ev-error sub', hidden: true })),
  );
}

function updateRow(ctx, row, e) {
  fillEvent(ctx, row, e);
  const task = row.querySelector('.ev-task');
  if (task.textContent !== e.task_id) task.replaceChildren(taskLink(e.task_id));
}

// fillEvent writes an event into a row's cells (.ev-at, .ev-type,
// .ev-outcome, .ev-agent, .ev-fence, .ev-held, .ev-by, .ev-reason,
// .ev-error): the fleet feed's rows and a task's timeline share them. A
// release says its outcome ("attempt failed", "done") and the error its
// holder gave, as text; a failed event, how the last attempt ended.
export function fillEvent(ctx, row, e) {
  setTime(row.querySelector('.ev-at'), e.at);
  const type = row.querySelector('.ev-type');
  text(type, eventWords(e.type));
  const cls = 'ev-type badge ev-' + e.type + (e.outcome ? ' outcome-' + e.outcome : '');
  if (type.className !== cls) type.className = cls;
  const outcome = row.querySelector('.ev-outcome');
  text(outcome, OUTCOME_WORDS[e.outcome] || (e.outcome ? `outcome: ${e.outcome}` : ''));
  attr(outcome, 'hidden', !e.outcome);
  if (e.outcome && outcome.dataset.outcome !== e.outcome) outcome.dataset.outcome = e.outcome;
  const error = row.querySelector('.ev-error');
  text(error, e.error ? `error: ${isolate(e.error)}` : '');
  attr(error, 'hidden', !e.error);
  text(row.querySelector('.ev-agent'), e.agent_id ? agentName(ctx, e.agent_id) : '—');
  text(row.querySelector('.ev-fence'), e.fence ? '#' + e.fence : '—');
  text(row.querySelector('.ev-held'), typeof e.held_seconds === 'number' ? duration(e.held_seconds) : '—');
  text(row.querySelector('.ev-by'), e.by ? agentName(ctx, e.by) : '—');
  text(row.querySelector('.ev-reason'), (e.type === 'failed' && FAILED_WORDS[e.reason]) || isolate(e.reason) || '—');
}

// How a release's outcome reads.
const OUTCOME_WORDS = { failed: 'attempt failed', done: 'outcome: done' };

// A failed event's reason is how the task's last attempt ended (an event
// type): in words.
const FAILED_WORDS = {
  release: 'its last attempt was released as failed',
  timeout: 'its last attempt timed out',
  agent_death: 'the holder of its last attempt died',
};

export default view;
