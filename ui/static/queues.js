// Queues (shown only when the API serves GET /api/queues): tasks by status
// in each queue, and the age of the oldest task to do. Each count links to
// the task list of that status and queue; blocked and failed tasks, which
// need someone's attention, stand out when there are any.

import { pages, serverNow } from './api.js';
import { $, h, text, attr, reconcile, td } from './dom.js';
import { setTime, ago, ms, STATUSES } from './format.js';
import { makeArg, QUEUE_PAGES, QUEUES_SHOWN } from './tasks.js';

// The statuses whose counts stand out when they are not zero.
const ATTENTION = new Set(['blocked', 'failed']);

let loads = 0; // loads started: only the latest shows what it read

const view = {
  title: () => 'Queues',

  async load() {
    const me = ++loads;
    // Up to 2,000 queues, in at most 20 pages.
    const queues = (await pages('/api/queues', 'queues', QUEUE_PAGES, QUEUES_SHOWN)).sort((a, b) => String(a.queue).localeCompare(String(b.queue)));
    if (me !== loads) return false;
    reconcile($('queues-body'), queues, (q) => q.queue, makeRow, updateRow);
    $('queues-empty').hidden = queues.length > 0;
  },

  tick() {
    for (const row of $('queues-body').children) updateAge(row);
  },

  reset() {
    loads++;
    $('queues-body').replaceChildren();
  },
};

const LABELS = { todo: 'To do', blocked: 'Blocked', in_progress: 'In progress', done: 'Done', cancelled: 'Cancelled', failed: 'Failed' };

function makeRow() {
  return h('tr', {},
    td('Queue', h('span', { class: 'mono q-name' })),
    ...STATUSES.map((s) => td(LABELS[s], h('a', { class: 'num q-count q-' + s }))),
    td('Oldest to do', h('span', { class: 'q-age' }), h('time', { class: 'sub q-oldest' })),
  );
}

function updateRow(row, q) {
  row.queue = q;
  text(row.querySelector('.q-name'), q.queue);
  for (const s of STATUSES) {
    const a = row.querySelector('.q-' + s);
    const n = Number(q.counts?.[s] ?? 0);
    text(a, String(n));
    attr(a, 'href', '#/tasks/' + makeArg(s, q.queue));
    attr(a, 'aria-label', `${n} ${LABELS[s].toLowerCase()} in queue ${q.queue}`);
    attr(a, 'data-attention', ATTENTION.has(s) && n > 0 ? s : null);
  }
  const oldest = row.querySelector('.q-oldest');
  if (q.oldest_todo_at) setTime(oldest, q.oldest_todo_at);
  else text(oldest, '');
  updateAge(row);
}

function updateAge(row) {
  const t = ms(row.queue?.oldest_todo_at);
  text(row.querySelector('.q-age'), t ? ago((serverNow() - t) / 1000).replace(' ago', ' old') : '—');
}

export default view;
