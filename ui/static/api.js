// The JSON API as the dashboard uses it: one fetch wrapper that adds the
// bearer key and turns every failure into an ApiError whose message is a
// sentence for a person. Nothing here ever shows a stack trace or a raw body.

const KEY = 'checkout.apiKey';
const TIMEOUT_MS = 10000;

// The key lives in sessionStorage only: gone when the tab closes, never in a
// cookie, a URL or local storage.
export const session = {
  get key() { return sessionStorage.getItem(KEY) || ''; },
  set key(v) { sessionStorage.setItem(KEY, v); },
  clear() { sessionStorage.removeItem(KEY); },
};

// The server's clock, as its answers' Date headers tell it: times the API
// gives (a not_before, a heartbeat, an event) are the server's, and a
// browser whose clock is off by minutes would read them wrong against its
// own. A Date header is whole seconds, so the offset is taken only when
// it moves by more than a second: within that the browser's clock is
// used as it is, and countdowns do not jitter between answers.
let skewMs = 0;

function noteServerClock(date, sentAt, receivedAt) {
  const server = Date.parse(date || '');
  if (Number.isNaN(server)) return;
  // The server read its clock between sending and receiving, somewhere in
  // the second the header names.
  const offset = server + 500 - (sentAt + receivedAt) / 2;
  if (Math.abs(offset - skewMs) > 1000) skewMs = Math.abs(offset) > 1000 ? offset : 0;
}

// serverNow is the server's clock now (ms since the epoch), as well as its
// answers tell it.
export const serverNow = () => Date.now() + skewMs;

export class ApiError extends Error {
  // status is the HTTP status (0: no answer); code the API's error code.
  constructor(status, code, message) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
  }
}

// The server's own sentence, when the answer is the API's error body: the
// contract says it is written for a person and never carries internals.
function serverSentence(body) {
  if (body && typeof body.error === 'string' && body.error.length > 0 && body.error.length <= 300) {
    return body.error;
  }
  return '';
}

// describe turns a status (and the API's error body, if any) into words.
export function describe(status, body) {
  const said = serverSentence(body);
  switch (true) {
    case status === 0:
      return 'Cannot reach the server: it may be down or restarting. The dashboard keeps trying.';
    case status === 401:
      return 'The server did not accept this API key: it is unknown, revoked or mistyped.';
    case status === 403:
      return 'This key is not allowed to do that (403)' + (said ? ': ' + said : '.');
    case status === 503:
      return 'The server cannot reach its database right now (503). The dashboard keeps trying.';
    case status >= 500:
      return `The server failed to answer (HTTP ${status}). It has logged the problem; try again shortly.`;
    case status === 404 && !said:
      return 'Not found (404).';
    case status === 400 && body?.code === 'invalid_id':
      // The server's sentence gives its pattern, a regular expression.
      return 'That is not a valid id: an id is 1 to 128 letters, digits, ‘.’, ‘_’, ‘:’ or ‘-’, starting with a letter or digit.';
    default:
      return said || `The server refused the request (HTTP ${status}).`;
  }
}

// request calls the API and returns the decoded JSON body, or throws an
// ApiError.
export async function request(method, path, body) {
  const headers = { Authorization: 'Bearer ' + session.key, Accept: 'application/json' };
  const init = { method, headers, cache: 'no-store', credentials: 'omit', redirect: 'error' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), TIMEOUT_MS);
  init.signal = abort.signal;
  let resp;
  const sentAt = Date.now();
  try {
    resp = await fetch(path, init);
    noteServerClock(resp.headers.get('Date'), sentAt, Date.now());
  } catch {
    if (abort.signal.aborted) {
      throw new ApiError(0, 'timeout', `The server did not answer within ${TIMEOUT_MS / 1000} seconds. The dashboard keeps trying.`);
    }
    throw new ApiError(0, 'network', describe(0));
  } finally {
    clearTimeout(timer);
  }
  let data = null;
  const type = resp.headers.get('Content-Type') || '';
  if (type.startsWith('application/json')) {
    try { data = await resp.json(); } catch { data = null; }
  }
  if (!resp.ok) {
    throw new ApiError(resp.status, (data && typeof data.code === 'string') ? data.code : '', describe(resp.status, data));
  }
  if (data === null) {
    throw new ApiError(resp.status, 'bad_answer', 'The server answered with something that is not the API’s JSON. Is this the checkout service?');
  }
  return data;
}

export const get = (path) => request('GET', path);
export const post = (path, body) => request('POST', path, body ?? {});
export const del = (path) => request('DELETE', path);

// id encodes an identifier for a path segment.
export const seg = (id) => encodeURIComponent(id);

// pages follows next_cursor for up to max pages, and until it has most
// items, and returns the items (at most most of them).
export async function pages(path, field, max = 10, most = Infinity) {
  return (await pagesOf(path, field, max, most)).items;
}

// probe reports whether the API serves a route: false only when it answers
// 404 not_found, the API's answer to a path it does not know (a route this
// deployment does not have yet). Any other failure (a 503, a timeout, a
// 404 from something in front of the API) tells nothing and is thrown.
export async function probe(path) {
  try {
    await get(path);
    return true;
  } catch (err) {
    if (err instanceof ApiError && err.status === 404 && err.code === 'not_found') return false;
    throw err;
  }
}

// pagesOf is pages, and whether they hold every item (complete): false
// when more remained than max pages or most items.
export async function pagesOf(path, field, max = 10, most = Infinity) {
  const out = [];
  let cursor = null;
  for (let i = 0; i < max; i++) {
    const sep = path.includes('?') ? '&' : '?';
    const page = await get(cursor ? `${path}${sep}cursor=${encodeURIComponent(cursor)}` : path);
    out.push(...(page[field] || []));
    cursor = page.next_cursor;
    if (!cursor || out.length >= most) break;
  }
  return { items: out.slice(0, most), complete: !cursor && out.length <= most };
}
