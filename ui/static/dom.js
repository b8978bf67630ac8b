// DOM helpers. Every string from the API reaches the page as text
// (textContent, text nodes, attribute values); nothing is ever parsed as
// HTML.

import { statusWords } from './format.js';

// h builds an element. attrs: class, text, dataset, on<event> handlers, and
// plain attributes (true: present, null/false/undefined: absent).
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'text') el.textContent = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
}

// $ is getElementById.
export const $ = (id) => document.getElementById(id);

// text sets an element's text, touching the DOM only when it changes (no
// flicker, no lost selection).
export function text(el, value) {
  const s = value === null || value === undefined ? '' : String(value);
  if (el.textContent !== s) el.textContent = s;
}

// attr sets or removes an attribute only when it changes.
export function attr(el, name, value) {
  if (value === null || value === undefined || value === false) {
    if (el.hasAttribute(name)) el.removeAttribute(name);
    return;
  }
  const s = value === true ? '' : String(value);
  if (el.getAttribute(name) !== s) el.setAttribute(name, s);
}

// replace swaps an element's children for new ones.
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
}

// reconcile keeps a container's children in step with items: one child per
// key, created once by make and updated in place by update, in the items'
// order. Rows that stay are updated, never rebuilt, so a refresh does not
// flicker. Rows that go are removed first, and the row holding focus is
// never moved (moving an element blurs it): the others are placed around
// it, so focus stays put.
export function reconcile(container, items, key, make, update) {
  const want = new Set(items.map((item) => String(key(item))));
  const old = new Map();
  for (const el of [...container.children]) {
    if (el.dataset.key === undefined) continue;
    if (want.has(el.dataset.key)) old.set(el.dataset.key, el);
    else el.remove();
  }
  const active = document.activeElement;
  let pinned = null; // the row holding focus, which stays where it is
  for (const el of old.values()) if (el.contains(active)) pinned = el;
  let prev = null;
  for (const item of items) {
    const k = String(key(item));
    let el = old.get(k);
    if (!el) {
      el = make(item);
      el.dataset.key = k;
    }
    update(el, item);
    const next = prev ? prev.nextElementSibling : container.firstElementChild;
    // Rows left between prev and the pinned row come later in items: each
    // is moved after it in its turn.
    if (el !== next && el !== pinned) container.insertBefore(el, next);
    prev = el;
  }
}

// td is a table cell whose contents sit in one box, so that on narrow
// screens (where each row is a card) its label and its contents make two
// columns whatever the contents are.
export function td(label, ...children) {
  return h('td', { dataset: { label } }, h('div', { class: 'cell' }, ...children));
}

// taskLink is a link to a task's page.
export function taskLink(taskID, label) {
  return h('a', { href: '#/task/' + encodeURIComponent(taskID), class: 'task-id' }, label ?? taskID);
}

// statusBadge is a task's status as a badge: its words, and a class per
// status for its colour (the words are never left out, so colour is not the
// only signal).
export function statusBadge(status) {
  const el = h('span', { class: 'badge status' });
  setStatus(el, status);
  return el;
}

// setStatus updates a status badge in place.
export function setStatus(el, status) {
  status = String(status ?? '');
  text(el, statusWords(status));
  const cls = 'badge status status-' + status;
  if (el.className !== cls) el.className = cls;
  if (el.dataset.status !== status) el.dataset.status = status;
}

// options keeps a <select>'s options equal to items (after its first, "all"
// option), keeping the current choice. An item is a value or
// {value, label}.
export function options(select, items) {
  const want = items.map((i) => (typeof i === 'object' ? i : { value: i, label: i }));
  const have = [...select.options].slice(1);
  if (want.length === have.length && want.every((w, i) => w.value === have[i].value && w.label === have[i].textContent)) return;
  const keep = select.value;
  const first = select.options[0];
  select.replaceChildren(first, ...want.map((w) => h('option', { value: w.value }, w.label)));
  select.value = want.some((w) => w.value === keep) ? keep : '';
}
