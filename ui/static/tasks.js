// Tasks: the task list (GET /api/tasks), filtered by status and queue on the
// server and by text here. The list follows next_cursor for up to PAGES
// pages of LIMIT tasks, says when more remain and loads PAGES more at a
// click; the text filter searches the tasks loaded, and says so. Blocked
// tasks show what they wait on, each blocker with its status; failed ones
// (and any task whose latest attempt failed) show their last error, as
// text. The address keeps the filters: #/tasks/<status>/<queue>, "all" for
// any status.
//
// What a refresh reads. The whole listing (up to PAGES pages) costs about
// a read unit a task, so it is read only when the filters change, at a
// "Load more", every FULL_MS, and when the list no longer adds up; the
// refreshes between read what changed instead (update): the fleet feed
// from where the last refresh left it (the tasks whose status moved), the
// queue counts (which also tell a new task: the list no longer matches
// them), and each task named by the feed or shown on screen, one by one.

import { get, pages, pagesOf, seg, serverNow, ApiError } from './api.js';
import { $, h, text, reconcile, replace, taskLink, options, td, statusBadge, setStatus } from './dom.js';
import { STATUSES, statusWords, until, clock, isolate } from './format.js';

const LIMIT = 500; // tasks per page
const PAGES = 10; // pages read at first, and added by "Load more"
// The queue filter offers every queue the queue listing names, up to
// QUEUES_SHOWN queues in at most QUEUE_PAGES pages of it (as the queues view
// shows; a page holds fewer queues when many hold todo tasks), read again with the
// counts at a refresh that reads what changed (update), and otherwise at
// most every QUEUES_MS: the names change rarely.
export const QUEUE_PAGES = 20;
export const QUEUES_SHOWN = 2000;
const QUEUES_MS = 30000;
// The whole listing is read again at least every FULL_MS; a refresh in
// between reads at most CHANGED tasks one by one: those the feed names,
// then as many of those on screen (a window taller than CHANGED rows has
// its rows read in turns, CHANGED a refresh); it reads the whole listing
// instead when the feed names more than that.
const FULL_MS = 30000;
const CHANGED = 40;

let list = []; // the tasks of the pages read, sorted
let more = false; // the last page read had a next one
let wanted = PAGES; // pages to read at each refresh
let read = 0; // pages read at the last refresh
let knownQueues = new Set();
let shownArg = null; // the filters the list was loaded for
let queuesReadAt = -Infinity; // performance.now() of the last read of the queue names
let fullAt = -Infinity; // performance.now() of the last read of the whole listing
let feed = null; // the fleet feed's cursor: where the next refresh reads on
let loads = 0; // loads started: only the latest may show what it read
let screenTurn = 0; // where, among the rows on screen, the next refresh starts reading

