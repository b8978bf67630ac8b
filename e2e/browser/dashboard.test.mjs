// The dashboard in a real browser: Debian's headless chromium driven by
// playwright-core, against the real local server (cmd/checkout-server, built
// here) seeded through the API. Run by `make test` (and `make test-browser`);
// alone: `cd e2e/browser && node --test`.
//
// Screenshots at 360 and 1440 px, light and dark, land in e2e/browser/out/
// (ignored by git). With CHECKOUT_UPDATE_SCREENSHOT=1 the 1440 px one is also
// written to ui/dashboard.png, the README's picture (`make screenshot`).
//
// Without chromium the test fails under CI=true and is skipped elsewhere
// (`make deps` installs it).

import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createInterface } from 'node:readline';
import { randomBytes } from 'node:crypto';
import { chromium } from 'playwright-core';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '../..');
const out = join(here, 'out');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const inCI = ['true', '1'].includes(String(process.env.CI).toLowerCase());
const haveBrowser = existsSync(CHROMIUM);
const skip = !haveBrowser && !inCI
  ? `no browser at ${CHROMIUM}: \`make deps\` installs Debian's chromium (as root), or set CHROMIUM`
  : false;

const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
  '--disable-component-update', '--disable-sync', '--no-first-run'];
const ADMIN_KEY = 'ck_browser-test-admin-' + randomBytes(8).toString('hex');
const SHORT = 12; // seconds: the lease that runs amber, then red, then out

// --- the server ----------------------------------------------------------

let server; // { proc, url, exited }

async function startServer() {
  mkdirSync(join(out, 'bin'), { recursive: true });
  const bin = join(out, 'bin', 'checkout-server');
  execFileSync('go', ['build', '-o', bin, './cmd/checkout-server'], { cwd: root, stdio: ['ignore', 'inherit', 'inherit'] });
  const env = {
    ...process.env,
    CHECKOUT_ADDR: '127.0.0.1:0',
    CHECKOUT_ADMIN_KEY: ADMIN_KEY,
    // No sweep during the test: a takeover must find the dead holder's
    // lease still recorded, and an expired lease must vanish by itself.
    CHECKOUT_SWEEP_INTERVAL: '1h',
    CHECKOUT_TABLE_PREFIX: 'ui' + randomBytes(4).toString('hex') + '-',
    CHECKOUT_DATA_DIR: '',
    LOG_LEVEL: 'info',
  };
  const proc = spawn(bin, [], { env, stdio: ['ignore', 'ignore', 'pipe'] });
  const logs = [];
  const exited = new Promise((res) => proc.on('exit', (code, signal) => res({ code, signal })));
  const url = await new Promise((res, rej) => {
    const timer = setTimeout(() => rej(new Error('the server did not start in 120 s:\n' + logs.join('\n'))), 120000);
    createInterface({ input: proc.stderr }).on('line', (line) => {
      logs.push(line);
      try {
        const m = JSON.parse(line);
        if (m.msg === 'checkout server listening') { clearTimeout(timer); res(m.url); }
      } catch { /* not a log line */ }
    });
    exited.then(({ code }) => { clearTimeout(timer); rej(new Error(`the server exited (${code}) before listening:\n` + logs.join('\n'))); });
  });
  return { proc, url, exited, logs };
}

async function stopServer() {
  if (!server || server.proc.exitCode !== null) return;
  server.proc.kill('SIGINT');
  const t = setTimeout(() => server.proc.kill('SIGKILL'), 15000);
  await server.exited;
  clearTimeout(t);
}

// api calls the JSON API as key and returns [status, body].
async function api(key, method, path, body) {
  const headers = { Authorization: 'Bearer ' + key };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const resp = await fetch(server.url + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await resp.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return [resp.status, json];
}

async function must(key, method, path, body, want = [200, 201]) {
  const [status, json] = await api(key, method, path, body);
  assert.ok([].concat(want).includes(status), `${method} ${path}: ${status} ${JSON.stringify(json)}`);
  return json;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// --- the seed ------------------------------------------------------------

const keys = {};

async function seed() {
  const agent = async (id, name) => {
    keys[id] = (await must(ADMIN_KEY, 'POST', '/api/agents', { agent_id: id, name })).api_key;
  };
  await agent('alice', 'researcher');
  await agent('bob', 'builder');
  await agent('carol', 'viewer');
  await agent('dan', 'flaky');
  await agent('eve', 'temp');
  for (const id of ['alice', 'bob', 'eve']) await must(keys[id], 'POST', '/api/heartbeat', { ttl: '10m' });
  await must(keys.dan, 'POST', '/api/heartbeat', { ttl: '1s' });

  const tasks = [
    ['t-login', 'Fix the login bug'],
    ['t-docs', 'Write the <b>API</b> docs'], // markup in a title stays text
    ['t-bench', 'Run the benchmarks'],
    ['t-short', 'A lease about to expire'],
    ['t-takeover', 'Resume a dead agent’s work'],
    ['t-eve', 'Eve’s scratch task'],
    ['t-todo', 'Nobody has started this'],
  ];
  for (const [task_id, title] of tasks) await must(keys.alice, 'POST', '/api/tasks', { task_id, title });

  await must(keys.alice, 'POST', '/api/tasks/t-login/checkout', { timeout: '30m', reason: 'reproducing with <script>alert(1)</script>', run_id: 'run-a1' });
  await must(keys.bob, 'POST', '/api/tasks/t-docs/checkout', { timeout: '1h', reason: 'first draft' });
  await must(keys.bob, 'POST', '/api/tasks/t-bench/checkout', { timeout: '2h' });
  await must(keys.eve, 'POST', '/api/tasks/t-eve/checkout', { timeout: '45m', reason: 'trying things' });
  // dan takes a task, then dies (its heartbeat lapses after 1 s) ...
  await must(keys.dan, 'POST', '/api/tasks/t-takeover/checkout', { timeout: '30m', reason: 'long job' });
  await sleep(1500);
  // ... and alice takes it over at once: dan's lease ends with agent_death.
  const over = await must(keys.alice, 'POST', '/api/tasks/t-takeover/checkout', { timeout: '20m', reason: 'picking up after dan' });
  assert.equal(over.fence, 2, 'the takeover is the task’s second grant');
}

// --- the browser ---------------------------------------------------------

let context;
let userDataDir;
const problems = []; // console errors and CSP violations, per page

// newPage opens a page in the shared context; with own, in a context of
// its own (in a second browser, started at the first such page), for a
// test that changes what every page of its context sees, such as the
// clock.
let second; // the browser of the pages with a context of their own

async function newPage(name, { width = 1440, height = 900, scheme = 'light', own = false } = {}) {
  if (own && !second) second = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: FLAGS });
  const page = own ? await (await second.newContext()).newPage() : await context.newPage();
  await page.setViewportSize({ width, height });
  await page.emulateMedia({ colorScheme: scheme });
  page.on('console', (m) => { if (m.type() === 'error') problems.push(`${name}: console: ${m.text()}`); });
  page.on('pageerror', (e) => problems.push(`${name}: page error: ${e.message}`));
  return page;
}

async function signIn(page, key) {
  const resp = await page.goto(server.url + '/');
  assert.equal(resp.status(), 200);
  const csp = resp.headers()['content-security-policy'] || '';
  assert.match(csp, /script-src 'self'/);
  assert.match(csp, /default-src 'none'/);
  assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval/);
  await page.locator('#key').waitFor();
  // From the keyboard: the key field has focus, Enter submits.
  assert.equal(await page.evaluate(() => document.activeElement?.id), 'key');
  await page.keyboard.type(key);
  await page.keyboard.press('Enter');
  await page.locator('#signin').waitFor({ state: 'hidden' });
}

const rows = (page, id) => page.locator(`#${id} > tr`);
const row = (page, taskID) => page.locator(`#checkouts-body > tr[data-key="${taskID}"]`);

async function noHorizontalScroll(page) {
  const [sw, w] = await page.evaluate(() => [document.documentElement.scrollWidth, window.innerWidth]);
  assert.ok(sw <= w, `page is ${sw}px wide in a ${w}px viewport`);
}

async function shot(page, name) {
  await page.screenshot({ path: join(out, name + '.png'), fullPage: true });
}

