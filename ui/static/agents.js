// Agents (admin keys only: GET /api/agents is an admin route): liveness by
// heartbeat, the last heartbeat, the leases each holds, and remove (not
// offered for the built-in admin, which the API refuses to remove).

import { ApiError, get, del, seg, pages, serverNow } from './api.js';
import { $, h, text, reconcile, taskLink, replace, td } from './dom.js';
import { setTime, ago, ms, isolate } from './format.js';

let agents = [];
let held = new Map(); // agent_id -> [task_id]
let loads = 0; // loads started: only the latest shows what it read

// The built-in admin is the agent "admin" (README, API.md: DELETE is 409
// cannot_remove_admin). The listing does not mark it, so an agent the
// server refuses to remove for that reason is added here too.
const BUILT_IN_ADMIN = 'admin';
const notRemovable = new Set([BUILT_IN_ADMIN]);

const STATUS = {
  alive: 'Alive',
  dead: 'Dead',
  never: 'Never heard from',
};

const status = (a) => (a.alive === true ? 'alive' : a.alive === false ? 'dead' : 'never');

const view = {
  title: () => 'Agents',

  async load(ctx) {
    const me = ++loads;
    // Every page of the agents and of the leases (one each unless they
    // pass 5 MB of JSON).
    const [list, live] = await Promise.all([pages('/api/agents', 'agents', 20), pages('/api/checkouts', 'checkouts', 20)]);
    // An older answer, overtaken by a later load (the refresh after a
    // removal), would bring the removed agent back.
    if (me !== loads) return false;
    agents = list.slice().sort((a, b) => (a.name || a.agent_id).localeCompare(b.name || b.agent_id) || a.agent_id.localeCompare(b.agent_id));
    held = new Map();
    for (const c of live) {
      if (!held.has(c.agent_id)) held.set(c.agent_id, []);
      held.get(c.agent_id).push(c.task_id);
    }
    for (const a of agents) ctx.names.set(a.agent_id, a.name || a.agent_id);
    reconcile($('agents-body'), agents, (a) => a.agent_id, makeRow, (row, a) => updateRow(ctx, row, a));
    text($('agents-count'), `(${agents.length})`);
    $('agents-empty').hidden = agents.length > 0;
  },

  tick() {
    for (const row of $('agents-body').children) updateAgo(row);
  },

  reset() {
    loads++;
    agents = [];
    held = new Map();
    $('agents-body').replaceChildren();
    text($('agents-count'), '');
  },
};

function makeRow() {
  return h('tr', {},
    td('Agent', h('span', { class: 'agent-name' }), h('span', { class: 'badge admin-badge', hidden: true }, 'admin'), h('span', { class: 'sub mono agent-id' })),
    td('Status', h('span', { class: 'state' })),
    td('Last heartbeat', h('time', { class: 'heartbeat' }), h('span', { class: 'sub heartbeat-ago' })),
    td('Leases held', h('span', { class: 'held' })),
    td('Actions', h('span', { class: 'actions' })),
  );
}

// actions fills a row's actions: Remove, or why there is none.
function actions(ctx, row, a) {
  const cell = row.querySelector('.actions');
  const removable = notRemovable.has(a.agent_id) ? 'no' : 'yes';
  if (cell.dataset.removable === removable) return;
  cell.dataset.removable = removable;
  if (removable === 'no') {
    replace(cell, h('span', { class: 'muted not-removable' }, 'The built-in admin cannot be removed'));
    return;
  }
  const remove = h('button', { type: 'button', class: 'danger small remove', 'aria-label': `Remove agent ${a.agent_id}` }, 'Remove…');
  remove.addEventListener('click', () => removeAgent(ctx, remove.closest('tr').agent));
  replace(cell, remove);
}

function updateRow(ctx, row, a) {
  row.agent = a;
  text(row.querySelector('.agent-name'), isolate(a.name) || a.agent_id);
  row.querySelector('.admin-badge').hidden = !a.admin;
  text(row.querySelector('.agent-id'), a.agent_id);
  const st = status(a);
  const state = row.querySelector('.state');
  state.className = 'state state-' + st;
  text(state, STATUS[st]);
  const hb = row.querySelector('.heartbeat');
  if (a.last_heartbeat_at) setTime(hb, a.last_heartbeat_at);
  else text(hb, '—');
  updateAgo(row);
  actions(ctx, row, a);
  const tasks = held.get(a.agent_id) || [];
  const cell = row.querySelector('.held');
  const key = tasks.join('\n');
  if (cell.dataset.tasks !== key || cell.childNodes.length === 0) {
    cell.dataset.tasks = key;
    const shown = tasks.slice(0, 5);
    replace(cell,
      h('span', { class: 'count-n' }, String(tasks.length)),
      shown.length ? h('span', { class: 'sub' }, ...shown.flatMap((t, i) => [i ? ', ' : '', taskLink(t)]), tasks.length > shown.length ? ` and ${tasks.length - shown.length} more` : '') : null,
    );
  }
}

function updateAgo(row) {
  const a = row.agent;
  if (!a) return;
  const t = ms(a.last_heartbeat_at);
  text(row.querySelector('.heartbeat-ago'), t ? ago((serverNow() - t) / 1000) : '');
}

async function removeAgent(ctx, a) {
  if (!a) return;
  // What the removal ends, read now and whole: the list may be a refresh
  // old, or cut short at its last page read.
  let tasks = held.get(a.agent_id) || [];
  try {
    tasks = (await pages('/api/checkouts?agent_id=' + encodeURIComponent(a.agent_id), 'checkouts', 50)).map((c) => c.task_id);
  } catch {
    // Shown as last read; the removal itself is the server's to make.
  }
  const who = a.name && a.name !== a.agent_id ? `${isolate(a.name)} (${a.agent_id})` : a.agent_id;
  const body = [
    `Its API key stops working at once${a.admin ? ', and it loses its admin rights' : ''}.`,
    tasks.length
      ? h('p', {}, `Its ${tasks.length === 1 ? 'live lease ends' : tasks.length + ' live leases end'} at once, recorded as “holder died” (agent_death, reason “agent removed”): `,
        ...tasks.flatMap((t, i) => [i ? ', ' : '', h('strong', { class: 'mono' }, t)]),
        `. ${tasks.length === 1 ? 'That task goes' : 'Those tasks go'} back to “to do”, free for other agents to check out, and ${tasks.length === 1 ? 'its' : 'their'} watchers are told.`)
      : 'It holds no live lease, so no task is affected.',
    'Its past events stay in the audit trail. The same id can be registered again later and starts clean.',
  ];
  ctx.confirm({
    title: `Remove agent ${who}?`,
    body,
    action: 'Remove agent',
    run: async () => {
      try {
        await del('/api/agents/' + seg(a.agent_id));
      } catch (err) {
        // The server's own sentence is shown in the dialog; Remove is no
        // longer offered for this agent.
        if (err instanceof ApiError && err.code === 'cannot_remove_admin') {
          notRemovable.add(a.agent_id);
          ctx.refresh();
        }
        throw err;
      }
      ctx.notice(`Removed agent ${who}${tasks.length ? `; ${tasks.length} ${tasks.length === 1 ? 'lease' : 'leases'} ended` : ''}.`);
      ctx.refresh();
    },
  });
}

export default view;