const view = {
  title: (arg) => {
    const { status } = parseArg(arg);
    return status ? `Tasks ${statusWords(status)}` : 'Tasks';
  },

  setup(ctx) {
    options($('t-status'), STATUSES.map((s) => ({ value: s, label: statusWords(s) })));
    const onFilter = () => ctx.setArg(makeArg($('t-status').value, $('t-queue').value));
    $('t-status').addEventListener('change', onFilter);
    $('t-queue').addEventListener('change', onFilter);
    // Typing renders once it pauses (a list of thousands of rows takes a
    // moment to redraw), and at once when the box is emptied.
    let typing;
    $('t-text').addEventListener('input', () => {
      clearTimeout(typing);
      if ($('t-text').value.trim() === '') render();
      else typing = setTimeout(render, 150);
    });
    $('tasks-filter').addEventListener('submit', (e) => e.preventDefault());
    $('tasks-load-more').addEventListener('click', () => {
      wanted = read + PAGES;
      feed = null; // read the whole listing, further
      ctx.refresh();
    });
  },

  // canonical is the address of what arg shows: a status that is none
  // is dropped (every status is shown), and so is "all" with no queue.
  canonical(arg) {
    const { status, queue } = parseArg(arg);
    const [s = ''] = String(arg || '').split('/');
    const problem = s && s !== 'all' && !STATUSES.includes(s)
      ? `There is no status “${s.length > 40 ? s.slice(0, 40) + '…' : s}”: showing tasks of every status.` : '';
    return { arg: makeArg(status, queue), problem };
  },

  enter(_ctx, arg) {
    const { status, queue } = parseArg(arg);
    $('t-status').value = STATUSES.includes(status) ? status : '';
    if (queue) knownQueues.add(queue);
    queueOptions(queue);
  },

  // load shows the list for arg, and says whether it did: a load that a
  // later one (a click on Refresh or "Load more", other filters) started
  // meanwhile changes nothing, so that it cannot undo what the later one
  // shows.
  async load(ctx, arg) {
    const me = ++loads;
    if (arg !== shownArg) wanted = PAGES; // other filters: start again
    const { status, queue } = parseArg(arg);
    const cheap = ctx.features.queues && ctx.features.events;
    if (cheap && arg === shownArg && feed && performance.now() - fullAt < FULL_MS) {
      const got = await update(status, queue);
      if (me !== loads) return false;
      if (got) {
        list = got.list;
        feed = got.feed;
        show(ctx, arg, status, queue);
        return true;
      }
    }
    const readQueues = ctx.features.queues && performance.now() - queuesReadAt >= QUEUES_MS;
    // The feed's position before the listing: a change made while the
    // listing is read is read again at the next refresh.
    const [start, answer, queues] = await Promise.all([
      cheap ? feedStart() : null,
      listPages(status, queue, wanted),
      readQueues ? pages('/api/queues', 'queues', QUEUE_PAGES, QUEUES_SHOWN).catch(() => null) : null,
    ]);
    if (me !== loads) return false;
    if (queues) noteQueues(queues);
    list = answer.tasks;
    more = Boolean(answer.next_cursor);
    read = answer.pages;
    feed = start;
    fullAt = performance.now();
    show(ctx, arg, status, queue);
    return true;
  },

  tick() {
    for (const row of $('tasks-body').children) updateWait(row);
  },

  leave() {
    $('t-text').value = '';
    wanted = PAGES;
    feed = null; // coming back reads the whole listing
    loads++; // and one under way shows nothing
  },

  reset() {
    list = [];
    more = false;
    wanted = PAGES;
    read = 0;
    knownQueues = new Set();
    queuesReadAt = -Infinity;
    fullAt = -Infinity;
    feed = null;
    loads++;
    shownArg = null;
    $('tasks-body').replaceChildren();
    options($('t-queue'), []);
    $('t-status').value = '';
    $('t-text').value = '';
    text($('tasks-count'), '');
  },
};

// show sorts the list and draws it.
function show(ctx, arg, status, queue) {
  const order = (s) => { const i = STATUSES.indexOf(s); return i < 0 ? STATUSES.length : i; };
  list.sort((a, b) => (order(a.status) - order(b.status))
    || ((b.priority ?? 0) - (a.priority ?? 0))
    || String(a.created_at || '').localeCompare(String(b.created_at || ''))
    || String(a.task_id).localeCompare(String(b.task_id)));
  for (const t of list) if (t.queue) knownQueues.add(t.queue);
  for (const t of list) if (t.checkout?.agent_name) ctx.names.set(t.checkout.agent_id, t.checkout.agent_name);
  shownArg = arg;
  $('t-status').value = STATUSES.includes(status) ? status : '';
  queueOptions(queue);
  render();
}

function noteQueues(queues) {
  queuesReadAt = performance.now();
  for (const x of queues) if (x.queue) knownQueues.add(x.queue);
}

// feedStart is the fleet feed's cursor a second before now.
async function feedStart() {
  const since = new Date(serverNow() - 1000).toISOString();
  return (await get(`/api/events?since=${encodeURIComponent(since)}&limit=1000`)).next_cursor || null;
}

