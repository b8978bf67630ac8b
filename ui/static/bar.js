// The remaining-time bar of a lease: a progressbar whose fill is the share
// of the lease's timeout still left, amber under 20% and red under 5%, with
// the time left written beside it (the colour is never the only signal).

import { h, attr, text } from './dom.js';
import { duration } from './format.js';

export const WARN = 0.2;
export const CRIT = 0.05;

// level is "ok", "warn" or "crit" for a share of time left.
export function level(share) {
  if (share < CRIT) return 'crit';
  if (share < WARN) return 'warn';
  return 'ok';
}

export function makeBar() {
  const fill = h('span', { class: 'bar-fill' });
  const track = h('span', { class: 'bar-track', role: 'progressbar', 'aria-valuemin': 0 }, fill);
  const label = h('span', { class: 'bar-label' });
  return h('span', { class: 'bar', dataset: { level: 'ok' } }, track, label);
}

// lease is what a bar needs: the lease's timeout, its remaining seconds as
// the server said, and when (performance.now()) that was said, so that the
// bar runs down between refreshes on the local clock's elapsed time alone,
// whatever the local clock's offset from the server's.
export function remaining(lease, nowMs) {
  const left = lease.remaining_seconds - (nowMs - lease.seenAt) / 1000;
  return Math.max(0, left);
}

export function updateBar(bar, lease, nowMs) {
  const total = Math.max(1, lease.timeout_seconds || 1);
  const left = remaining(lease, nowMs);
  const share = Math.min(1, left / total);
  const lv = left <= 0 ? 'crit' : level(share);
  if (bar.dataset.level !== lv) bar.dataset.level = lv;
  const [track, label] = bar.children;
  const fill = track.firstElementChild;
  const width = (share * 100).toFixed(1) + '%';
  // A CSSOM property, which the Content-Security-Policy allows (a style
  // attribute would not be).
  if (fill.style.width !== width) fill.style.width = width;
  const words = left <= 0 ? 'expired' : `${duration(left)} left`;
  attr(track, 'aria-valuemax', total);
  attr(track, 'aria-valuenow', Math.floor(left));
  attr(track, 'aria-valuetext', `${words} of ${duration(total)}`);
  attr(track, 'aria-label', 'Time remaining');
  text(label, words);
}
