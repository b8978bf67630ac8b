// Live checkouts: every live lease, soonest expiry first, with its task's
// title and a remaining-time bar; filterable by agent, queue and text.

import { pages } from './api.js';
import { $, h, text, reconcile, taskLink, options, td } from './dom.js';
import { setTime, ms, isolate } from './format.js';
import { makeBar, updateBar } from './bar.js';

let leases = []; // the last answer, each with seenAt
let taskInfo = new Map(); // task_id -> {title, queue}
// loads counts the loads started: one that a later one (Refresh now, an
// admin action's refresh) overtook shows nothing, so that its older answer
// cannot bring back a lease that the later one saw ended.
let loads = 0;

const view = {
  title: () => 'Live checkouts',

  setup() {
    for (const id of ['f-agent', 'f-queue']) $(id).addEventListener('change', render);
    $('f-text').addEventListener('input', render);
    $('checkouts-filter').addEventListener('submit', (e) => e.preventDefault());
  },

  async load(ctx) {
    const me = ++loads;
    // The leases, and the titles (and queues) of the tasks in progress.
    // Every page of the leases (one unless they pass 5 MB of JSON).
    const [live, tasks] = await Promise.all([
      pages('/api/checkouts', 'checkouts', 20),
      pages('/api/tasks?status=in_progress&limit=1000', 'tasks', 5),
    ]);
    if (me !== loads) return false;
    const seenAt = performance.now();
    taskInfo = new Map(tasks.map((t) => [t.task_id, { title: t.title || '', queue: t.queue ?? null }]));
    leases = live.map((c) => ({ ...c, seenAt }));
    leases.sort((a, b) => (ms(a.expires_at) - ms(b.expires_at)) || a.task_id.localeCompare(b.task_id));
    for (const c of leases) if (c.agent_name) ctx.names.set(c.agent_id, c.agent_name);
    render();
  },

  tick(_ctx, now) {
    for (const row of $('checkouts-body').children) {
      if (row.lease) updateBar(row.querySelector('.bar'), row.lease, now);
    }
  },

  reset() {
    loads++;
    leases = [];
    taskInfo = new Map();
    $('checkouts-body').replaceChildren();
    for (const id of ['f-agent', 'f-queue']) options($(id), []);
    $('f-text').value = '';
    text($('checkouts-count'), '');
  },
};

function info(c) {
  const t = taskInfo.get(c.task_id) || {};
  return { title: c.title ?? t.title ?? '', queue: c.queue ?? t.queue ?? null };
}

function filterOptions() {
  const agent = $('f-agent');
  const holders = new Map();
  for (const c of leases) holders.set(c.agent_id, c.agent_name || c.agent_id);
  // A chosen agent stays in the list while it holds nothing, so the filter
  // does not silently reset.
  if (agent.value && !holders.has(agent.value)) holders.set(agent.value, agent.value);
  options(agent, [...holders].sort((a, b) => a[1].localeCompare(b[1]))
    .map(([id, name]) => ({ value: id, label: name === id ? id : `${isolate(name)} (${id})` })));

  const queue = $('f-queue');
  const queues = new Set(leases.map((c) => info(c).queue).filter((q) => q));
  if (queue.value) queues.add(queue.value);
  options(queue, [...queues].sort());
  // Queues are shown once the API tells them (tasks carry queue).
  $('f-queue-label').hidden = queues.size === 0;
}

function matches(c) {
  const agent = $('f-agent').value;
  const queue = $('f-queue').value;
  const needle = $('f-text').value.trim().toLowerCase();
  const i = info(c);
  if (agent && c.agent_id !== agent) return false;
  if (queue && i.queue !== queue) return false;
  if (!needle) return true;
  return [c.task_id, i.title, c.agent_id, c.agent_name, c.reason, c.run_id, i.queue]
    .some((s) => typeof s === 'string' && s.toLowerCase().includes(needle));
}

function makeRow() {
  return h('tr', {},
    td('Task', h('span', { class: 'task-cell' }), h('span', { class: 'sub title' }), h('span', { class: 'badge queue' })),
    td('Holder', h('span', { class: 'holder-name' }), h('span', { class: 'sub mono holder-id' })),
    td('Fence', h('span', { class: 'mono fence' }), h('span', { class: 'sub attempt', hidden: true })),
    td('Locked at', h('time', { class: 'locked' })),
    td('Remaining', makeBar()),
    td('Reason', h('span', { class: 'reason' })),
  );
}

function updateRow(row, c) {
  row.lease = c;
  const i = info(c);
  const taskCell = row.querySelector('.task-cell');
  const link = taskCell.firstElementChild;
  if (!link || link.textContent !== c.task_id) taskCell.replaceChildren(taskLink(c.task_id));
  text(row.querySelector('.title'), isolate(i.title));
  const q = row.querySelector('.queue');
  text(q, i.queue || '');
  q.hidden = !i.queue;
  text(row.querySelector('.holder-name'), isolate(c.agent_name) || c.agent_id);
  text(row.querySelector('.holder-id'), c.agent_id);
  text(row.querySelector('.fence'), '#' + c.fence);
  const attempt = row.querySelector('.attempt');
  text(attempt, typeof c.attempt === 'number' ? `attempt ${c.attempt}` : '');
  attempt.hidden = typeof c.attempt !== 'number';
  setTime(row.querySelector('.locked'), c.locked_at);
  text(row.querySelector('.reason'), isolate(c.reason) || '—');
  updateBar(row.querySelector('.bar'), c, performance.now());
}

function render() {
  filterOptions();
  const shown = leases.filter(matches);
  reconcile($('checkouts-body'), shown, (c) => c.task_id, makeRow, updateRow);
  text($('checkouts-count'), leases.length === shown.length ? `(${leases.length})` : `(${shown.length} of ${leases.length})`);
  const empty = $('checkouts-empty');
  empty.hidden = shown.length > 0;
  text(empty, leases.length === 0 ? 'No task is checked out right now.' : `No live checkout matches the filter (${leases.length} hidden).`);
  $('checkouts-table').hidden = shown.length === 0;
}

export default view;