// update reads what changed since the last refresh without reading the
// whole listing: the tasks the feed names (their status moved) and those
// on screen are read one by one; a task that no longer matches the filters
// leaves the list, one that now does joins it. It returns the list brought
// up to date and the feed's cursor past what it read, or null when it
// cannot: more than CHANGED tasks are to be read, or the list, read whole,
// no longer adds up to the queue counts (addsUp). Nothing is kept unless
// all of it is read: a refresh that fails reads the same changes again at
// the next one. The counts are read after the feed, so that they hold at
// least what it names.
async function update(status, queue) {
  const changes = await feedSince(feed);
  const { items: queues, complete } = await pagesOf('/api/queues', 'queues', QUEUE_PAGES, QUEUES_SHOWN);
  noteQueues(queues);
  if (!changes) return null;
  const ids = new Set(changes.events.filter((e) => e.type !== 'renew').map((e) => e.task_id));
  if (ids.size > CHANGED) return null;
  const screen = onScreen().filter((id) => !ids.has(id));
  const turn = Math.min(screen.length, CHANGED - ids.size);
  const from = screen.length ? screenTurn % screen.length : 0;
  for (let i = 0; i < turn; i++) ids.add(screen[(from + i) % screen.length]);
  const byID = new Map(list.map((t) => [t.task_id, t]));
  const now = new Map(); // the status of each task read
  await Promise.all([...ids].map(async (id) => {
    try {
      const t = await get('/api/tasks/' + seg(id));
      now.set(id, t.status);
      if ((!status || t.status === status) && (!queue || t.queue === queue)) byID.set(id, t);
      else byID.delete(id);
    } catch (err) {
      if (!(err instanceof ApiError && err.status === 404)) throw err;
      byID.delete(id);
    }
  }));
  // A row shows the status of each task it waits on: those read are
  // brought up to date there too.
  for (const [id, t] of byID) {
    const blockers = t.blocked_by || [];
    if (!blockers.some((b) => now.has(b.task_id) && now.get(b.task_id) !== b.status)) continue;
    byID.set(id, { ...t, blocked_by: blockers.map((b) => (now.has(b.task_id) ? { ...b, status: now.get(b.task_id) } : b)) });
  }
  const fresh = [...byID.values()];
  if (!more && !addsUp(fresh, queues, complete, status, queue)) return null;
  screenTurn = turn < screen.length ? from + turn : 0;
  return { list: fresh, feed: changes.cursor };
}

// feedSince reads the feed from cursor on until it is caught up (up to 5
// pages): its events and the cursor past them, or null when more remain.
async function feedSince(cursor) {
  const events = [];
  for (let i = 0; i < 5; i++) {
    const page = await get(`/api/events?cursor=${encodeURIComponent(cursor)}&limit=1000`);
    const got = page.events || [];
    events.push(...got);
    if (page.next_cursor) cursor = page.next_cursor;
    if (!got.length || page.caught_up === true || !page.next_cursor) return { events, cursor };
  }
  return null;
}

