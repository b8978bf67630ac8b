// Queues (shown only when the API serves GET /api/queues): tasks by status
// in each queue, and the age of the oldest task to do.

import { get } from './api.js';
import { $, h, text, reconcile, td } from './dom.js';
import { setTime, ago, ms } from './format.js';

const STATUSES = ['todo', 'in_progress', 'done', 'cancelled'];

const view = {
  title: () => 'Queues',

  async load() {
    const answer = await get('/api/queues');
    const queues = (answer.queues || []).slice().sort((a, b) => String(a.queue).localeCompare(String(b.queue)));
    reconcile($('queues-body'), queues, (q) => q.queue, makeRow, updateRow);
    $('queues-empty').hidden = queues.length > 0;
  },

  tick() {
    for (const row of $('queues-body').children) updateAge(row);
  },

  reset() {
    $('queues-body').replaceChildren();
  },
};

const LABELS = { todo: 'To do', in_progress: 'In progress', done: 'Done', cancelled: 'Cancelled' };

function makeRow() {
  return h('tr', {},
    td('Queue', h('span', { class: 'mono q-name' })),
    ...STATUSES.map((s) => td(LABELS[s], h('span', { class: 'num q-' + s }))),
    td('Oldest to do', h('span', { class: 'q-age' }), h('time', { class: 'sub q-oldest' })),
  );
}

function updateRow(row, q) {
  row.queue = q;
  text(row.querySelector('.q-name'), q.queue);
  for (const s of STATUSES) text(row.querySelector('.q-' + s), String(q.counts?.[s] ?? 0));
  const oldest = row.querySelector('.q-oldest');
  if (q.oldest_todo_at) setTime(oldest, q.oldest_todo_at);
  else text(oldest, '');
  updateAge(row);
}

function updateAge(row) {
  const t = ms(row.queue?.oldest_todo_at);
  text(row.querySelector('.q-age'), t ? ago((Date.now() - t) / 1000).replace(' ago', ' old') : '—');
}

export default view;
