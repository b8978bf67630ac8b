// Tasks: the task list (GET /api/tasks), filtered by status and queue on the
// server and by text here. Blocked tasks show what they wait on, each
// blocker with its status; failed ones (and any task whose latest attempt
// failed) show their last error, as text. The address keeps the filters:
// #/tasks/<status>/<queue>, "all" for any status.

import { get } from './api.js';
import { $, h, text, reconcile, replace, taskLink, options, td, statusBadge, setStatus } from './dom.js';
import { STATUSES, statusWords, until, clock } from './format.js';

const LIMIT = 500;

let list = []; // the last answer, sorted
let more = false; // the answer had a next page
let knownQueues = new Set();
let shownArg = null; // the filters the list was loaded for

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
    $('t-text').addEventListener('input', render);
    $('tasks-filter').addEventListener('submit', (e) => e.preventDefault());
  },

  enter(_ctx, arg) {
    const { status, queue } = parseArg(arg);
    $('t-status').value = STATUSES.includes(status) ? status : '';
    if (queue) knownQueues.add(queue);
    queueOptions(queue);
  },

  async load(ctx, arg) {
    const { status, queue } = parseArg(arg);
    const q = new URLSearchParams({ limit: String(LIMIT) });
    if (status) q.set('status', status);
    if (queue) q.set('queue', queue);
    const [answer, queues] = await Promise.all([
      get('/api/tasks?' + q.toString()),
      ctx.features.queues ? get('/api/queues').catch(() => null) : null,
    ]);
    for (const x of queues?.queues || []) if (x.queue) knownQueues.add(x.queue);
    const order = (s) => { const i = STATUSES.indexOf(s); return i < 0 ? STATUSES.length : i; };
    list = (answer.tasks || []).slice().sort((a, b) => (order(a.status) - order(b.status))
      || ((b.priority ?? 0) - (a.priority ?? 0))
      || String(a.created_at || '').localeCompare(String(b.created_at || ''))
      || String(a.task_id).localeCompare(String(b.task_id)));
    for (const t of list) if (t.queue) knownQueues.add(t.queue);
    for (const t of list) if (t.checkout?.agent_name) ctx.names.set(t.checkout.agent_id, t.checkout.agent_name);
    more = Boolean(answer.next_cursor);
    shownArg = arg;
    $('t-status').value = STATUSES.includes(status) ? status : '';
    queueOptions(queue);
    render();
  },

  tick() {
    for (const row of $('tasks-body').children) updateWait(row);
  },

  leave() {
    $('t-text').value = '';
  },

  reset() {
    list = [];
    more = false;
    knownQueues = new Set();
    shownArg = null;
    $('tasks-body').replaceChildren();
    options($('t-queue'), []);
    $('t-status').value = '';
    $('t-text').value = '';
    text($('tasks-count'), '');
  },
};

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

function matches(t) {
  const needle = $('t-text').value.trim().toLowerCase();
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
  text(row.querySelector('.title'), t.title || '');
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
      t.last_error ? h('p', { class: 'last-error' }, h('span', { class: 'sr-only' }, 'Last error: '), t.last_error) : null,
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
  const shown = list.filter(matches);
  reconcile($('tasks-body'), shown, (t) => t.task_id, makeRow, updateRow);
  const n = list.length + (more ? '+' : '');
  text($('tasks-count'), list.length === shown.length ? `(${n})` : `(${shown.length} of ${n})`);
  const { status, queue } = parseArg(shownArg);
  const what = [status ? statusWords(status) : '', queue ? `in queue ${queue}` : ''].filter(Boolean).join(' ');
  const empty = $('tasks-empty');
  empty.hidden = shown.length > 0;
  text(empty, list.length === 0 ? `No task${what ? ' ' + what : ''}.` : `No task matches the filter (${list.length} hidden).`);
  $('tasks-table').hidden = shown.length === 0;
  const m = $('tasks-more');
  m.hidden = !more;
  text(m, more ? `Showing the first ${LIMIT} tasks; choose a status or a queue to see the others.` : '');
}

export default view;
