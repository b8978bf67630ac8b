// What a refresh reads and redraws, in headless chromium against the real
// local server: a sign-in whose check of the optional routes fails, the
// task list's refresh past 40 rows on screen or 2,000 queues, a task
// page's timeline between refreshes, and metadata in right-to-left
// scripts. Run alone: `cd e2e/browser && node --test
// dashboard_refresh.test.mjs` (built and seeded here, as
// dashboard.test.mjs is).

import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';
import { CHROMIUM, FLAGS, skip, sleep, adminKey, startServer, call, mustCall } from './harness.mjs';

const ADMIN_KEY = adminKey('refresh');

let server;
const start = () => startServer('refresh', 'rf', ADMIN_KEY);
const api = (key, method, path, body) => call(server.url, key, method, path, body);
const must = (key, method, path, body) => mustCall(server.url, key, method, path, body);
const json = (status, body) => ({ status, contentType: 'application/json', body: JSON.stringify(body) });

describe('dashboard refreshes', { skip, timeout: 240000 }, () => {
  let browser;
  const keys = {};
  const pages = [];

  before(async () => {
    server = await start();
    keys.w = (await must(ADMIN_KEY, 'POST', '/api/agents', { agent_id: 'w', name: 'worker' })).api_key;
    keys.v = (await must(ADMIN_KEY, 'POST', '/api/agents', { agent_id: 'v', name: 'other worker' })).api_key;
    await must(keys.w, 'POST', '/api/heartbeat', { ttl: '10m' });
    await must(keys.v, 'POST', '/api/heartbeat', { ttl: '10m' });
    // 60 tasks in the default queue, more than fit 40 rows.
    await Promise.all(Array.from({ length: 60 }, (_, i) =>
      must(keys.w, 'POST', '/api/tasks', { task_id: 'r-' + String(i).padStart(2, '0'), title: 'Row ' + i })));
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: FLAGS });
  });

  after(async () => {
    await browser?.close();
    if (server && server.proc.exitCode === null) {
      server.proc.kill('SIGINT');
      await server.exited;
    }
  });

  // open signs in, in a context of its own (setup(page) runs first), and
  // goes to hash. With paced, the page's timers run only when the test
  // moves its clock: refresh() then moves it by ms (a refresh's worth) and
  // returns the API requests made, once all are answered.
  async function open(hash, { height = 900, paced = false, setup = async () => {} } = {}) {
    const page = await (await browser.newContext()).newPage();
    pages.push(page);
    await page.setViewportSize({ width: 1440, height });
    await setup(page);
    const calls = [];
    let pending = 0;
    page.on('request', (r) => { if (r.url().includes('/api/')) { calls.push(new URL(r.url())); pending++; } });
    const done = (r) => { if (r.url().includes('/api/')) pending--; };
    page.on('requestfinished', done);
    page.on('requestfailed', done);
    if (paced) {
      await page.clock.install();
      await page.clock.pauseAt(new Date(Date.now() + 1000));
    }
    await page.goto(server.url + '/');
    await page.fill('#key', ADMIN_KEY);
    await page.press('#key', 'Enter');
    await page.locator('#nav').waitFor();
    await page.evaluate((h) => { location.hash = h; }, hash);
    const settle = async () => {
      for (let quiet = 0; quiet < 2;) { await sleep(150); quiet = pending > 0 ? 0 : quiet + 1; }
    };
    const refresh = async (ms = 3000) => {
      await settle();
      calls.length = 0;
      await page.clock.runFor(ms);
      await settle();
      return calls.slice();
    };
    return { page, calls, refresh, settle };
  }
  const listing = (c) => c.pathname === '/api/tasks';
  const oneByOne = (c) => /^\/api\/tasks\/[^/]+$/.test(c.pathname);

  test('a sign-in whose check of the queues and events routes fails asks again, and says so', async () => {
    const failed = new Set();
    const { page } = await open('#/checkouts', {
      setup: (p) => p.route((u) => u.pathname === '/api/queues' || u.pathname === '/api/events', (r) => {
        const path = new URL(r.request().url()).pathname;
        if (failed.has(path)) return r.continue();
        failed.add(path);
        return r.fulfill(json(503, { error: 'the database cannot be reached', code: 'unavailable' }));
      }),
    });
    await page.locator('#notice').filter({ hasText: /queues and events/ }).waitFor();
    // The next refresh asks again, and the views appear.
    await page.locator('#nav a[data-view="queues"]').waitFor({ timeout: 8000 });
    await page.locator('#nav a[data-view="events"]').waitFor();
    assert.equal(failed.size, 2, 'both routes were checked');
    await page.close();
  });

  test('a 404 that is not the API\'s not_found (a proxy\'s page) is no answer, and the check is made again', async () => {
    let failed = false;
    const { page } = await open('#/checkouts', {
      setup: (p) => p.route((u) => u.pathname === '/api/events', (r) => {
        if (failed) return r.continue();
        failed = true;
        return r.fulfill({ status: 404, contentType: 'text/html', body: '<h1>Not Found</h1>' });
      }),
    });
    await page.locator('#notice').filter({ hasText: /events view/ }).waitFor();
    await page.locator('#nav a[data-view="events"]').waitFor({ timeout: 8000 });
    assert.ok(failed);
    await page.close();
  });

  test('a server that answers 404 not_found for the queues and events routes hides them, and is not asked again', async () => {
    const asked = [];
    const { page, refresh } = await open('#/tasks', {
      paced: true,
      setup: (p) => p.route((u) => u.pathname === '/api/queues' || u.pathname === '/api/events', (r) => {
        asked.push(new URL(r.request().url()).pathname);
        return r.fulfill(json(404, { error: 'no such route', code: 'not_found' }));
      }),
    });
    await page.locator('#tasks-body > tr[data-key="r-00"]').waitFor();
    assert.equal(asked.length, 2, `asked: ${asked}`);
    await refresh();
    assert.equal(asked.length, 2, `asked again: ${asked}`);
    assert.ok(await page.locator('#nav a[data-view="queues"]').isHidden());
    assert.ok(await page.locator('#nav a[data-view="events"]').isHidden());
    await page.close();
  });

  test('a sign-in that lands on #/queues while the check fails shows the queues once it is answered', async () => {
    let failedOnce = false;
    const { page } = await open('#/checkouts', {
      setup: (p) => p.route((u) => u.pathname === '/api/queues', (r) => {
        if (failedOnce) return r.continue();
        failedOnce = true;
        return r.fulfill(json(503, { error: 'the database cannot be reached', code: 'unavailable' }));
      }),
    });
    // The address stays what the person asked for.
    await page.evaluate(() => { location.hash = '#/queues'; });
    await page.locator('#view-queues').waitFor({ timeout: 8000 });
    assert.equal(await page.evaluate(() => location.hash), '#/queues');
    await page.close();
  });

  test('a task list refresh with more than 40 rows on screen reads what changed, not the whole listing', async () => {
    const { page, refresh } = await open('#/tasks', { height: 4000, paced: true });
    await page.locator('#tasks-body > tr[data-key="r-59"]').waitFor();
    const onScreen = await page.evaluate(() => [...document.querySelectorAll('#tasks-body > tr')]
      .filter((r) => { const b = r.getBoundingClientRect(); return b.bottom > 0 && b.top < innerHeight; }).length);
    assert.ok(onScreen > 40, `${onScreen} rows on screen`);
    let got = await refresh();
    assert.equal(got.filter(listing).length, 0, 'the listing was read: ' + got.map(String).join(' '));
    assert.ok(got.filter(oneByOne).length <= 40, `${got.filter(oneByOne).length} tasks read one by one`);
    // A change no event names on the last row on screen shows within two
    // refreshes (40 rows a refresh), still without the listing.
    const last = await page.evaluate(() => [...document.querySelectorAll('#tasks-body > tr')]
      .filter((r) => r.getBoundingClientRect().top < innerHeight).pop().dataset.key);
    await must(keys.w, 'PATCH', '/api/tasks/' + last, { title: 'Renamed far down' });
    got = await refresh();
    got.push(...await refresh());
    assert.equal(got.filter(listing).length, 0, 'the listing was read: ' + got.map(String).join(' '));
    await page.locator(`#tasks-body > tr[data-key="${last}"] .title`).filter({ hasText: 'Renamed far down' }).waitFor({ timeout: 2000 });
    await page.close();
  });

  test('a task list refresh past 2,000 queues reads what changed, not the whole listing', async () => {
    // 2,000 queues before the real ones (answered by the browser, 100 a
    // page): the real queues' counts come after the 2,000th.
    const counts = { todo: 0, blocked: 0, in_progress: 0, done: 0, cancelled: 0, failed: 0 };
    const { page, refresh } = await open('#/tasks', {
      paced: true,
      setup: (p) => p.route((u) => u.pathname === '/api/queues', async (r) => {
        const url = new URL(r.request().url());
        const from = Number(url.searchParams.get('cursor') || 0);
        if (from >= 2000) {
          const real = await r.fetch({ url: server.url + '/api/queues' });
          return r.fulfill(json(200, { queues: (await real.json()).queues, next_cursor: null }));
        }
        const queues = [];
        for (let i = from; i < from + 100; i++) queues.push({ queue: 'a-' + String(i).padStart(4, '0'), counts, oldest_todo_at: null });
        return r.fulfill(json(200, { queues, next_cursor: String(from + 100) }));
      }),
    });
    await page.locator('#tasks-body > tr[data-key="r-00"]').waitFor();
    const got = await refresh();
    assert.equal(got.filter(listing).length, 0, 'the listing was read: ' + got.map(String).join(' '));
    // A status the feed names still shows.
    await must(keys.v, 'POST', '/api/tasks/r-01/checkout', { timeout: '1h', run_id: 'q-run' });
    await refresh();
    await page.locator('#tasks-body > tr[data-key="r-01"] .status').filter({ hasText: /in progress/i }).waitFor({ timeout: 2000 });
    await must(keys.v, 'POST', '/api/tasks/r-01/release', { run_id: 'q-run' });
    await page.close();
  });

  test('a task page appends new events and leaves the rest of its timeline untouched', async () => {
    await must(keys.w, 'POST', '/api/tasks', { task_id: 'p-trail', title: 'A trail' });
    for (const [k, run] of [['w', 'p1'], ['v', 'p2']]) {
      await must(keys[k], 'POST', '/api/tasks/p-trail/checkout', { timeout: '1h', run_id: run, reason: 'lease ' + run });
      for (let i = 0; i < 3; i++) await must(keys[k], 'POST', '/api/tasks/p-trail/renew', { run_id: run, timeout: '1h' });
      await must(keys[k], 'POST', '/api/tasks/p-trail/release', { run_id: run, reason: 'done with ' + run });
    }
    // The agents view first: the page knows every agent's name.
    const { page, refresh } = await open('#/agents', { paced: true });
    await page.locator('#agents-body > tr[data-key="v"]').waitFor();
    await page.evaluate(() => { location.hash = '#/task/p-trail'; });
    await page.locator('#task-events-body > tr').nth(9).waitFor();
    await page.locator('#timeline > li').nth(1).waitFor();
    await refresh();
    // Every node drawn is marked, the person selects an event's reason,
    // and every change below the timeline and the events is recorded.
    await page.evaluate(() => {
      for (const el of document.querySelectorAll('#timeline *, #task-events-body *')) el.dataset.old = '1';
      const reason = document.querySelectorAll('#task-events-body .ev-reason')[4];
      getSelection().selectAllChildren(reason);
      window.changes = [];
      const note = (list) => {
        for (const m of list) {
          if (m.target.id === 'timeline' && m.type === 'attributes') continue; // its scale
          window.changes.push({ type: m.type, target: m.target.nodeType === 1 ? m.target.className || m.target.tagName : '#text',
            attr: m.attributeName, added: m.addedNodes.length, removed: m.removedNodes.length });
        }
      };
      const ob = new MutationObserver(note);
      for (const id of ['timeline', 'task-events-body']) ob.observe(document.getElementById(id), { subtree: true, childList: true, attributes: true, characterData: true });
      window.flush = () => note(ob.takeRecords());
    });
    const selected = await page.evaluate(() => getSelection().toString());
    assert.equal(selected, 'done with p1');
    // Seconds pass and a refresh comes: nothing on screen changed, so
    // nothing is touched.
    await refresh();
    await page.evaluate(() => window.flush());
    assert.deepEqual(await page.evaluate(() => window.changes), [], 'the timeline or the events were redrawn');
    // A new lease: one event row is appended and one lease drawn; the rest
    // stay as they were.
    await must(keys.w, 'POST', '/api/tasks/p-trail/checkout', { timeout: '1h', run_id: 'p3' });
    await refresh();
    await page.locator('#task-events-body > tr').nth(10).waitFor();
    await page.evaluate(() => window.flush());
    const changes = await page.evaluate(() => window.changes);
    const rows = await page.evaluate(() => [...document.querySelectorAll('#task-events-body > tr')].map((tr) => tr.dataset.old === '1'));
    assert.deepEqual(rows, [...Array(10).fill(true), false], 'the new event is appended, the others kept');
    const leases = await page.evaluate(() => [...document.querySelectorAll('#timeline > li')].map((li) => li.dataset.old === '1'));
    assert.deepEqual(leases, [false, true, true], 'the new lease is drawn, the others kept');
    const touched = changes.filter((c) => !(c.type === 'childList' && c.removed === 0 && ['timeline', 'TBODY'].includes(c.target) || c.target === 'task-events-body'));
    assert.deepEqual(touched.filter((c) => c.type !== 'childList'), [], 'an old row or lease was changed: ' + JSON.stringify(changes));
    assert.equal(await page.evaluate(() => getSelection().toString()), selected, 'the selection was lost');
    assert.equal(await page.locator('#task-events-body > tr').last().locator('.ev-type').textContent(), 'checked out');
    // The leases are placed on one scale (here an hour: the live lease's),
    // newest first: the oldest starts at its left end, the live one last,
    // with the rest of its hour drawn after it to the end.
    const boxes = await page.evaluate(() => [...document.querySelectorAll('#timeline > li')].map((li) => {
      const track = li.querySelector('.lease-track').getBoundingClientRect();
      const box = (el) => { const b = el.getBoundingClientRect(); return { left: b.left - track.left, right: b.right - track.left, shown: b.width > 0 }; };
      return { span: box(li.querySelector('.lease-span')), rest: box(li.querySelector('.lease-rest')), width: track.width };
    }));
    assert.ok(Math.abs(boxes[2].span.left) < 1, JSON.stringify(boxes));
    assert.ok(boxes[0].span.left >= boxes[1].span.left && boxes[1].span.left >= boxes[2].span.left, JSON.stringify(boxes));
    assert.ok(boxes.every((b) => b.span.shown && b.span.right <= b.width + 1), JSON.stringify(boxes));
    assert.ok(boxes[0].rest.shown && boxes[0].rest.right > boxes[0].width - 2 && boxes[0].rest.left >= boxes[0].span.right - 4, JSON.stringify(boxes));
    await page.close();
  });

  test('a task page refresh reads its trail from its last page on', async () => {
    await must(keys.w, 'POST', '/api/tasks', { task_id: 'p-pages', title: 'Two pages' });
    const at = (ago) => new Date(Date.now() - ago).toISOString();
    const ev = (type, ago) => ({ type, task_id: 'p-pages', agent_id: 'w', run_id: 'r1', fence: 1, at: at(ago), by: 'w', reason: '' });
    const asked = [];
    let last = [ev('renew', 20000)];
    const { page, refresh } = await open('#/task/p-pages', {
      paced: true,
      setup: (p) => p.route('**/api/tasks/p-pages/events*', (r) => {
        const cursor = new URL(r.request().url()).searchParams.get('cursor');
        asked.push(cursor);
        r.fulfill(json(200, cursor === 'c2' ? { events: last, pending: 0, next_cursor: null }
          : { events: [ev('checkout', 60000), ev('renew', 40000)], next_cursor: 'c2', pending: 0 }));
      }),
    });
    await page.locator('#task-events-body > tr').nth(2).waitFor();
    assert.deepEqual(asked, [null, 'c2']);
    asked.length = 0;
    last = [ev('renew', 20000), ev('release', 10000)];
    await refresh();
    assert.deepEqual(asked, ['c2'], 'the trail was read from its first page again');
    await page.locator('#task-events-body > tr').nth(3).waitFor();
    assert.equal(await page.locator('#task-events-body > tr').count(), 4);
    assert.deepEqual(await page.locator('#task-events-body .ev-type').allTextContents(), ['checked out', 'renewed', 'renewed', 'released']);
    await page.close();
  });

  test('metadata in a right-to-left script reads key first, then value', async () => {
    await must(keys.w, 'POST', '/api/tasks', { task_id: 'p-rtl', title: 'RTL metadata', metadata: { 'مفتاح': 'قيمة', 'שם': 'ערך' } });
    const { page } = await open('#/task/p-rtl');
    const pre = page.locator('#task-fields pre.mono');
    await pre.waitFor();
    // Where each word is drawn, left to right.
    const x = await pre.evaluate((el) => {
      const at = (word) => {
        const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
        for (let n = walker.nextNode(); n; n = walker.nextNode()) {
          const i = n.data.indexOf(word);
          if (i < 0) continue;
          const r = document.createRange();
          r.setStart(n, i);
          r.setEnd(n, i + word.length);
          const b = r.getBoundingClientRect();
          return { left: b.left, top: b.top };
        }
        return null;
      };
      return Object.fromEntries(['مفتاح', 'قيمة', 'שם', 'ערך'].map((w) => [w, at(w)]));
    });
    for (const [key, value] of [['مفتاح', 'قيمة'], ['שם', 'ערך']]) {
      assert.ok(x[key] && x[value], `${key} or ${value} not shown: ${JSON.stringify(x)}`);
      assert.equal(x[key].top, x[value].top, 'on one line');
      assert.ok(x[key].left < x[value].left, `the value ${value} is drawn before its key ${key}: ${JSON.stringify(x)}`);
    }
    assert.match(await pre.textContent(), /"مفتاح": "قيمة"/, 'the text copies as the JSON it is');
    await page.close();
  });
});