// addsUp says whether tasks hold, queue by queue and status by status, as
// many tasks as the queue counts give the filters. A change no event
// names moves a count: a task created, reopened, cancelled without a
// lease, moved to another queue, blocked or unblocked by a PATCH of its
// blocked_by (a total would miss all but the first in a list of every
// status and queue). Past QUEUES_SHOWN queues the counts read are not
// complete: the tasks of the queues left unread are taken as listed (a
// task created in one of those shows at the next read of the whole
// listing, within FULL_MS), rather than read whole at every refresh. A
// lease that ended by time or death and is not yet swept is counted in
// progress, but listed as its ending leads (todo,
// blocked or failed), or, in a list of one status, not at all: as many
// tasks as the list has fewer in progress than counted, it has more of
// those statuses.
function addsUp(tasks, queues, complete, status, queue) {
  const have = new Map(); // queue -> status -> tasks
  for (const t of tasks) {
    if (!have.has(t.queue)) have.set(t.queue, new Map());
    const n = have.get(t.queue);
    n.set(t.status, (n.get(t.status) || 0) + 1);
  }
  for (const q of queues) {
    if (queue && q.queue !== queue) continue;
    const n = have.get(q.queue) || new Map();
    have.delete(q.queue);
    const counts = q.counts || {};
    const extra = (s) => (n.get(s) || 0) - (Number(counts[s]) || 0);
    if (status) {
      if (status === 'in_progress' ? extra(status) > 0 : extra(status) !== 0) return false;
      continue;
    }
    let unswept = -extra('in_progress');
    for (const s of new Set([...Object.keys(counts), ...n.keys()])) {
      if (s === 'in_progress') continue;
      if (LEADS.includes(s) && extra(s) >= 0) unswept -= extra(s);
      else if (extra(s) !== 0) return false;
    }
    if (unswept !== 0) return false;
  }
  return have.size === 0 || !complete;
}

// LEADS are the statuses a lease that ended by time or death leads to.
const LEADS = ['todo', 'blocked', 'failed'];

// onScreen is the ids of the tasks whose rows are in the window, found by
// halving (the rows are in order down the page).
function onScreen() {
  const rows = $('tasks-body').children;
  const height = window.innerHeight;
  let lo = 0;
  let hi = rows.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (rows[mid].getBoundingClientRect().bottom < 0) lo = mid + 1;
    else hi = mid;
  }
  const ids = [];
  for (let i = lo; i < rows.length; i++) {
    const r = rows[i].getBoundingClientRect();
    if (r.top > height) break;
    if (r.bottom > 0 && r.height > 0) ids.push(rows[i].dataset.key);
  }
  return ids;
}

// listPages reads up to max pages of the listing, following next_cursor
// (a cursor alone continues its own listing, filters included). A task
// listed twice (it changed status between two pages) is kept once, as last
// seen.
async function listPages(status, queue, max) {
  const q = new URLSearchParams({ limit: String(LIMIT) });
  if (status) q.set('status', status);
  if (queue) q.set('queue', queue);
  const byID = new Map();
  let page = null;
  let n = 0;
  do {
    const path = n === 0 ? '/api/tasks?' + q.toString()
      : '/api/tasks?' + new URLSearchParams({ limit: String(LIMIT), cursor: page.next_cursor }).toString();
    page = await get(path);
    n++;
    for (const t of page.tasks || []) byID.set(t.task_id, t);
  } while (page.next_cursor && n < max);
  return { tasks: [...byID.values()], next_cursor: page.next_cursor || null, pages: n };
}

// parseArg reads "<status>/<queue>" ("all" or nothing: any status).
export function parseArg(arg) {
  const [s = '', qRaw = ''] = String(arg || '').split('/');
  let queue = '';
  try { queue = decodeURIComponent(qRaw); } catch { queue = ''; }
  return { status: STATUSES.includes(s) ? s : '', queue };
}

// makeArg is the address of a filter (null: no filter).
export function makeArg(status, queue) {
  if (!status && !queue) return null;
  return (status || 'all') + (queue ? '/' + encodeURIComponent(queue) : '');
}

function queueOptions(chosen) {
  if (chosen) knownQueues.add(chosen);
  options($('t-queue'), [...knownQueues].sort());
  $('t-queue').value = chosen || '';
}

// matches says whether task t holds needle (lower case) in its id, title,
// queue, last error, status or blockers.
function matches(t, needle) {
  if (!needle) return true;
  return [t.task_id, t.title, t.queue, t.last_error, statusWords(t.status), ...(t.blocked_by || []).map((b) => b.task_id)]
    .some((s) => typeof s === 'string' && s.toLowerCase().includes(needle));
}

