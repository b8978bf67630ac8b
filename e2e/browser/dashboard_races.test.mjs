// Races a person watching the fleet can hit, in headless chromium against
// the real local server: a confirm asked twice (a double click on Remove),
// and an older answer that lands after a later refresh's. Run alone:
// `cd e2e/browser && node --test dashboard_races.test.mjs` (built and seeded here,
// as dashboard.test.mjs is).

import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';
import { CHROMIUM, FLAGS, skip, sleep, adminKey, startServer, call, mustCall } from './harness.mjs';

const ADMIN_KEY = adminKey('races');

let server;
const start = () => startServer('races', 'rv', ADMIN_KEY);
const api = (key, method, path, body) => call(server.url, key, method, path, body);
const must = (key, method, path, body) => mustCall(server.url, key, method, path, body);

// gate holds the answers to a route: each request goes to the server at
// once (its answer is what the server said then) and reaches the page
// only when open() is called; requests after that pass. fetched resolves
// once the server answered the first; open() resolves once every answer
// held reached the page.
function gate(page, pattern) {
  let armed = true;
  let open;
  const opened = new Promise((r) => { open = r; });
  let fetched;
  const got = new Promise((r) => { fetched = r; });
  const held = [];
  page.route(pattern, async (route) => {
    if (!armed) return route.continue();
    let delivered;
    held.push(new Promise((r) => { delivered = r; }));
    const resp = await route.fetch();
    fetched();
    await opened;
    await route.fulfill({ response: resp });
    delivered();
  });
  return {
    fetched: got,
    // close lets the requests that follow pass.
    close: () => { armed = false; },
    open: () => { armed = false; open(); return Promise.all(held); },
  };
}

describe('dashboard races', { skip, timeout: 180000 }, () => {
  let browser;
  let page;
  const keys = {};

  before(async () => {
    server = await start();
    for (const id of ['w1', 'w2', 'holder']) {
      keys[id] = (await must(ADMIN_KEY, 'POST', '/api/agents', { agent_id: id, name: 'worker ' + id })).api_key;
    }
    await must(keys.holder, 'POST', '/api/heartbeat', { ttl: '10m' });
    for (const id of ['t-late', 't-real']) await must(keys.holder, 'POST', '/api/tasks', { task_id: id, title: 'Task ' + id });
    await must(keys.holder, 'POST', '/api/tasks/t-late/checkout', { timeout: '1h', run_id: 'run-late' });
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: FLAGS });
    page = await browser.newPage();
    await page.setViewportSize({ width: 1440, height: 900 });
    await page.goto(server.url + '/');
    await page.fill('#key', ADMIN_KEY);
    await page.press('#key', 'Enter');
    await page.locator('#nav').waitFor();
  });

  after(async () => {
    await browser?.close();
    if (server && server.proc.exitCode === null) {
      server.proc.kill('SIGINT');
      await server.exited;
    }
  });

  test('a double click on Remove asks once, and a later removal removes only its own agent', async () => {
    const deletes = [];
    const onRequest = (r) => { if (r.method() === 'DELETE') deletes.push(new URL(r.url()).pathname); };
    page.on('request', onRequest);
    await page.goto(server.url + '/#/agents');
    await page.locator('#agents-body > tr[data-key="w1"] button.remove').dblclick();
    await page.locator('#confirm').waitFor();
    await sleep(300); // the second click's confirm, if any, is asked too
    await page.click('#confirm-ok');
    await page.locator('#confirm').waitFor({ state: 'hidden' });
    await page.locator('#agents-body > tr[data-key="w1"]').waitFor({ state: 'detached' });
    await sleep(300);
    assert.deepEqual(deletes, ['/api/agents/w1'], 'one confirmation, one removal');

    // w1 is registered again (a new agent under the same id), and the
    // admin removes w2: only w2 goes.
    await must(ADMIN_KEY, 'POST', '/api/agents', { agent_id: 'w1', name: 'worker w1, again' });
    await page.locator('#agents-body > tr[data-key="w1"]').waitFor();
    await page.locator('#agents-body > tr[data-key="w2"] button.remove').click();
    await page.locator('#confirm-title').filter({ hasText: 'w2' }).waitFor();
    await page.click('#confirm-ok');
    await page.locator('#confirm').waitFor({ state: 'hidden' });
    await page.locator('#agents-body > tr[data-key="w2"]').waitFor({ state: 'detached' });
    await sleep(300);
    page.off('request', onRequest);
    assert.deepEqual(deletes, ['/api/agents/w1', '/api/agents/w2']);
    const [, list] = await api(ADMIN_KEY, 'GET', '/api/agents');
    assert.ok(list.agents.some((a) => a.agent_id === 'w1'), 'the new w1 was not removed');
  });

  test('an older answer that lands after a later refresh does not bring back an ended lease', async () => {
    await page.goto(server.url + '/#/checkouts');
    const row = page.locator('#checkouts-body > tr[data-key="t-late"]');
    await row.waitFor();
    // A refresh reads the leases while t-late is held; its answer is slow.
    const slow = gate(page, /\/api\/checkouts(\?|$)/);
    await page.click('#refresh');
    await slow.fetched;
    slow.close();
    // Meanwhile the holder lets go, and a later refresh shows it gone.
    await must(keys.holder, 'POST', '/api/tasks/t-late/release', { run_id: 'run-late' });
    await page.click('#refresh');
    await row.waitFor({ state: 'detached' });
    // Then the slow answer lands: the page must not go back to it.
    await slow.open();
    await sleep(400); // well within the next periodic refresh (3 s)
    assert.equal(await row.count(), 0, 'the released lease came back from the older answer');
    assert.match(await page.locator('#checkouts-count').textContent(), /\(0\)/);
  });

  test('a late "not found" for the task left does not cover the next task\'s page', async () => {
    // Both the task and its trail answer 404, late.
    const slow = gate(page, /\/api\/tasks\/t-nope(\/events)?$/);
    await page.goto(server.url + '/#/task/t-nope');
    await slow.fetched;
    await sleep(200);
    slow.close();
    await page.evaluate(() => { location.hash = '#/task/t-real'; });
    await page.locator('#task-title').filter({ hasText: 'Task t-real' }).waitFor();
    await slow.open();
    await sleep(400);
    assert.equal(await page.locator('#task-missing').isHidden(), true, 'the next task\'s page says a task is missing');
    assert.equal(await page.locator('#task-content').isVisible(), true, 'the next task\'s page is hidden');
  });
});
