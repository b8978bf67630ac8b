// What the dashboard's browser test files share: where chromium is, the
// real local server each builds and starts on tables of its own, and its
// API called with a key.

import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createInterface } from 'node:readline';
import { randomBytes } from 'node:crypto';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '../..');
const out = join(here, 'out');

export const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const inCI = ['true', '1'].includes(String(process.env.CI).toLowerCase());
// A test without a browser is skipped on a developer's machine, and fails
// under CI.
export const skip = !existsSync(CHROMIUM) && !inCI ? `no browser at ${CHROMIUM}` : false;
export const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
  '--disable-component-update', '--disable-sync', '--no-first-run'];

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// adminKey is a fresh admin key for the server of the test file name.
export const adminKey = (name) => `ck_browser-${name}-admin-` + randomBytes(8).toString('hex');

// startServer builds the server (as bin/checkout-server-<name>) and starts
// it on a free port, with adminKey, its sweep left to the test, and tables
// of its own (prefix plus random hex), on the DynamoDB of
// DYNAMODB_ENDPOINT. It resolves once the server listens.
export async function startServer(name, prefix, key) {
  mkdirSync(join(out, 'bin'), { recursive: true });
  const bin = join(out, 'bin', 'checkout-server-' + name);
  execFileSync('go', ['build', '-o', bin, './cmd/checkout-server'], { cwd: root, stdio: ['ignore', 'inherit', 'inherit'] });
  const env = {
    ...process.env,
    CHECKOUT_ADDR: '127.0.0.1:0',
    CHECKOUT_ADMIN_KEY: key,
    CHECKOUT_SWEEP_INTERVAL: '1h',
    CHECKOUT_TABLE_PREFIX: prefix + randomBytes(4).toString('hex') + '-',
    CHECKOUT_DATA_DIR: '',
  };
  const proc = spawn(bin, [], { env, stdio: ['ignore', 'ignore', 'pipe'] });
  const logs = [];
  const exited = new Promise((res) => proc.on('exit', (code) => res(code)));
  const url = await new Promise((res, rej) => {
    const timer = setTimeout(() => rej(new Error('the server did not start:\n' + logs.join('\n'))), 120000);
    createInterface({ input: proc.stderr }).on('line', (line) => {
      logs.push(line);
      try {
        const m = JSON.parse(line);
        if (m.msg === 'checkout server listening') { clearTimeout(timer); res(m.url); }
      } catch { /* not a log line */ }
    });
    exited.then((code) => { clearTimeout(timer); rej(new Error(`the server exited (${code}):\n` + logs.join('\n'))); });
  });
  return { proc, url, exited };
}

// call sends a request to the API at url with key: [status, parsed JSON
// or null].
export async function call(url, key, method, path, body) {
  const headers = { Authorization: 'Bearer ' + key };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const resp = await fetch(url + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  let json = null;
  try { json = JSON.parse(await resp.text()); } catch { /* not JSON */ }
  return [resp.status, json];
}

// mustCall is call, asserting a 200 or 201: its JSON.
export async function mustCall(url, key, method, path, body) {
  const [status, json] = await call(url, key, method, path, body);
  assert.ok(status === 200 || status === 201, `${method} ${path}: ${status} ${JSON.stringify(json)}`);
  return json;
}