function makeRow() {
  return h('tr', {},
    td('Task', h('span', { class: 'task-cell' }), h('span', { class: 'sub title' }), h('span', { class: 'badge queue' })),
    td('Status', statusBadge('todo'), h('span', { class: 'sub wait' })),
    td('Priority', h('span', { class: 'num priority' })),
    td('Attempts', h('span', { class: 'num attempts' })),
    td('Waiting on, or last error', h('div', { class: 'details' })),
  );
}

function updateRow(row, t) {
  row.task = t;
  const cell = row.querySelector('.task-cell');
  if (cell.textContent !== t.task_id) cell.replaceChildren(taskLink(t.task_id));
  text(row.querySelector('.title'), isolate(t.title) || '');
  const q = row.querySelector('.queue');
  text(q, t.queue || '');
  q.hidden = !t.queue;
  setStatus(row.querySelector('.status'), t.status);
  text(row.querySelector('.priority'), t.priority ?? '—');
  text(row.querySelector('.attempts'), attemptsWords(t));
  updateWait(row);

  const details = row.querySelector('.details');
  const blockers = t.blocked_by || [];
  const sig = JSON.stringify([blockers, t.last_error ?? null]);
  if (details.dataset.sig !== sig) {
    details.dataset.sig = sig;
    replace(details,
      blockers.length ? blockerList(blockers, 'waiting-on') : null,
      t.last_error ? h('p', { class: 'last-error' }, h('span', { class: 'sr-only' }, 'Last error: '), isolate(t.last_error)) : null,
      !blockers.length && !t.last_error ? h('span', { class: 'muted' }, '—') : null,
    );
  }
}

// attemptsWords is "2 of 5" (or "—" from a server without attempts).
export function attemptsWords(t) {
  if (typeof t.attempts !== 'number') return '—';
  return typeof t.max_attempts === 'number' ? `${t.attempts} of ${t.max_attempts}` : String(t.attempts);
}

// blockerList is a list of blockers, each a link to its task with its
// status, the ones not done first.
export function blockerList(blockers, cls) {
  const sorted = blockers.slice().sort((a, b) => (a.status === 'done') - (b.status === 'done'));
  return h('ul', { class: 'deps ' + cls },
    sorted.map((b) => h('li', { dataset: { task: b.task_id } }, taskLink(b.task_id), ' ', statusBadge(b.status))));
}

// A task that waits for its not_before says until when, and how long that
// is from now.
function updateWait(row) {
  const t = row.task;
  const el = row.querySelector('.wait');
  const left = t && t.status === 'todo' ? until(t.not_before) : '';
  text(el, left ? `not before ${clock(t.not_before)} (${left})` : '');
  el.hidden = !left;
}

function render() {
  const needle = $('t-text').value.trim().toLowerCase();
  const shown = list.filter((t) => matches(t, needle));
  const filtering = $('t-text').value.trim() !== '';
  reconcile($('tasks-body'), shown, (t) => t.task_id, makeRow, updateRow);
  const n = list.length + (more ? '+' : '');
  text($('tasks-count'), list.length === shown.length ? `(${n})` : `(${shown.length} of ${n})`);
  const { status, queue } = parseArg(shownArg);
  const what = [status ? statusWords(status) : '', queue ? `in queue ${queue}` : ''].filter(Boolean).join(' ');
  const empty = $('tasks-empty');
  empty.hidden = shown.length > 0;
  text(empty, list.length === 0 ? `No task${what ? ' ' + what : ''}.`
    : more ? `No task matches the filter: it searched only the ${list.length} tasks loaded, and more remain. Load more to search them too.`
      : `No task matches the filter (${list.length} hidden).`);
  $('tasks-table').hidden = shown.length === 0;
  const m = $('tasks-more');
  if (!more && m.contains(document.activeElement)) $('tasks-h').focus(); // the button goes
  m.hidden = !more;
  text($('tasks-more-text'), more
    ? `Showing the first ${list.length} tasks (${read} ${read === 1 ? 'page' : 'pages'}); more remain.${filtering ? ' The text filter searched only these.' : ''}`
    : '');
}

export default view;