describe('dashboard in headless chromium', { skip, timeout: 240000 }, () => {
  let admin; // the admin's page

  before(async () => {
    if (!haveBrowser) {
      throw new Error(`no browser at ${CHROMIUM}: CI must install Debian's chromium (.ci/run does, with apt-get)`);
    }
    mkdirSync(out, { recursive: true });
    server = await startServer();
    await seed();
    userDataDir = mkdtempSync(join(tmpdir(), 'checkout-chromium-'));
    context = await chromium.launchPersistentContext(userDataDir, { executablePath: CHROMIUM, headless: true, args: FLAGS });
  });

  after(async () => {
    await context?.close();
    await second?.close();
    await stopServer();
    if (userDataDir) rmSync(userDataDir, { recursive: true, force: true });
  });

  test('a wrong key is refused in words', async () => {
    const page = await newPage('wrong-key');
    await page.goto(server.url + '/ui/');
    await page.fill('#key', 'ck_not-a-real-key');
    await page.click('#signin-submit');
    await page.locator('#signin-error').filter({ hasText: 'did not accept this API key' }).waitFor();
    assert.equal(await page.evaluate(() => sessionStorage.length), 0, 'a refused key is not kept');
    await page.fill('#key', '');
    await page.click('#signin-submit');
    await page.locator('#signin-error').filter({ hasText: 'Paste an API key' }).waitFor();
    // A key pasted with an invisible character or in curly quotes: the
    // browser refuses such a header, which read as a server that is down.
    for (const pasted of [ADMIN_KEY + '\u200b', '\u201c' + ADMIN_KEY + '\u201d']) {
      await page.fill('#key', pasted);
      await page.click('#signin-submit');
      await page.locator('#signin-error').filter({ hasText: 'character no API key has' }).waitFor();
      assert.equal(await page.evaluate(() => sessionStorage.length), 0, 'a malformed key is not kept');
    }
    // Spaces around a key are only what came with the paste.
    await page.fill('#key', '  ' + ADMIN_KEY + ' ');
    await page.press('#key', 'Enter');
    await page.locator('#nav').waitFor();
    // Signed in from the keyboard, focus is on the view, not lost with the form.
    await page.waitForFunction(() => document.activeElement?.id === 'checkouts-h');
    await page.close();
  });

  test('an admin signs in and sees the live checkouts with their bars', async () => {
    admin = await newPage('admin');
    await signIn(admin, ADMIN_KEY);
    const stored = await admin.evaluate(() => ({
      session: sessionStorage.getItem('checkout.apiKey'), local: localStorage.length, cookie: document.cookie, url: location.href,
    }));
    assert.equal(stored.session, ADMIN_KEY);
    assert.equal(stored.local, 0);
    assert.equal(stored.cookie, '');
    assert.ok(!stored.url.includes(ADMIN_KEY));
    await admin.locator('#role').filter({ hasText: 'Admin key' }).waitFor();

    for (const id of ['t-login', 't-docs', 't-bench', 't-takeover', 't-eve']) await row(admin, id).waitFor();
    assert.equal(await rows(admin, 'checkouts-body').count(), 5);
    // Sorted by expiry: the 20 min lease first, the 2 h one last.
    const order = await rows(admin, 'checkouts-body').evaluateAll((trs) => trs.map((tr) => tr.dataset.key));
    assert.deepEqual(order, ['t-takeover', 't-login', 't-eve', 't-docs', 't-bench']);

    const login = row(admin, 't-login');
    assert.equal(await login.locator('.title').textContent(), 'Fix the login bug');
    assert.equal(await login.locator('.holder-name').textContent(), 'researcher');
    assert.equal(await login.locator('.holder-id').textContent(), 'alice');
    assert.equal(await login.locator('.fence').textContent(), '#1');
    assert.equal(await login.locator('.reason').textContent(), 'reproducing with <script>alert(1)</script>');
    assert.equal(await row(admin, 't-docs').locator('.title').textContent(), 'Write the <b>API</b> docs');
    assert.equal(await admin.locator('b, script:not([src])').count(), 0, 'strings from the API are never markup');
    assert.equal(await login.locator('.bar').getAttribute('data-level'), 'ok');
    const vt = await login.locator('[role=progressbar]').getAttribute('aria-valuetext');
    assert.match(vt, /^(29m|30m) \d\ds left of 30m 00s$/);
    await admin.locator('#updated').filter({ hasText: /Updated \d+ s ago/ }).waitFor();

    // Refreshes update rows in place: the same element survives a refresh.
    await login.evaluate((tr) => { tr.dataset.mark = 'kept'; });
    await admin.waitForTimeout(3500);
    assert.equal(await login.getAttribute('data-mark'), 'kept', 'the row was rebuilt by a refresh');

    // Filters: by agent, then by text.
    await admin.selectOption('#f-agent', 'bob');
    await admin.locator('#checkouts-body > tr').first().waitFor();
    assert.deepEqual((await rows(admin, 'checkouts-body').evaluateAll((t) => t.map((x) => x.dataset.key))).sort(), ['t-bench', 't-docs']);
    await admin.selectOption('#f-agent', '');
    await admin.fill('#f-text', 'dead agent');
    assert.deepEqual(await rows(admin, 'checkouts-body').evaluateAll((t) => t.map((x) => x.dataset.key)), ['t-takeover']);
    await admin.fill('#f-text', 'nothing matches this');
    await admin.locator('#checkouts-empty').filter({ hasText: 'No live checkout matches the filter' }).waitFor();
    await admin.fill('#f-text', '');
    await admin.evaluate(() => document.activeElement?.blur());
    await noHorizontalScroll(admin);
    await shot(admin, 'checkouts-1440-light');
  });

  test('a short lease runs amber, then red, then leaves the list', async () => {
    const shortAt = Date.now();
    await must(keys.bob, 'POST', '/api/tasks/t-short/checkout', { timeout: `${SHORT}s`, reason: 'quick look' });
    const short = row(admin, 't-short');
    await short.waitFor({ timeout: 8000 });
    assert.equal(await short.locator('.bar').getAttribute('data-level'), 'ok');
    // Sorted by expiry, it comes first.
    assert.equal(await rows(admin, 'checkouts-body').first().getAttribute('data-key'), 't-short');
    const until = (s) => Math.max(1000, shortAt + s * 1000 - Date.now());
    await short.locator('.bar[data-level="warn"]').waitFor({ timeout: until(SHORT + 1) });
    assert.match(await short.locator('.bar-label').textContent(), /^[0-2]s left$/);
    await shot(admin, 'checkouts-1440-amber');
    if (process.env.CHECKOUT_UPDATE_SCREENSHOT === '1') {
      // The README's picture: the top of the page, with an amber bar.
      mkdirSync(join(root, 'docs'), { recursive: true });
      const height = await admin.evaluate(() => Math.ceil(Math.min(900, document.getElementById('view-checkouts').getBoundingClientRect().bottom + 24)));
      await admin.screenshot({ path: join(root, 'docs', 'dashboard.png'), clip: { x: 0, y: 0, width: 1440, height } });
    }
    await short.locator('.bar[data-level="crit"]').waitFor({ timeout: until(SHORT + 2) });
    // No sweep runs in this test: the expired lease is simply never live.
    await short.waitFor({ state: 'detached', timeout: until(SHORT + 8) });
  });

  test('a lease released by another client disappears', async () => {
    await row(admin, 't-docs').waitFor();
    await must(keys.bob, 'POST', '/api/tasks/t-docs/release', { reason: 'done for today' });
    await row(admin, 't-docs').waitFor({ state: 'detached', timeout: 8000 });
    await row(admin, 't-bench').waitFor(); // bob's other lease stays
  });

  test('focus stays on a row when a row above it goes away', async () => {
    // Two leases that expire first, so they head the list, one above the other.
    for (const task_id of ['f-above', 'f-below']) await must(keys.alice, 'POST', '/api/tasks', { task_id, title: 'Focus ' + task_id });
    await must(keys.bob, 'POST', '/api/tasks/f-above/checkout', { timeout: '3m' });
    await must(keys.bob, 'POST', '/api/tasks/f-below/checkout', { timeout: '4m' });
    await row(admin, 'f-below').waitFor({ timeout: 8000 });
    await row(admin, 'f-above').waitFor({ timeout: 8000 });
    assert.deepEqual((await rows(admin, 'checkouts-body').evaluateAll((t) => t.map((x) => x.dataset.key))).slice(0, 2), ['f-above', 'f-below']);
    // From the keyboard: Tab from the text filter reaches the first row's
    // link, then the second's.
    await admin.focus('#f-text');
    const focused = () => admin.evaluate(() => {
      const el = document.activeElement;
      return el?.closest('tr')?.dataset.key ? `${el.tagName}:${el.closest('tr').dataset.key}` : el?.tagName;
    });
    try {
      for (let i = 0; i < 10 && (await focused()) !== 'A:f-below'; i++) await admin.keyboard.press('Tab');
      assert.equal(await focused(), 'A:f-below');
      await must(keys.bob, 'POST', '/api/tasks/f-above/release', {});
      await row(admin, 'f-above').waitFor({ state: 'detached', timeout: 8000 });
      assert.equal(await focused(), 'A:f-below', 'the focused row kept focus when the row above it went');
      await admin.waitForTimeout(3500); // and through the next refresh
      assert.equal(await focused(), 'A:f-below');
    } finally {
      // Later tests count bob's leases.
      await api(keys.bob, 'POST', '/api/tasks/f-above/release', {});
      await api(keys.bob, 'POST', '/api/tasks/f-below/release', {});
    }
    await row(admin, 'f-below').waitFor({ state: 'detached', timeout: 8000 });
  });

  test('the task page draws the takeover as a timeline of leases', async () => {
    // From the keyboard: the task's link in the table.
    await row(admin, 't-takeover').locator('a.task-id').focus();
    await admin.keyboard.press('Enter');
    await admin.locator('#view-task').waitFor();
    assert.equal(await admin.evaluate(() => location.hash), '#/task/t-takeover');
    assert.equal(await admin.evaluate(() => document.activeElement?.id), 'task-h', 'focus moves to the new view');
    await admin.locator('#task-title').filter({ hasText: 'Resume a dead agent’s work' }).waitFor();
    const leases = admin.locator('#timeline > li');
    await leases.nth(1).waitFor();
    assert.equal(await leases.count(), 2);
    // Newest first: alice's live lease, then dan's, ended by his death.
    assert.equal(await leases.nth(0).getAttribute('data-end'), 'live');
    assert.equal(await leases.nth(0).locator('.lease-fence').textContent(), '#2');
    assert.match(await leases.nth(0).locator('.lease-holder').textContent(), /alice/);
    assert.equal(await leases.nth(1).getAttribute('data-end'), 'agent_death');
    assert.match(await leases.nth(1).locator('.lease-holder').textContent(), /dan/);
    assert.match(await leases.nth(1).locator('.lease-how').textContent(), /holder died/);
    const types = await admin.locator('#task-events-body .ev-type').allTextContents();
    assert.deepEqual(types, ['checked out', 'holder died', 'checked out']);
    await admin.locator('#task-lease').filter({ hasText: 'picking up after dan' }).waitFor();
    assert.ok(await admin.locator('#force-release').isVisible(), 'an admin sees force release');
    await noHorizontalScroll(admin);
    await shot(admin, 'task-1440-light');
  });

  test('an admin force-releases with a reason', async () => {
    await admin.goto(server.url + '/#/task/t-login');
    await admin.locator('#task-lease').filter({ hasText: 'alice' }).waitFor();
    await admin.click('#force-release');
    const dialog = admin.locator('#confirm');
    await dialog.waitFor();
    assert.match(await dialog.textContent(), /researcher \(alice\) holds it \(fence #1/);
    assert.equal(await admin.evaluate(() => document.activeElement?.id), 'confirm-reason');
    // Escape cancels and changes nothing.
    await admin.keyboard.press('Escape');
    await dialog.waitFor({ state: 'hidden' });
    await admin.click('#force-release');
    await admin.click('#confirm-ok');
    await admin.locator('#confirm-error').filter({ hasText: 'Give a reason' }).waitFor();
    await admin.fill('#confirm-reason', 'stuck in a loop');
    await admin.keyboard.press('Enter');
    await dialog.waitFor({ state: 'hidden' });
    await admin.locator('#notice').filter({ hasText: 'Force released task t-login' }).waitFor();
    await admin.locator('#task-free').waitFor();
    // Focus is on the page's heading, not lost with the hidden button.
    assert.equal(await admin.evaluate(() => document.activeElement?.id), 'task-h', 'focus after the force release');
    const first = admin.locator('#timeline > li').first();
    await first.filter({ hasText: 'force released by admin' }).waitFor();
    await first.filter({ hasText: 'stuck in a loop' }).waitFor();
    // The holder learns it lost the lease.
    const [status] = await api(keys.alice, 'POST', '/api/tasks/t-login/renew', { run_id: 'run-a1' });
    assert.equal(status, 404);
  });

  test('agents: alive, dead, never heard from; remove with a confirm', async () => {
    await admin.click('#nav a[data-view="agents"]');
    await admin.locator('#agents-body > tr[data-key="eve"]').waitFor();
    const state = (id) => admin.locator(`#agents-body > tr[data-key="${id}"] .state`).textContent();
    assert.equal(await state('alice'), 'Alive');
    assert.equal(await state('dan'), 'Dead');
    assert.equal(await state('carol'), 'Never heard from');
    assert.match(await admin.locator('#agents-body > tr[data-key="alice"] .held').textContent(), /^1t-takeover$/);
    assert.match(await admin.locator('#agents-body > tr[data-key="bob"] .held').textContent(), /^1t-bench$/);
    // The built-in admin cannot be removed (409 cannot_remove_admin), so it
    // is not offered; every other agent is.
    const builtIn = admin.locator('#agents-body > tr[data-key="admin"]');
    await builtIn.waitFor();
    assert.equal(await builtIn.locator('button.remove').count(), 0, 'no Remove for the built-in admin');
    assert.match(await builtIn.locator('.not-removable').textContent(), /built-in admin/);
    assert.equal(await admin.locator('#agents-body > tr[data-key="dan"] button.remove').count(), 1);

    // eve has the dashboard open with her own key while she is removed.
    const evePage = await newPage('eve');
    await signIn(evePage, keys.eve);
    await row(evePage, 't-eve').waitFor();

    const remove = admin.locator('#agents-body > tr[data-key="eve"] button.remove');
    await remove.focus();
    await admin.keyboard.press('Enter');
    const dialog = admin.locator('#confirm');
    await dialog.waitFor();
    const words = await dialog.textContent();
    assert.match(words, /Remove agent temp \(eve\)\?/);
    assert.match(words, /Its API key stops working at once/);
    assert.match(words, /live lease ends at once.*t-eve/s);
    await shot(admin, 'agents-remove-1440-light');
    await admin.click('#confirm-ok');
    await dialog.waitFor({ state: 'hidden' });
    await admin.locator('#agents-body > tr[data-key="eve"]').waitFor({ state: 'detached' });
    assert.equal((await api(keys.eve, 'GET', '/api/checkouts'))[0], 401, 'the removed agent’s key stops working');
    await evePage.locator('#signin-error').filter({ hasText: 'no longer accepts this key' }).waitFor({ timeout: 8000 });
    assert.equal(await evePage.evaluate(() => sessionStorage.length), 0, 'a revoked key is dropped');
    await evePage.close();
    await noHorizontalScroll(admin);
    await shot(admin, 'agents-1440-light');
  });

  test('the agents view lists the agents of every page, and signing in reads one agent', async () => {
    // An agent listing past 5 MB comes in pages (answered by the browser
    // here): zed is on the second. The view used to read the first page
    // as the whole fleet, and signing in read every agent to tell an
    // admin key from an agent's.
    const page = await newPage('agents-list-pages');
    const asked = [];
    const agent = (id) => ({ agent_id: id, name: id, admin: false, last_heartbeat_at: null, alive: null });
    await page.route((u) => u.pathname === '/api/agents', (r) => {
      const q = new URL(r.request().url()).searchParams;
      asked.push(q.toString());
      const body = q.get('cursor') === 'a2' ? { agents: [agent('zed')], next_cursor: null } : { agents: [agent('amy')], next_cursor: 'a2' };
      r.fulfill({ status: 200, contentType: 'application/json', body: JSON.stringify(body) });
    });
    await signIn(page, ADMIN_KEY);
    assert.equal(asked[0], 'limit=1', `signing in asked ${asked[0]}`);
    await page.goto(server.url + '/#/agents');
    await page.locator('#agents-body > tr[data-key="zed"]').waitFor();
    await page.locator('#agents-body > tr[data-key="amy"]').waitFor();
    await page.locator('#agents-count').filter({ hasText: '(2)' }).waitFor();
    await page.close();
  });

  test('the agents view counts the leases of every page, and a removal names them', async () => {
    // A lease listing past 5 MB comes in pages (answered by the browser
    // here): dan's lease is on the second. It used to count 0 for dan, and
    // the removal said no task would be affected.
    const page = await newPage('agents-pages');
    const lease = (id, agent) => ({ task_id: id, agent_id: agent, agent_name: agent, run_id: 'r-' + id, fence: 1,
      locked_at: new Date(Date.now() - 60000).toISOString(), timeout_seconds: 3600,
      expires_at: new Date(Date.now() + 3540000).toISOString(), remaining_seconds: 3540, reason: '', attempt: 1 });
    await page.route('**/api/checkouts*', (r) => {
      const q = new URL(r.request().url()).searchParams;
      const body = q.get('agent_id') ? { checkouts: q.get('agent_id') === 'dan' ? [lease('pg-late', 'dan')] : [], next_cursor: null }
        : q.get('cursor') === 'p2' ? { checkouts: [lease('pg-late', 'dan')], next_cursor: null } : { checkouts: [], next_cursor: 'p2' };
      r.fulfill({ status: 200, contentType: 'application/json', body: JSON.stringify(body) });
    });
    await signIn(page, ADMIN_KEY);
    await page.goto(server.url + '/#/agents');
    const dan = page.locator('#agents-body > tr[data-key="dan"]');
    await dan.locator('.held').filter({ hasText: /^1pg-late$/ }).waitFor();
    await dan.locator('button.remove').click();
    const dialog = page.locator('#confirm');
    await dialog.filter({ hasText: /live lease ends at once.*pg-late/s }).waitFor();
    await page.keyboard.press('Escape');
    await dialog.waitFor({ state: 'hidden' });
    await page.close();
  });

  test('an agent key sees no admin actions', async () => {
    const page = await newPage('agent');
    await signIn(page, keys.carol);
    await page.locator('#role').filter({ hasText: 'Agent key' }).waitFor();
    await row(page, 't-takeover').waitFor();
    assert.ok(!(await page.locator('#nav a[data-view="agents"]').isVisible()), 'no Agents view');
    await page.goto(server.url + '/#/agents');
    await page.waitForFunction(() => location.hash === '#/checkouts');
    await page.goto(server.url + '/#/task/t-takeover');
    await page.locator('#task-lease').filter({ hasText: 'alice' }).waitFor();
    assert.ok(!(await page.locator('#force-release').isVisible()), 'no force release');
    assert.equal(await page.locator('#task-admin').isHidden(), true);
    // Sign out clears the key.
    await page.click('#signout');
    await page.locator('#signin').waitFor();
    assert.equal(await page.evaluate(() => sessionStorage.getItem('checkout.apiKey')), null);
    await page.locator('#signin-error').filter({ hasText: 'Signed out' }).waitFor();
    // And back in, in the same tab.
    await page.fill('#key', keys.carol);
    await page.press('#key', 'Enter');
    await row(page, 't-takeover').waitFor();
    await page.close();
  });

  test('queues and events appear only when the API serves them', async () => {
    const [qs] = await api(ADMIN_KEY, 'GET', '/api/queues');
    const [es] = await api(ADMIN_KEY, 'GET', '/api/events?limit=1');
    await admin.goto(server.url + '/#/checkouts');
    await row(admin, 't-bench').waitFor();
    assert.equal(await admin.locator('#nav a[data-view="queues"]').isVisible(), qs === 200, `GET /api/queues: ${qs}`);
    assert.equal(await admin.locator('#nav a[data-view="events"]').isVisible(), es === 200, `GET /api/events: ${es}`);

    // With the routes answered (here by the browser), the views render them.
    const page = await newPage('optional-routes');
    const json = (body) => ({ status: 200, contentType: 'application/json', body: JSON.stringify(body) });
    const now = Date.now();
    await page.route((u) => u.pathname === '/api/queues', (r) => r.fulfill(json({ queues: [
      { queue: 'default', counts: { todo: 4, blocked: 3, in_progress: 2, done: 9, cancelled: 1, failed: 2 }, oldest_todo_at: new Date(now - 600000).toISOString() },
      { queue: 'gpu', counts: { todo: 0, blocked: 0, in_progress: 1, done: 0, cancelled: 0, failed: 0 }, oldest_todo_at: null },
    ] })));
    await page.route('**/api/events?*', (r) => r.fulfill(json({ next_cursor: null, events: [
      { type: 'checkout', task_id: 't-x', agent_id: 'alice', run_id: 'r1', fence: 3, at: new Date(now - 60000).toISOString(), by: 'alice', reason: '' },
      { type: 'release', task_id: 't-x', agent_id: 'alice', run_id: 'r1', fence: 3, at: new Date(now - 5000).toISOString(), held_seconds: 55, by: 'alice', reason: 'done' },
      { type: 'release', task_id: 't-y', agent_id: 'bob', run_id: 'r2', fence: 1, at: new Date(now - 4000).toISOString(), held_seconds: 9, by: 'bob', reason: '', outcome: 'failed', error: 'exit 1: <img src=x onerror=alert(1)>' },
      { type: 'failed', task_id: 't-y', at: new Date(now - 4000).toISOString(), by: 'system', reason: 'release' },
      { type: 'unblocked', task_id: 't-z', at: new Date(now - 3000).toISOString(), by: 'system', reason: '' },
    ] })));
    await signIn(page, ADMIN_KEY);
    await page.click('#nav a[data-view="queues"]');
    await page.locator('#queues-body > tr[data-key="default"]').waitFor();
    assert.equal(await page.locator('#queues-body > tr[data-key="default"] .q-todo').textContent(), '4');
    assert.equal(await page.locator('#queues-body > tr[data-key="default"] .q-age').textContent(), '10 min old');
    // Blocked and failed are counted, stand out when not zero, and link to
    // their lists.
    const dflt = page.locator('#queues-body > tr[data-key="default"]');
    assert.equal(await dflt.locator('.q-blocked').textContent(), '3');
    assert.equal(await dflt.locator('.q-failed').textContent(), '2');
    assert.equal(await dflt.locator('.q-failed').getAttribute('data-attention'), 'failed');
    assert.equal(await dflt.locator('.q-failed').getAttribute('href'), '#/tasks/failed/default');
    assert.equal(await page.locator('#queues-body > tr[data-key="gpu"] .q-failed').getAttribute('data-attention'), null);
    assert.deepEqual(await page.locator('#view-queues thead th').allTextContents(),
      ['Queue', 'To do', 'Blocked', 'In progress', 'Done', 'Cancelled', 'Failed', 'Oldest to do']);
    await page.click('#nav a[data-view="events"]');
    await page.locator('#events-body > tr').nth(4).waitFor();
    assert.deepEqual(await page.locator('#events-body .ev-type').allTextContents(),
      ['unblocked', 'failed', 'released', 'released', 'checked out'], 'newest first');
    const failedRelease = page.locator('#events-body > tr').nth(2);
    assert.equal(await failedRelease.locator('.ev-outcome').textContent(), 'attempt failed');
    assert.equal(await failedRelease.locator('.ev-error').textContent(), 'error: exit 1: <img src=x onerror=alert(1)>');
    assert.ok(await page.locator('#events-body > tr').nth(3).locator('.ev-outcome').isHidden(), 'a plain release has no outcome');
    assert.equal(await page.locator('#events-body img').count(), 0, 'an error is never markup');
    await page.close();
  });

  test('the task list offers every queue of every page of the queue listing', async () => {
    // Two pages of queues, answered by the browser: the filter must offer
    // the second page's queue too.
    const page = await newPage('queue-pages');
    const json = (body) => ({ status: 200, contentType: 'application/json', body: JSON.stringify(body) });
    const counts = { todo: 0, blocked: 0, in_progress: 0, done: 0, cancelled: 0, failed: 0 };
    const asked = [];
    await page.route((u) => u.pathname === '/api/queues', (r) => {
      const cursor = new URL(r.request().url()).searchParams.get('cursor');
      asked.push(cursor);
      r.fulfill(json(cursor === 'page-2'
        ? { queues: [{ queue: 'zz-second-page', counts, oldest_todo_at: null }], next_cursor: null }
        : { queues: [{ queue: 'default', counts, oldest_todo_at: null }], next_cursor: 'page-2' }));
    });
    await signIn(page, ADMIN_KEY);
    await page.goto(server.url + '/#/tasks');
    await page.locator('#t-queue option[value="zz-second-page"]').waitFor({ state: 'attached' });
    assert.ok(asked.includes(null) && asked.includes('page-2'), `pages asked: ${asked}`);
    // A refresh between two reads of the whole list reads the queue
    // listing for its counts (here they do not add up to the list, so the
    // list is read whole again): every walk reads both pages (after the
    // probe of sign-in, which reads one).
    await page.waitForRequest((req) => new URL(req.url()).pathname === '/api/tasks');
    await page.waitForResponse((res) => new URL(res.url()).pathname === '/api/tasks');
    assert.ok(asked.length >= 5 && asked.slice(1).every((c, i) => c === (i % 2 ? 'page-2' : null)), `pages asked: ${asked}`);
    assert.ok(await page.locator('#t-queue option[value="zz-second-page"]').count() === 1, 'the second page\'s queue is still offered');
    await page.close();
  });

  test('the queues view shows up to 2,000 queues however many a page holds', async () => {
    // The server's pages end early (here at 100 queues, as pages of queues
    // with todo tasks at many priorities do): the view reads on to 2,000.
    const page = await newPage('queue-pages-cut');
    const json = (body) => ({ status: 200, contentType: 'application/json', body: JSON.stringify(body) });
    const counts = { todo: 1, blocked: 0, in_progress: 0, done: 0, cancelled: 0, failed: 0 };
    const name = (i) => 'q-' + String(i).padStart(4, '0');
    await page.route((u) => u.pathname === '/api/queues', (r) => {
      const cursor = new URL(r.request().url()).searchParams.get('cursor');
      const from = cursor ? Number(cursor) : 0;
      const queues = [];
      for (let i = from; i < from + 100; i++) queues.push({ queue: name(i), counts, oldest_todo_at: null });
      r.fulfill(json({ queues, next_cursor: String(from + 100) }));
    });
    await signIn(page, ADMIN_KEY);
    await page.click('#nav a[data-view="queues"]');
    await page.locator(`#queues-body > tr[data-key="${name(1999)}"]`).waitFor();
    assert.equal(await page.locator('#queues-body > tr').count(), 2000);
    await page.close();
  });

  test('the events view shows the newest events of a busy fleet', async () => {
    // More events in the last 15 minutes than the view reads (5 pages of
    // 1,000), answered by the browser: the view read the oldest and kept
    // them for the newest. It must narrow its window and show the latest.
    const page = await newPage('busy-feed');
    const json = (body) => ({ status: 200, contentType: 'application/json', body: JSON.stringify(body) });
    const now = Date.now();
    const ev = (i, at, reason) => ({ type: 'renew', task_id: `t-busy-${i % 20}`, agent_id: 'alice', run_id: 'r', fence: 1, at: new Date(at).toISOString(), by: 'alice', reason });
    const old = Array.from({ length: 1000 }, (_, i) => ev(i, now - 14 * 60000 + i, 'old'));
    await page.route((u) => u.pathname === '/api/events', (r) => {
      const q = new URL(r.request().url()).searchParams;
      const since = q.get('since') ? Date.parse(q.get('since')) : 0;
      if (q.get('cursor') === 'more' || since < now - 4 * 60000) {
        r.fulfill(json({ events: old, next_cursor: 'more' })); // never caught up
        return;
      }
      r.fulfill(json({ events: [ev(1, now - 2000, 'recent'), { ...ev(2, now - 1000, 'NEWEST-MARKER'), type: 'release', held_seconds: 5 }], next_cursor: null }));
    });
    await signIn(page, ADMIN_KEY);
    await page.click('#nav a[data-view="events"]');
    await page.locator('#events-body > tr').first().filter({ hasText: 'NEWEST-MARKER' }).waitFor();
    assert.equal(await page.locator('#events-body > tr').count(), 2, 'the narrowed window\'s events, not the old ones');
    await page.close();
  });

  test('a malformed task id is explained in words, not as a pattern', async () => {
    await admin.goto(server.url + '/#/task/' + encodeURIComponent('bad id!'));
    await admin.locator('body').filter({ hasText: 'That is not a valid id' }).waitFor();
    assert.equal(await admin.locator('body').filter({ hasText: '^[A-Za-z0-9]' }).count(), 0, 'no regular expression shown');
  });

  test('a task list address with a status that is none shows every status and says so', async () => {
    await admin.goto(server.url + '/#/tasks/bogus');
    await admin.locator('#notice').filter({ hasText: 'There is no status “bogus”: showing tasks of every status.' }).waitFor();
    assert.equal(await admin.evaluate(() => location.hash), '#/tasks', 'the address says what is shown');
    await admin.waitForFunction(() => document.title === 'Tasks · checkout' && document.querySelector('#t-status').value === '');
    // Addresses that only read otherwise than written are made plain, silently.
    await admin.goto(server.url + '/#/tasks/todo/');
    await admin.waitForFunction(() => location.hash === '#/tasks/todo' && document.querySelector('#t-status').value === 'todo');
    await admin.goto(server.url + '/#/tasks/all');
    await admin.waitForFunction(() => location.hash === '#/tasks' && document.querySelector('#t-status').value === '');
  });

  test('a task page reads a long trail page by page', async () => {
    await must(keys.alice, 'POST', '/api/tasks', { task_id: 'p-long', title: 'A long trail' });
    // The trail's two pages, answered by the browser: the second only for
    // the first page's cursor.
    const page = await newPage('trail-pages');
    const json = (body) => ({ status: 200, contentType: 'application/json', body: JSON.stringify(body) });
    const at = (ago) => new Date(Date.now() - ago).toISOString();
    const ev = (type, ago) => ({ type, task_id: 'p-long', agent_id: 'alice', run_id: 'r1', fence: 1, at: at(ago), by: 'alice', reason: '' });
    await page.route('**/api/tasks/p-long/events*', (r) => {
      const second = new URL(r.request().url()).searchParams.get('cursor') === 'c2';
      r.fulfill(json(second ? { events: [ev('renew', 20000), ev('release', 10000)], pending: 0 }
        : { events: [ev('checkout', 60000), ev('renew', 40000)], next_cursor: 'c2', pending: 0 }));
    });
    await signIn(page, ADMIN_KEY);
    await page.goto(server.url + '/#/task/p-long');
    await page.locator('#task-events-body .ev-type').nth(3).waitFor();
    assert.equal(await page.locator('#task-events-body .ev-type').count(), 4, 'both pages listed');
    assert.ok(await page.locator('#task-events-more').isHidden(), 'a trail read whole says nothing more');
    await page.close();
  });

  test('a task page says when a trail is longer than the pages it reads', async () => {
    await must(keys.alice, 'POST', '/api/tasks', { task_id: 'p-longer', title: 'A longer trail' });
    const page = await newPage('trail-cut');
    let n = 0;
    await page.route('**/api/tasks/p-longer/events*', (r) => {
      n++;
      r.fulfill({ status: 200, contentType: 'application/json', body: JSON.stringify({
        events: [{ type: 'renew', task_id: 'p-longer', agent_id: 'alice', run_id: 'r1', fence: 1, at: new Date(Date.now() - 60000 + n).toISOString(), by: 'alice', reason: '' }],
        pending: 0, next_cursor: 'c' + n }) });
    });
    await signIn(page, ADMIN_KEY);
    await page.goto(server.url + '/#/task/p-longer');
    await page.locator('#task-events-more').waitFor();
    assert.equal(await page.locator('#task-events-body .ev-type').count(), 10, 'ten pages read');
    await page.close();
  });

  test('the work graph: blocked until its blocker is done; failed with its last error as text', async () => {
    // A blocker and its dependent, through the API.
    await must(keys.alice, 'POST', '/api/tasks', { task_id: 'g-base', title: 'Build the base image' });
    const created = await must(keys.alice, 'POST', '/api/tasks', { task_id: 'g-deploy', title: 'Deploy on the base image', blocked_by: ['g-base'] });
    assert.equal(created.status, 'blocked');

    // The dependent's page: blocked, its blocker listed with its status,
    // linking to it.
    await admin.goto(server.url + '/#/task/g-deploy');
    await admin.locator('#task-title').filter({ hasText: 'Deploy on the base image' }).waitFor();
    const status = admin.locator('#task-fields .status');
    await status.filter({ hasText: /^blocked$/ }).waitFor();
    assert.equal(await status.getAttribute('data-status'), 'blocked');
    const blocker = admin.locator('#task-blocked-by li[data-task="g-base"]');
    await blocker.waitFor();
    assert.equal(await blocker.locator('.status').textContent(), 'to do');
    assert.equal(await blocker.locator('a.task-id').getAttribute('href'), '#/task/g-base');
    assert.match(await admin.locator('#task-blocked-by').textContent(), /waiting on 1 of 1/);
    assert.match(await admin.locator('#task-attempts').textContent(), /^0 of 5$/);
    // No claim takes a blocked task, whatever its not_before.
    assert.doesNotMatch(await admin.locator('#task-graph').textContent(), /claimable/);
    await shot(admin, 'task-blocked-1440-light');

    // The task list: the blocked filter lists it, with what it waits on.
    await admin.goto(server.url + '/#/tasks/blocked');
    const listed = admin.locator('#tasks-body > tr[data-key="g-deploy"]');
    await listed.waitFor();
    assert.equal(await admin.locator('#t-status').inputValue(), 'blocked');
    assert.equal(await listed.locator('.status').first().textContent(), 'blocked');
    await listed.locator('.waiting-on li[data-task="g-base"]').waitFor();
    assert.equal(await admin.locator('#tasks-body > tr[data-key="g-base"]').count(), 0, 'a todo task is not in the blocked list');
    // Choosing another status keeps it in the address.
    await admin.selectOption('#t-status', 'todo');
    await admin.locator('#tasks-body > tr[data-key="g-base"]').waitFor();
    assert.equal(await admin.evaluate(() => location.hash), '#/tasks/todo');
    await admin.locator('#tasks-body > tr[data-key="g-deploy"]').waitFor({ state: 'detached' });

    // The blocker's page names its dependent; from there to the dependent.
    await admin.goto(server.url + '/#/task/g-base');
    await admin.locator('#task-blocks li[data-task="g-deploy"]').waitFor();

    // The blocker is done (checkout and complete through the API) ...
    const lease = await must(keys.bob, 'POST', '/api/tasks/g-base/checkout', { timeout: '5m', reason: 'building' });
    assert.equal(lease.attempt, 1, 'the first grant is attempt 1');
    await admin.locator('#task-lease').filter({ hasText: /Attempt\s*1 of 5/ }).waitFor({ timeout: 8000 });
    assert.doesNotMatch(await admin.locator('#task-graph').textContent(), /claimable/, 'a held task is not claimable');
    await must(keys.bob, 'POST', '/api/tasks/g-base/complete', { run_id: lease.run_id, fence: lease.fence });
    // ... and the server unblocks the dependent within about a second.
    const deadline = Date.now() + 10000;
    let dep;
    for (;;) {
      dep = await must(keys.alice, 'GET', '/api/tasks/g-deploy');
      if (dep.status === 'todo' || Date.now() > deadline) break;
      await sleep(200);
    }
    assert.equal(dep.status, 'todo', 'the dependent is todo once its blocker is done');
    await admin.goto(server.url + '/#/task/g-deploy');
    await admin.locator('#task-fields .status[data-status="todo"]').waitFor({ timeout: 8000 });
    assert.equal(await admin.locator('#task-blocked-by li[data-task="g-base"] .status').textContent(), 'done');
    assert.match(await admin.locator('#task-blocked-by').textContent(), /every blocker is done/);
    assert.match(await admin.locator('#task-graph').textContent(), /claimable now/);
    await admin.locator('#task-events-body .ev-type').filter({ hasText: /^unblocked$/ }).waitFor({ timeout: 8000 });

    // A task with one attempt, which fails: failed, its error as text.
    await must(keys.alice, 'POST', '/api/tasks', { task_id: 'g-fragile', title: 'A flaky migration', max_attempts: 1, retry_delay: '30s' });
    const try1 = await must(keys.bob, 'POST', '/api/tasks/g-fragile/checkout', { timeout: '5m' });
    const ERROR = 'boom <b>x</b>';
    await must(keys.bob, 'POST', '/api/tasks/g-fragile/release', { run_id: try1.run_id, fence: try1.fence, outcome: 'failed', error: ERROR });
    await admin.goto(server.url + '/#/task/g-fragile');
    await admin.locator('#task-fields .status[data-status="failed"]').waitFor({ timeout: 8000 });
    assert.equal(await admin.locator('#task-fields .status').textContent(), 'failed');
    await admin.locator('#task-last-error').waitFor();
    assert.equal(await admin.locator('#task-last-error').textContent(), ERROR);
    assert.equal(await admin.locator('#view-task b').count(), 0, 'the error is never markup');
    assert.match(await admin.locator('#task-attempts').textContent(), /^1 of 1$/);
    assert.match(await admin.locator('#task-graph').textContent(), /30s/);
    assert.doesNotMatch(await admin.locator('#task-graph').textContent(), /claimable/, 'a failed task is not claimable');
    await admin.locator('#task-events-body .ev-type').filter({ hasText: /^failed$/ }).waitFor({ timeout: 8000 });
    // The failed event's reason is how the last attempt ended, in words.
    const failure = admin.locator('#task-events-body > tr').filter({ has: admin.locator('.ev-type', { hasText: /^failed$/ }) });
    assert.equal(await failure.locator('.ev-reason').textContent(), 'its last attempt was released as failed');
    // The release's error is archived with its event by the change stream
    // (about a second); until then the event may show without it.
    const release = admin.locator('#task-events-body > tr').filter({ has: admin.locator('.ev-type', { hasText: /^released$/ }) });
    assert.equal(await release.locator('.ev-outcome').textContent(), 'attempt failed');
    await release.locator('.ev-error').filter({ hasText: 'error: ' + ERROR }).waitFor({ timeout: 8000 });
    assert.equal(await release.locator('.ev-error').textContent(), 'error: ' + ERROR);
    assert.match(await admin.locator('#timeline > li').first().locator('.lease-how').textContent(), /attempt failed/);
    assert.equal(await admin.locator('#timeline > li').first().getAttribute('data-end'), 'failed');
    await noHorizontalScroll(admin);
    await shot(admin, 'task-failed-1440-light');

    // The events view shows the failure with its reason in words.
    await admin.goto(server.url + '/#/events');
    const feedFailure = admin.locator('#events-body > tr').filter({ has: admin.locator('.ev-task', { hasText: /^g-fragile$/ }) })
      .filter({ has: admin.locator('.ev-type', { hasText: /^failed$/ }) });
    await feedFailure.waitFor({ timeout: 8000 });
    assert.equal(await feedFailure.locator('.ev-reason').textContent(), 'its last attempt was released as failed');

    // The failed list shows it with its error; the queues count it.
    await admin.goto(server.url + '/#/tasks/failed');
    const failed = admin.locator('#tasks-body > tr[data-key="g-fragile"]');
    await failed.waitFor();
    assert.equal(await failed.locator('.last-error').textContent(), 'Last error: ' + ERROR);
    assert.equal(await admin.locator('#tasks-body b').count(), 0);
    await shot(admin, 'tasks-failed-1440-light');
    const [qs, queues] = await api(ADMIN_KEY, 'GET', '/api/queues');
    if (qs === 200) {
      const counts = queues.queues.find((q) => q.queue === 'default').counts;
      await admin.goto(server.url + '/#/queues');
      const q = admin.locator('#queues-body > tr[data-key="default"]');
      await q.locator('.q-failed').filter({ hasText: String(counts.failed) }).waitFor();
      assert.ok(counts.failed >= 1, 'the queue counts the failed task');
      assert.equal(await q.locator('.q-failed').getAttribute('data-attention'), 'failed');
    }
  });

  test('a task page shows the fields of the next task even when they read the same', async () => {
    await must(keys.alice, 'POST', '/api/tasks', { task_id: 'same-a', title: 'The first twin', priority: 3 });
    await must(keys.alice, 'POST', '/api/tasks', { task_id: 'same-b', title: 'The second twin', priority: 3 });
    const page = await newPage('same-fields');
    // same-b's answer carries same-a's fields (created in the same second,
    // say), so that the two Fields panels read alike word for word.
    const [, a] = await api(ADMIN_KEY, 'GET', '/api/tasks/same-a');
    await page.route('**/api/tasks/same-b', (r) => r.fulfill({ status: 200, contentType: 'application/json',
      body: JSON.stringify({ ...a, task_id: 'same-b', title: 'The second twin' }) }));
    await signIn(page, ADMIN_KEY);
    await page.goto(server.url + '/#/task/same-a');
    await page.locator('#task-title').filter({ hasText: 'The first twin' }).waitFor();
    const fields = () => page.locator('#task-fields').evaluate((dl) => [...dl.querySelectorAll('dt')].map((dt) => dt.textContent));
    assert.ok((await fields()).includes('Priority'));
    // From the box at the top, type the other task's id and press Enter.
    await page.fill('#goto-id', 'same-b');
    await page.press('#goto-id', 'Enter');
    await page.locator('#task-title').filter({ hasText: 'The second twin' }).waitFor();
    await page.locator('#task-fields dt').first().waitFor({ timeout: 4000 });
    assert.ok((await fields()).includes('Priority'), 'the Fields panel is filled');
    assert.match(await page.locator('#task-fields').textContent(), /Priority\s*3/);
    await page.close();
  });

  test('the task list reads every page: all statuses, a text filter and one status past 500 tasks', async () => {
    // 520 more tasks to do: more than one page of the list's 500.
    const N = 520;
    const id = (i) => 'bulk-' + String(i).padStart(3, '0');
    for (let i = 0; i < N; i += 25) {
      const tasks = [];
      for (let j = i; j < Math.min(N, i + 25); j++) tasks.push({ task_id: id(j), title: 'Bulk task ' + j });
      await must(keys.alice, 'POST', '/api/tasks/batch', { tasks });
    }
    const page = await newPage('tasks-pages');
    await signIn(page, ADMIN_KEY);
    // All statuses: the tasks in progress come after the 500 first ones to do.
    await page.goto(server.url + '/#/tasks');
    await page.locator('#tasks-body > tr[data-key="t-bench"]').waitFor({ timeout: 15000 });
    await page.locator('#tasks-body > tr[data-key="' + id(N - 1) + '"]').waitFor();
    assert.match(await page.locator('#tasks-count').textContent(), /^\(\d+\)$/, 'every task is loaded: no "+"');
    assert.ok(await page.locator('#tasks-more').isHidden(), 'nothing more to load');
    // The text filter finds the last task created (once typing pauses).
    await page.fill('#t-text', id(N - 1));
    await page.waitForFunction(() => document.querySelectorAll('#tasks-body > tr').length === 1);
    await page.locator('#tasks-body > tr[data-key="' + id(N - 1) + '"]').waitFor();
    await page.fill('#t-text', 'no task has this in it');
    await page.locator('#tasks-empty').filter({ hasText: 'No task matches the filter' }).waitFor();
    await page.fill('#t-text', '');
    // One status, paged too.
    await page.selectOption('#t-status', 'todo');
    await page.waitForFunction(() => location.hash === '#/tasks/todo');
    await page.locator('#tasks-body > tr[data-key="' + id(N - 1) + '"]').waitFor({ timeout: 15000 });
    await page.locator('#tasks-body > tr[data-key="t-bench"]').waitFor({ state: 'detached' });
    await page.close();
  });

  test('the task list says when more tasks remain than it read, and loads more', async () => {
    // A listing that never ends (answered by the browser): a page of 2 tasks,
    // each with a cursor to the next.
    const page = await newPage('tasks-more');
    const cursors = [];
    const task = (i) => ({ task_id: `m-${String(i).padStart(3, '0')}`, title: 'More ' + i, status: 'todo', priority: 0, created_at: new Date(1700000000000 + i * 1000).toISOString() });
    // A task of the list read alone (it is on screen) is answered too.
    await page.route('**/api/tasks/m-*', (r) => {
      const i = Number(new URL(r.request().url()).pathname.split('m-')[1]);
      r.fulfill({ status: 200, contentType: 'application/json', body: JSON.stringify(task(i)) });
    });
    await page.route('**/api/tasks?*', (r) => {
      const q = new URL(r.request().url()).searchParams;
      const c = q.get('cursor');
      if (c && q.get('limit') === '500') cursors.push([c, q.get('status'), q.get('queue')]); // the list's pages, not the checkouts'
      const n = c ? Number(c.slice(1)) : 0;
      r.fulfill({ status: 200, contentType: 'application/json', body: JSON.stringify({ tasks: [task(2 * n), task(2 * n + 1)], next_cursor: 'p' + (n + 1) }) });
    });
    await signIn(page, ADMIN_KEY);
    await page.goto(server.url + '/#/tasks/todo');
    const more = page.locator('#tasks-more');
    await more.waitFor();
    assert.equal(await page.locator('#tasks-body > tr').count(), 20, 'ten pages read');
    assert.equal(await page.locator('#tasks-count').textContent(), '(20+)');
    assert.match(await more.textContent(), /first 20 tasks/);
    assert.ok(cursors.length >= 9 && cursors.every(([, status, queue]) => status === null && queue === null), 'a cursor is passed alone');
    // The text filter says it searched only what was read.
    await page.fill('#t-text', 'm-025');
    await page.locator('#tasks-empty').filter({ hasText: /only the 20 tasks loaded/ }).waitFor();
    await page.fill('#t-text', '');
    // From the keyboard: load more reads ten more pages.
    await page.locator('#tasks-load-more').focus();
    await page.keyboard.press('Enter');
    await page.locator('#tasks-body > tr[data-key="m-039"]').waitFor();
    assert.equal(await page.locator('#tasks-count').textContent(), '(40+)');
    assert.match(await more.textContent(), /first 40 tasks/);
    await page.close();
  });

  test('a task list refresh reads what changed, not the whole listing', async () => {
    // Every refresh read every page of the listing again: with 5,000
    // tasks, 10 requests and about 5,700 read units every 3 s
    // (TestDashboardRefreshCost). Now a refresh reads the feed, the queue
    // counts and the tasks on screen or named by the feed; the listing
    // only when the counts say the list is short, and every 30 s.
    const page = await newPage('tasks-refresh', { own: true });
    const calls = [];
    let pending = 0;
    page.on('request', (r) => { if (r.url().includes('/api/')) { calls.push(new URL(r.url())); pending++; } });
    const done = (r) => { if (r.url().includes('/api/')) pending--; };
    page.on('requestfinished', done);
    page.on('requestfailed', done);
    await page.clock.install();
    await page.clock.pauseAt(new Date(Date.now() + 1000));
    await signIn(page, ADMIN_KEY);
    await page.goto(server.url + '/#/tasks');
    await page.locator('#tasks-body > tr[data-key="t-todo"]').waitFor();
    const listing = (c) => c.pathname === '/api/tasks';
    // refresh moves the page's clock to its next refresh and returns the
    // requests that refresh made, once all are answered.
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
    let got = await refresh();
    const onScreen = await page.evaluate(() => [...document.querySelectorAll('#tasks-body > tr')]
      .filter((r) => { const b = r.getBoundingClientRect(); return b.bottom > 0 && b.top < innerHeight; }).length);
    assert.equal(got.filter(listing).length, 0, 'no page of the listing: ' + got.map(String).join(' '));
    assert.equal(got.filter((c) => c.pathname === '/api/events').length, 1, 'one read of the feed');
    assert.equal(got.filter((c) => c.pathname === '/api/queues').length, 1, 'one read of the queue counts');
    const one = got.filter((c) => /^\/api\/tasks\/[^/]+$/.test(c.pathname)).length;
    assert.ok(one <= onScreen, `${one} tasks read one by one, ${onScreen} on screen`);
    assert.ok(got.length <= 2 + onScreen, `${got.length} requests`);

    // A task on screen changed without an event shows at the next refresh.
    const first = await page.locator('#tasks-body > tr').first().getAttribute('data-key');
    await must(keys.alice, 'PATCH', '/api/tasks/' + first, { title: 'Renamed while on screen' });
    await refresh();
    await page.locator(`#tasks-body > tr[data-key="${first}"] .title`).filter({ hasText: 'Renamed while on screen' }).waitFor();
    // A new task at the top of the list, and the count with it.
    const count = await page.locator('#tasks-count').textContent();
    await must(keys.alice, 'POST', '/api/tasks', { task_id: 'a-new-top', title: 'Urgent', priority: 9 });
    got = await refresh();
    assert.ok(got.some(listing), 'the counts say the list is short: the listing is read');
    await page.locator('#tasks-body > tr[data-key="a-new-top"]').waitFor();
    assert.notEqual(await page.locator('#tasks-count').textContent(), count);
    // A status moved (the feed names it) shows, off screen too.
    await must(keys.bob, 'POST', '/api/tasks/a-new-top/checkout', { timeout: '1h' });
    got = await refresh();
    assert.equal(got.filter(listing).length, 0, 'a checkout is read from the feed');
    await page.locator('#tasks-body > tr[data-key="a-new-top"] .status').filter({ hasText: /in progress/i }).waitFor();
    await must(keys.bob, 'POST', '/api/tasks/a-new-top/complete', {});
    // Every 30 s the whole listing (a refresh at a time: the next is set
    // once one is answered).
    let whole = 0;
    for (let i = 0; i < 11; i++) whole += (await refresh()).filter(listing).length ? 1 : 0;
    assert.ok(whole >= 1, 'the listing is read within 33 s');
    await page.context().close();
  });

  // pacedTasks opens the task list in a page whose timers run only when
  // the test moves its clock (a context of its own), in a window of height
  // px; refresh() moves the clock to the next refresh and returns the
  // requests it made, once all are answered. setup(page) runs before the
  // page signs in.
  async function pacedTasks(name, height, hash = '#/tasks', setup = async () => {}) {
    const page = await newPage(name, { own: true, height });
    await setup(page);
    const calls = [];
    let pending = 0;
    page.on('request', (r) => { if (r.url().includes('/api/')) { calls.push(new URL(r.url())); pending++; } });
    const done = (r) => { if (r.url().includes('/api/')) pending--; };
    page.on('requestfinished', done);
    page.on('requestfailed', done);
    await page.clock.install();
    await page.clock.pauseAt(new Date(Date.now() + 1000));
    await signIn(page, ADMIN_KEY);
    await page.goto(server.url + '/' + hash);
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
    const offScreen = (id) => page.locator(`#tasks-body > tr[data-key="${id}"]`)
      .evaluate((tr) => tr.getBoundingClientRect().top > innerHeight);
    return { page, refresh, settle, offScreen };
  }
  const listing = (c) => c.pathname === '/api/tasks';
  const taskRow = (page, id) => page.locator(`#tasks-body > tr[data-key="${id}"]`);

  test('a task list refresh that fails reads the changes it missed at the next one', async () => {
    // A refresh moved the feed's cursor past the changes it read before
    // the rest of it failed (a 503 reading a task): the next refresh read
    // on from there, and the task showed its old status, off screen, until
    // the next whole read, with "Updated 0 s ago".
    await must(keys.alice, 'POST', '/api/tasks', { task_id: 'rf-off', title: 'Far down the list', priority: 0 });
    const { page, refresh, offScreen } = await pacedTasks('tasks-refresh-fails', 300);
    await taskRow(page, 'rf-off').waitFor({ state: 'attached' });
    assert.ok(await offScreen('rf-off'), 'the task is off screen');
    assert.equal((await refresh()).filter(listing).length, 0, 'a refresh reads what changed');
    await page.route('**/api/tasks/rf-off', (r) => r.fulfill({
      status: 503, contentType: 'application/json', body: JSON.stringify({ error: 'unavailable', code: 'unavailable' }),
    }), { times: 1 });
    await must(keys.bob, 'POST', '/api/tasks/rf-off/checkout', { timeout: '1h' });
    await refresh();
    await page.locator('#banner').filter({ hasText: '503' }).waitFor();
    const got = await refresh();
    assert.equal(got.filter(listing).length, 0, 'the next refresh reads what changed');
    // The page's clock is paused: only this refresh can clear the banner.
    // Its last answer's handling may still run once the network is quiet
    // (a loaded machine), so the test waits for it.
    await page.locator('#banner').waitFor({ state: 'hidden', timeout: 5000 });
    await taskRow(page, 'rf-off').locator('.status').filter({ hasText: /in progress/i }).waitFor({ timeout: 2000 });
    await page.context().close();
  });

  test('a task list refresh shows a cancel, a reopen and a move that no event names', async () => {
    // A refresh between two whole reads compared the list with the queue
    // counts' total only: in a list of every status and queue, a task
    // cancelled without a lease, reopened or moved to another queue (no
    // event names them) kept its old row, off screen, until the next
    // whole read (up to 30 s).
    for (const task_id of ['rc-cancel', 'rc-reopen', 'rc-move']) {
      await must(keys.alice, 'POST', '/api/tasks', { task_id, title: 'Changed without an event', priority: 0 });
    }
    await must(keys.bob, 'POST', '/api/tasks/rc-reopen/checkout', { timeout: '1h' });
    await must(keys.bob, 'POST', '/api/tasks/rc-reopen/complete', {});
    const { page, refresh, offScreen } = await pacedTasks('tasks-no-event', 300);
    for (const id of ['rc-cancel', 'rc-reopen', 'rc-move']) {
      await taskRow(page, id).waitFor({ state: 'attached' });
      assert.ok(await offScreen(id), id + ' is off screen');
    }
    await refresh();
    const shows = async (id, sel, words) => {
      await refresh();
      await taskRow(page, id).locator(sel).filter({ hasText: words }).waitFor({ timeout: 2000 });
    };
    await must(keys.alice, 'PATCH', '/api/tasks/rc-cancel', { status: 'cancelled' });
    await shows('rc-cancel', '.status', /cancelled/i);
    await must(keys.alice, 'PATCH', '/api/tasks/rc-reopen', { status: 'todo' });
    await shows('rc-reopen', '.status', /to do/i);
    await must(keys.alice, 'PATCH', '/api/tasks/rc-move', { queue: 'rc-elsewhere' });
    await shows('rc-move', '.queue', 'rc-elsewhere');
    // A refresh with nothing changed still reads only what changed.
    assert.equal((await refresh()).filter(listing).length, 0, 'the list adds up again');
    await page.context().close();
  });

  test('"Load more" during a refresh keeps the tasks it loaded', async () => {
    // A refresh that read what changed, answered after a "Load more" that
    // started later, put back the list it had started from: the tasks
    // loaded went away, and the list said it showed the first 40 tasks
    // with 20 on it, until the next whole read (up to 30 s).
    const task = (i) => ({ task_id: `lm-${String(i).padStart(3, '0')}`, title: 'More ' + i, status: 'todo', priority: 0, created_at: new Date(1700000000000 + i * 1000).toISOString() });
    let hold = null; // a promise the tasks read one by one wait for
    let held = 0;
    const { page, refresh, settle } = await pacedTasks('tasks-load-more-race', 900, '#/tasks/todo', async (p) => {
      await p.route('**/api/tasks/lm-*', async (r) => {
        if (hold) { held++; await hold; }
        const i = Number(new URL(r.request().url()).pathname.split('lm-')[1]);
        r.fulfill({ status: 200, contentType: 'application/json', body: JSON.stringify(task(i)) });
      });
      await p.route('**/api/tasks?*', (r) => {
        const c = new URL(r.request().url()).searchParams.get('cursor');
        const n = c ? Number(c.slice(1)) : 0;
        r.fulfill({ status: 200, contentType: 'application/json', body: JSON.stringify({ tasks: [task(2 * n), task(2 * n + 1)], next_cursor: 'p' + (n + 1) }) });
      });
    });
    await page.locator('#tasks-count').filter({ hasText: '(20+)' }).waitFor();
    assert.equal((await refresh()).filter(listing).length, 0, 'a refresh reads what changed');
    let release;
    hold = new Promise((r) => { release = r; });
    await page.clock.runFor(3000); // a refresh: its reads of the tasks on screen wait
    while (held === 0) await sleep(50);
    await page.click('#tasks-load-more');
    await taskRow(page, 'lm-039').waitFor();
    hold = null;
    release();
    await settle();
    assert.equal(await page.locator('#tasks-count').textContent(), '(40+)');
    await taskRow(page, 'lm-039').waitFor({ timeout: 1000 });
    await page.context().close();
  });

  test('a task list refresh shows a blocker\'s new status on the rows that wait on it', async () => {
    // A refresh between two whole reads read the blocker, whose status
    // the feed said moved, but not the tasks waiting on it: their rows,
    // off screen, showed the blocker's old status until the next whole
    // read (up to 30 s).
    await must(keys.alice, 'POST', '/api/tasks', { task_id: 'rb-blocker', title: 'Blocks another', priority: 0 });
    await must(keys.alice, 'POST', '/api/tasks', { task_id: 'rb-waits', title: 'Waits on another', priority: 0, blocked_by: ['rb-blocker'] });
    const { page, refresh, offScreen } = await pacedTasks('tasks-blocker-status', 300);
    const blocker = taskRow(page, 'rb-waits').locator('li[data-task="rb-blocker"] .status');
    await blocker.filter({ hasText: /to do/i }).waitFor({ state: 'attached' });
    assert.ok(await offScreen('rb-waits'), 'the waiting task is off screen');
    await refresh();
    await must(keys.bob, 'POST', '/api/tasks/rb-blocker/checkout', { timeout: '1h' });
    assert.equal((await refresh()).filter(listing).length, 0, 'the checkout is read from the feed');
    await blocker.filter({ hasText: /in progress/i }).waitFor({ state: 'attached', timeout: 2000 });
    await page.context().close();
  });

  test('the live checkouts read every page of the listing', async () => {
    // A listing past 5 MB comes in pages (answered by the browser here):
    // the lease on the second page is shown too.
    const page = await newPage('checkouts-pages');
    const lease = (id) => ({ task_id: id, agent_id: 'pager', agent_name: 'pager', run_id: 'r-' + id, fence: 1,
      locked_at: new Date(Date.now() - 60000).toISOString(), timeout_seconds: 3600,
      expires_at: new Date(Date.now() + 3540000).toISOString(), remaining_seconds: 3540, reason: '', attempt: 1 });
    await page.route('**/api/checkouts*', (r) => {
      const c = new URL(r.request().url()).searchParams.get('cursor');
      const body = c === 'p2' ? { checkouts: [lease('pg-second')], next_cursor: null } : { checkouts: [lease('pg-first')], next_cursor: 'p2' };
      r.fulfill({ status: 200, contentType: 'application/json', body: JSON.stringify(body) });
    });
    await signIn(page, ADMIN_KEY);
    await row(page, 'pg-first').waitFor();
    await row(page, 'pg-second').waitFor();
    await page.close();
  });

  test('a force release of a lease that changed meanwhile says so', async () => {
    await must(keys.alice, 'POST', '/api/tasks', { task_id: 't-stale', title: 'Changes hands' });
    const first = await must(keys.alice, 'POST', '/api/tasks/t-stale/checkout', { timeout: '1h' });
    await admin.goto(server.url + '/#/task/t-stale');
    await admin.locator('#task-lease').filter({ hasText: 'alice' }).waitFor();
    await admin.click('#force-release');
    await admin.locator('#confirm').waitFor();
    // Meanwhile alice lets go and bob takes it.
    await must(keys.alice, 'POST', '/api/tasks/t-stale/release', { run_id: first.run_id });
    await must(keys.bob, 'POST', '/api/tasks/t-stale/checkout', { timeout: '1h' });
    await admin.fill('#confirm-reason', 'stuck');
    await admin.click('#confirm-ok');
    // Not "this key is not allowed": the lease it named is gone.
    await admin.locator('#confirm-error').filter({ hasText: 'ended or was replaced' }).waitFor();
    await admin.keyboard.press('Escape');
    const [, now] = await api(ADMIN_KEY, 'GET', '/api/tasks/t-stale/checkout');
    assert.equal(now.checkout?.agent_id, 'bob', 'bob\'s lease was not released');
  });

  test('a browser clock 20 minutes ahead still reads times against the server\'s clock', async () => {
    // A failed attempt that waits 10 minutes for its retry, a lease just
    // taken, an agent just heard from: the views measured them against the
    // browser's clock, so they said the wait had passed, the lease had been
    // held 20 minutes, the heartbeat was 20 minutes old, and the events
    // view asked for the 15 minutes before a moment still to come: none.
    await must(keys.alice, 'POST', '/api/tasks', { task_id: 'skew-wait', title: 'Retried in ten minutes', max_attempts: 3, retry_delay: '600s' });
    await must(keys.alice, 'POST', '/api/tasks/skew-wait/checkout', { timeout: '1h' });
    await must(keys.alice, 'POST', '/api/tasks/skew-wait/release', { outcome: 'failed', error: 'flaky' });
    await must(keys.alice, 'POST', '/api/tasks', { task_id: 'skew-held', title: 'Just taken' });
    await must(keys.alice, 'POST', '/api/tasks/skew-held/checkout', { timeout: '1h' });
    await must(keys.alice, 'POST', '/api/heartbeat', { ttl: '10m' });

    // A clock is its context's, so the page has a context of its own.
    const page = await newPage('clock-ahead', { own: true });
    await page.clock.install({ time: Date.now() + 20 * 60000 });
    await signIn(page, ADMIN_KEY);

    await page.goto(server.url + '/#/events');
    await page.locator('#events-body > tr[data-key^="skew-held:checkout:"]').waitFor();

    await page.goto(server.url + '/#/task/skew-wait');
    await page.locator('#task-graph .nb-in').filter({ hasText: /^\(in (9m|10m)/ }).waitFor();

    await page.goto(server.url + '/#/tasks/todo');
    await page.locator('#tasks-body > tr[data-key="skew-wait"] .wait').filter({ hasText: /\(in (9m|10m)/ }).waitFor();

    await page.goto(server.url + '/#/task/skew-held');
    const when = page.locator('#timeline .lease-when').first();
    await when.filter({ hasText: 'now · held' }).waitFor();
    assert.match(await when.textContent(), /now · held \d+s/, 'held for seconds, not 20 minutes');

    await page.goto(server.url + '/#/agents');
    await page.locator('#agents-body > tr[data-key="alice"] .heartbeat-ago').filter({ hasText: /^\d+ s ago$/ }).waitFor();
    await page.context().close();
  });

  test('a tab in the background reads nothing until it is shown again', async () => {
    // Every view read its data again every 3 s in a hidden tab too (the
    // task list every page of up to 5,000 tasks; in AWS, billed reads),
    // for as long as the tab stayed open.
    const page = await newPage('hidden-tab', { own: true });
    await page.addInitScript(() => {
      window.apiCalls = 0;
      const f = window.fetch;
      window.fetch = (...args) => { window.apiCalls++; return f(...args); };
      let hidden = false;
      Object.defineProperty(document, 'hidden', { configurable: true, get: () => hidden });
      Object.defineProperty(document, 'visibilityState', { configurable: true, get: () => (hidden ? 'hidden' : 'visible') });
      window.setHidden = (h) => { hidden = h; document.dispatchEvent(new Event('visibilitychange')); };
    });
    // The page's timers run only when the test moves its clock (its
    // context's, so the page has a context of its own).
    await page.clock.install();
    await page.clock.pauseAt(new Date(Date.now() + 1000));
    await signIn(page, ADMIN_KEY);
    await page.locator('#checkouts-body > tr').first().waitFor();
    await page.evaluate(() => window.setHidden(true));
    const before = await page.evaluate(() => window.apiCalls);
    await page.clock.runFor(60000);
    assert.equal(await page.evaluate(() => window.apiCalls), before, 'no request while the tab is hidden');
    await page.evaluate(() => window.setHidden(false));
    await page.waitForFunction((n) => window.apiCalls > n, before);
    await page.context().close();
  });

  test('an override character in a name cannot reorder the text beside it', async () => {
    // "bob" + U+202E (right-to-left override): shown as "bob (rlo-agent)",
    // the override reversed the id and the words after it.
    const name = 'bob\u202e';
    const key = (await must(ADMIN_KEY, 'POST', '/api/agents', { agent_id: 'rlo-agent', name })).api_key;
    await must(key, 'POST', '/api/tasks', { task_id: 't-rlo', title: 'Deploy to prod \u202e now' });
    await must(key, 'POST', '/api/tasks/t-rlo/checkout', { timeout: '1h' });
    await admin.goto(server.url + '/#/task/t-rlo');
    const holder = admin.locator('#timeline > li').first().locator('.lease-holder');
    await holder.waitFor();
    assert.equal(await holder.textContent(), '\u2068' + name + '\u2069 (rlo-agent)', 'the name isolated from the id');
    for (const sel of ['.lease-holder', '.task-title']) {
      const bidi = await admin.locator(sel).first().evaluate((el) => getComputedStyle(el).unicodeBidi);
      assert.equal(bidi, 'isolate', `${sel}: unicode-bidi ${bidi}`);
    }
    await must(ADMIN_KEY, 'DELETE', '/api/agents/rlo-agent');
  });

  test('what agents wrote cannot reorder the words beside it anywhere', async () => {
    // A name that closes an isolate (U+2069) before its override (U+202E):
    // wrapped in isolate marks as it was, the override got out of them.
    // A reason and an error with an override, a title and a description
    // with a right-to-left script and an override.
    const name = 'bob\u2069\u202e';
    const key = (await must(ADMIN_KEY, 'POST', '/api/agents', { agent_id: 'rlo2', name })).api_key;
    await must(key, 'POST', '/api/tasks', {
      task_id: 't-rlo2', title: 'שלום txt.exe\u202e', description: 'notes\u202e', metadata: { 'k\u202e': 'v\u202e' },
      retry_delay: '0s',
    });
    await must(key, 'POST', '/api/tasks/t-rlo2/checkout', { timeout: '1h', reason: 'why\u202e' });
    await must(key, 'POST', '/api/tasks/t-rlo2/release', { outcome: 'failed', error: 'boom\u2069\u202e' });
    await must(key, 'POST', '/api/tasks/t-rlo2/checkout', { timeout: '1h', reason: 'again\u202e' });

    // The left edges of the letters of words, as laid out: a leaked
    // override lays them out right to left.
    const edges = (locator, words) => locator.evaluate((el, words) => {
      const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
      const nodes = [];
      let all = '';
      for (let n = walker.nextNode(); n; n = walker.nextNode()) { nodes.push([n, all.length]); all += n.data; }
      const at = all.indexOf(words);
      if (at < 0) return `"${words}" is not in "${all}"`;
      const xs = [];
      for (let i = at; i < at + words.length; i++) {
        if (/\s/.test(all[i])) continue;
        const [node, start] = nodes.find(([n, s]) => s <= i && i < s + n.data.length);
        const r = document.createRange();
        r.setStart(node, i - start);
        r.setEnd(node, i - start + 1);
        xs.push(Math.round(r.getBoundingClientRect().left));
      }
      return xs;
    }, words);
    const inOrder = async (where, locator, words) => {
      await locator.waitFor();
      const xs = await edges(locator, words);
      assert.ok(Array.isArray(xs) && xs.every((x, i) => i === 0 || x > xs[i - 1]),
        `${where}: "${words}" is not laid out left to right: ${JSON.stringify(xs)} in ${JSON.stringify(await locator.textContent())}`);
    };

    await admin.goto(server.url + '/#/task/t-rlo2');
    await admin.locator('#timeline > li').nth(1).waitFor();
    const [live, failed] = [admin.locator('#timeline > li').nth(0), admin.locator('#timeline > li').nth(1)];
    await inOrder('timeline holder', live.locator('.lease-head'), '(rlo2) — live');
    await inOrder('timeline ending', failed.locator('.lease-how'), '(rlo2): the attempt failed');
    await inOrder('timeline reason', failed.locator('.lease-when'), '· error:');
    await inOrder('lease holder', admin.locator('#task-lease'), '(rlo2)');
    await inOrder('metadata', admin.locator('#task-fields pre.mono'), '"v');
    await inOrder('events agent', admin.locator('#task-events-body .ev-agent').first(), '(rlo2)');
    await admin.click('#force-release');
    await inOrder('force release', admin.locator('#confirm-body'), '(rlo2) holds it (fence #2');
    await admin.keyboard.press('Escape');
    await admin.locator('#confirm').waitFor({ state: 'hidden' });

    await admin.goto(server.url + '/#/events');
    await inOrder('events feed', admin.locator('#events-body .ev-agent').filter({ hasText: 'rlo2' }).first(), '(rlo2)');

    await admin.goto(server.url + '/#/agents');
    await admin.locator('#agents-body > tr[data-key="rlo2"] button.remove').click();
    await inOrder('remove dialog', admin.locator('#confirm-title'), '(rlo2)?');
    await admin.keyboard.press('Escape');
    await admin.locator('#confirm').waitFor({ state: 'hidden' });

    // A <select>'s options are text alone: the name is isolated there by
    // marks, its stray isolate closer left out.
    await admin.goto(server.url + '/#/checkouts');
    await row(admin, 't-rlo2').waitFor();
    const option = admin.locator('#f-agent option[value="rlo2"]');
    assert.equal(await option.textContent(), '\u2068bob\u202e\u2069 (rlo2)');
    await must(ADMIN_KEY, 'DELETE', '/api/agents/rlo2');
  });

  test('long unbroken ids, names and reasons wrap instead of widening the page', async () => {
    const id = 'gh:acme.monorepo:pull:123456:check-suite:987654321:job:build-linux-arm64-' + 'x'.repeat(50);
    const name = 'n'.repeat(120);
    const longKey = (await must(ADMIN_KEY, 'POST', '/api/agents', { agent_id: 'long-named', name })).api_key;
    await must(longKey, 'POST', '/api/tasks', { task_id: id, title: 'A task with a long id' });
    await must(longKey, 'POST', `/api/tasks/${encodeURIComponent(id)}/checkout`, { reason: 'r'.repeat(500), timeout: '1h' });
    const fits = async (page, where) => {
      const over = await page.evaluate(() => [...document.querySelectorAll('table')].filter((t) => t.offsetParent)
        .map((t) => [t.scrollWidth, t.parentElement.clientWidth]).filter(([w, room]) => w > room + 1));
      assert.deepEqual(over, [], `${where}: tables wider than their room`);
      await noHorizontalScroll(page);
    };
    for (const width of [360, 1440]) {
      const page = await newPage(`long-${width}`, { width, height: 900 });
      await signIn(page, ADMIN_KEY);
      await row(page, id).waitFor();
      await fits(page, `checkouts at ${width}`);
      await page.goto(server.url + '/#/task/' + encodeURIComponent(id));
      await page.locator('#timeline > li').first().waitFor();
      await fits(page, `the task page at ${width}`);
      await page.goto(server.url + '/#/agents');
      await page.locator('#agents-body > tr[data-key="long-named"]').waitFor();
      await fits(page, `agents at ${width}`);
      await page.close();
    }
    await must(ADMIN_KEY, 'DELETE', '/api/agents/long-named');
  });

  test('360 px and 1440 px, light and dark', async () => {
    for (const scheme of ['light', 'dark']) {
      const page = await newPage(`narrow-${scheme}`, { width: 360, height: 780, scheme });
      await signIn(page, ADMIN_KEY);
      await row(page, 't-bench').waitFor();
      await noHorizontalScroll(page);
      const bg = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
      const [r, g, b] = bg.match(/\d+/g).map(Number);
      const light = (r + g + b) / 3 > 128;
      assert.equal(light, scheme === 'light', `${scheme}: background ${bg}`);
      await shot(page, `checkouts-360-${scheme}`);
      await page.goto(server.url + '/#/task/t-takeover');
      await page.locator('#timeline > li').nth(1).waitFor();
      await noHorizontalScroll(page);
      await shot(page, `task-360-${scheme}`);
      await page.goto(server.url + '/#/tasks');
      await page.locator('#tasks-body > tr[data-key="t-bench"]').waitFor();
      await noHorizontalScroll(page);
      await shot(page, `tasks-360-${scheme}`);
      await page.close();
    }
    const wide = await newPage('wide-dark', { width: 1440, height: 900, scheme: 'dark' });
    await signIn(wide, ADMIN_KEY);
    await row(wide, 't-bench').waitFor();
    await shot(wide, 'checkouts-1440-dark');
    await wide.close();
  });

  test('status colours on badges are readable (4.5:1), light and dark', async () => {
    // done and timed out badges were 4.43:1 in light mode, at 0.78 rem.
    for (const scheme of ['light', 'dark']) {
      const page = await newPage(`contrast-${scheme}`, { scheme });
      await page.goto(server.url + '/ui/');
      const ratios = await page.evaluate(() => {
        const v = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();
        const lum = (hex) => {
          const c = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16) / 255)
            .map((x) => (x <= 0.03928 ? x / 12.92 : ((x + 0.055) / 1.055) ** 2.4));
          return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
        };
        const ratio = (a, b) => { const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p); return (x + 0.05) / (y + 0.05); };
        return Object.fromEntries(['--ok', '--warn', '--crit', '--muted', '--text'].map((n) => [n, ratio(v(n), v('--badge'))]));
      });
      for (const [name, r] of Object.entries(ratios)) {
        assert.ok(r >= 4.5, `${scheme}: ${name} on --badge is ${r.toFixed(2)}:1`);
      }
      await page.close();
    }
  });

  test('every control has a name for screen readers', async () => {
    const unnamed = await admin.evaluate(() => [...document.querySelectorAll('input, select, button, a[href]')]
      .filter((el) => {
        const name = el.getAttribute('aria-label') || el.labels?.[0]?.textContent || el.textContent;
        return !name || !name.trim();
      })
      .map((el) => el.outerHTML.slice(0, 80)));
    assert.deepEqual(unnamed, []);
  });

  test('errors are words: 403, 503, 500 and a server that is down', async () => {
    const described = await admin.evaluate(async () => {
      const { describe } = await import('/ui/api.js');
      return [0, 401, 403, 404, 409, 500, 503].map((s) => describe(s, s === 403 ? { error: 'only an admin may force a release', code: 'forbidden' } : null));
    });
    for (const d of described) {
      assert.ok(d.length > 10 && !/stack|at .*\.js|TypeError|undefined/.test(d), d);
    }
    assert.match(described[2], /not allowed.*403.*only an admin may force a release/);
    assert.match(described[6], /database/);

    // A forbidden answer reaches the page as a sentence.
    const page = await newPage('forbidden');
    await signIn(page, ADMIN_KEY);
    await page.locator('#nav a[data-view="agents"]').waitFor();
    await page.route('**/api/agents', (r) => r.fulfill({ status: 403, contentType: 'application/json', body: '{"error":"this route is for admins only","code":"forbidden"}' }));
    await page.click('#nav a[data-view="agents"]');
    await page.locator('#banner').filter({ hasText: 'not allowed to do that (403): this route is for admins only' }).waitFor();
    await page.close();

    // A view entered again shows its last data while it loads; if that
    // load fails, the page says the data is older (it used to say "Not
    // updated yet" over the old rows).
    const back = await newPage('revisit');
    await signIn(back, ADMIN_KEY);
    await row(back, 't-bench').waitFor();
    await back.locator('#updated').filter({ hasText: /^Updated/ }).waitFor();
    await back.click('#nav a[data-view="tasks"]');
    await back.locator('#view-tasks').waitFor();
    await back.route('**/api/checkouts', (r) => r.abort());
    await back.click('#nav a[data-view="checkouts"]');
    await back.locator('#updated').filter({ hasText: 'showing older data' }).waitFor({ timeout: 10000 });
    assert.ok(await row(back, 't-bench').isVisible(), 'the checkouts of the last visit stay on screen');
    await back.close();

    // Stop the server: the admin's page says so, and keeps its data.
    await admin.goto(server.url + '/#/checkouts');
    await row(admin, 't-bench').waitFor();
    await stopServer();
    await admin.locator('#banner').filter({ hasText: 'Cannot reach the server' }).waitFor({ timeout: 12000 });
    await admin.locator('#updated').filter({ hasText: 'showing older data' }).waitFor();
    assert.ok(await row(admin, 't-bench').isVisible(), 'the last data stays on screen');
    assert.doesNotMatch(await admin.locator('body').innerText(), /TypeError|Failed to fetch|at .*\.js:\d+/);
    await shot(admin, 'server-down-1440-light');
  });

  test('no console errors and no policy violations', () => {
    // Network failures after the server stopped were cleared above.
    const real = problems.filter((p) => !/Failed to load resource|net::ERR_CONNECTION_REFUSED/.test(p));
    assert.deepEqual(real, []);
  });
});

