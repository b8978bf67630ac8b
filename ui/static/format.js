// Formatting of times and durations for people. Now is the server's clock
// (serverNow), which the times the API gives are read against.

import { serverNow } from './api.js';

// ms parses an RFC 3339 time (null stays null).
export const ms = (iso) => (iso ? Date.parse(iso) : null);

// BIDI matches what can reorder text around it: right-to-left letters and
// the bidirectional controls (an override such as U+202E reverses all
// that follows it on its line).
const BIDI = /[\u0590-\u08ff\ufb1d-\ufdff\ufe70-\ufeff\u200e\u200f\u202a-\u202e\u2066-\u2069\u{10800}-\u{10fff}\u{1e800}-\u{1efff}]/u;

const FSI = '\u2068'; // first strong isolate: opens an isolate
const PDI = '\u2069'; // pop directional isolate: closes the last one open
const OPENS = /[\u2066-\u2068]/;
// Where a line of text ends for the bidirectional algorithm, which closes
// every isolate and override opened on it.
const PARAGRAPH = /[\n\r\u001c-\u001e\u0085\u2029]/;

// isolate is text that someone else wrote (a name, a title, a reason),
// made unable to reorder the text it is set in: wrapped in isolate marks
// (U+2068 ... U+2069, whose direction is the text's own) when it holds
// anything that could. Every string from the API that a person wrote goes
// through it before it reaches the page. The text cannot get out of the
// marks: a closer (U+2069) that closes nothing the text opened would close
// the marks instead, and is left out; the isolates it leaves open are
// closed; and each of its lines is wrapped on its own.
export function isolate(s) {
  if (typeof s !== 'string' || !BIDI.test(s)) return s;
  let out = FSI;
  let open = 0; // isolates the text opened and has not closed
  for (const c of s) {
    if (c === PDI) {
      if (open === 0) continue;
      open--;
    } else if (OPENS.test(c)) {
      open++;
    } else if (PARAGRAPH.test(c)) {
      out += PDI.repeat(open + 1) + c + FSI;
      open = 0;
      continue;
    }
    out += c;
  }
  return out + PDI.repeat(open + 1);
}

// CONTROLS are the characters that only steer the bidirectional
// algorithm and draw nothing.
const CONTROLS = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

// escapeControls writes the bidirectional controls in JSON text as JSON's
// escapes for them ("\u202e"): they show, and reorder nothing, in keys
// and values alike.
export const escapeControls = (json) => json.replace(CONTROLS, (c) => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0'));

const pad = (n) => String(n).padStart(2, '0');

// duration is whole seconds as "2h 05m", "4m 07s" or "12s".
export function duration(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return '—';
  let s = Math.max(0, Math.floor(seconds));
  const d = Math.floor(s / 86400); s -= d * 86400;
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  if (d > 0) return `${d}d ${pad(h)}h`;
  if (h > 0) return `${h}h ${pad(m)}m`;
  if (m > 0) return `${m}m ${pad(s)}s`;
  return `${s}s`;
}

// ago is how long ago a moment was, as "12 s ago" or "3 min ago".
export function ago(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return `${Math.floor(s / 86400)} d ago`;
}

const timeOnly = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit' });
const dateTime = new Intl.DateTimeFormat(undefined, { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit' });

// clock is a local time, with the date when it is not today.
export function clock(iso) {
  const t = ms(iso);
  if (t === null || Number.isNaN(t)) return '—';
  const d = new Date(t);
  const today = new Date(serverNow());
  return d.toDateString() === today.toDateString() ? timeOnly.format(d) : dateTime.format(d);
}

// time is a <time> element for an RFC 3339 stamp, with the exact UTC stamp
// as its title.
export function setTime(el, iso) {
  const label = clock(iso);
  if (el.textContent !== label) el.textContent = label;
  if (iso) {
    if (el.getAttribute('datetime') !== iso) el.setAttribute('datetime', iso);
    if (el.title !== iso) el.title = iso;
  }
}

// The words for each event type, and for how a lease ended.
export const EVENT_WORDS = {
  checkout: 'checked out',
  renew: 'renewed',
  release: 'released',
  complete: 'completed',
  timeout: 'timed out',
  agent_death: 'holder died',
  force_release: 'force released',
  cancel: 'cancelled',
  unblocked: 'unblocked',
  failed: 'failed',
};

export const eventWords = (type) => EVENT_WORDS[type] || String(type);

// The statuses of a task, in the order the dashboard lists them, and their
// words.
export const STATUSES = ['todo', 'blocked', 'in_progress', 'done', 'cancelled', 'failed'];

export const STATUS_WORDS = {
  todo: 'to do',
  blocked: 'blocked',
  in_progress: 'in progress',
  done: 'done',
  cancelled: 'cancelled',
  failed: 'failed',
};

export const statusWords = (s) => STATUS_WORDS[s] || String(s);

// until is how long until a moment, as "in 12s", or '' when it has passed.
export function until(iso, now = serverNow()) {
  const t = ms(iso);
  if (t === null || Number.isNaN(t) || t <= now) return '';
  return `in ${duration(Math.ceil((t - now) / 1000))}`;
}
