// Index lag: global secondary indexes that trail the table, as on AWS.
//
// DynamoDB propagates each write to a table's GSIs asynchronously, so a GSI
// Query can miss a write that GetItem already sees; dynalite updates every
// index inside the write. With a lag set for a table, each write's GSI update
// (the item's old and new image, which is all dynalite needs to move index
// entries) goes into a FIFO queue per table and is applied once due, one at
// a time and in write order. Due times are max(previous due, now + lag), so
// changing the lag never reorders the queue. IndexLagPending
//   {"TablePrefix": "test-abc-"}  ->  {"TablePrefix": ..., "Pending": n}
// counts the updates still queued for a prefix's tables, so that a test can
// wait for its indexes to catch up instead of sleeping. Local secondary indexes and the
// table itself stay synchronous (an LSI supports consistent reads on AWS).
//
// The lag of a table is, in order: its exact TableName rule, the longest
// matching TablePrefix rule, the process default (--index-lag, else
// $DYNALITE_INDEX_LAG, else none). Rules are set at run time with
//   X-Amz-Target: DynamoDBShim.SetIndexLag
//   {"TableName": "t", "LagMs": 250}  or  {"TablePrefix": "test-abc-", "LagMs": 250}
//
// DeleteTable drops the table's queue, and an entry is applied only if the
// table it was written to (same TableId) still exists, so a recreated table
// never gets a stale entry. Queued entries live in memory: a graceful stop
// (SIGTERM, SIGINT) applies them before exiting, a kill -9 loses them (and
// the next start on that data directory rebuilds the indexes: indexes.js).
//
// Without a lag (and nothing queued) a write's index entries are not
// applied here: plan hands them to the write, which stores them in the
// LevelDB batch of its item (indexes.js).
'use strict'

const { ops } = require('./indexes')

const MAX_LAG_MS = 60 * 60 * 1000

class IndexLag {
  constructor (store, defaultMs, deps) {
    this.store = store
    this.defaultMs = defaultMs
    this.apply = deps.updateIndexes // dynalite's own, synchronous-to-the-write, index update
    this.db = deps.db
    this.exact = new Map()
    this.prefixes = new Map()
    this.queues = new Map() // table name -> { entries, timer, busy, lastDue }
    this.flushing = false
  }

  SetIndexLag (data) {
    const ms = data.LagMs
    if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0 || ms > MAX_LAG_MS) {
      throw this.db.validationError('LagMs must be a number of milliseconds from 0 to ' + MAX_LAG_MS)
    }
    const byName = typeof data.TableName === 'string', byPrefix = typeof data.TablePrefix === 'string'
    if (byName === byPrefix) throw this.db.validationError('Exactly one of TableName and TablePrefix (strings) is required')
    if (byName) this.exact.set(data.TableName, ms)
    else this.prefixes.set(data.TablePrefix, ms)
    return byName ? { TableName: data.TableName, LagMs: ms } : { TablePrefix: data.TablePrefix, LagMs: ms }
  }

  // IndexLagPending is how many index updates of tables whose name starts
  // with TablePrefix are queued or being applied: 0 once their indexes
  // have caught up with every write answered so far.
  IndexLagPending (data) {
    if (typeof data.TablePrefix !== 'string') throw this.db.validationError('TablePrefix (a string) is required')
    let n = 0
    for (const [ name, q ] of this.queues) {
      if (name.startsWith(data.TablePrefix)) n += q.entries.length + (q.busy ? 1 : 0)
    }
    return { TablePrefix: data.TablePrefix, Pending: n }
  }

  lagFor (name) {
    if (this.exact.has(name)) return this.exact.get(name)
    let best = null
    for (const p of this.prefixes.keys()) {
      if (name.startsWith(p) && (best === null || p.length > best.length)) best = p
    }
    return best === null ? this.defaultMs : this.prefixes.get(best)
  }

  // plan stands in for dynalite's db.updateIndexes in a write whose item is
  // stored in one LevelDB batch. It returns the index entries' puts and
  // deletes for that batch (ops: local indexes always, global ones when the
  // table has no lag and nothing queued) and, under a lag, the global
  // indexes' update to queue once the batch is written (later), or null.
  plan (table, oldItem, newItem) {
    const gsis = table.GlobalSecondaryIndexes
    const ms = gsis && gsis.length ? this.lagFor(table.TableName) : 0
    // With no lag, entries still queued (the lag was just lowered) go first.
    if (!ms && !this.queues.has(table.TableName)) return { ops: ops(this.db, table, oldItem, newItem), later: null }
    return {
      ops: ops(this.db, { ...table, GlobalSecondaryIndexes: undefined }, oldItem, newItem),
      later: { table, oldItem, newItem, ms },
    }
  }

  // written queues what plan left for later, once the write's batch is stored.
  written ({ later }) {
    if (later) this.enqueue(later.table, later.oldItem, later.newItem, later.ms)
  }

  // update stands in for dynalite's db.updateIndexes in any other write
  // (dynalite has none today): it applies the entries itself.
  update (store, table, oldItem, newItem, cb) {
    const gsis = table.GlobalSecondaryIndexes
    const ms = gsis && gsis.length ? this.lagFor(table.TableName) : 0
    // With no lag, entries still queued (the lag was just lowered) go first.
    if (!ms && !this.queues.has(table.TableName)) return this.apply(store, table, oldItem, newItem, cb)
    this.apply(store, { ...table, GlobalSecondaryIndexes: undefined }, oldItem, newItem, err => {
      if (err) return cb(err)
      this.enqueue(table, oldItem, newItem, ms)
      cb()
    })
  }

  enqueue (table, oldItem, newItem, ms) {
    const name = table.TableName
    let q = this.queues.get(name)
    if (!q) this.queues.set(name, q = { entries: [], timer: null, busy: false, lastDue: 0 })
    q.lastDue = Math.max(q.lastDue, Date.now() + ms)
    q.entries.push({ due: q.lastDue, table: { ...table, LocalSecondaryIndexes: undefined }, oldItem, newItem })
    this.pump(name, q)
  }

  pump (name, q) {
    if (q.busy || q.timer) return
    const head = q.entries[0]
    if (!head) {
      if (this.queues.get(name) === q) this.queues.delete(name)
      return
    }
    const wait = this.flushing ? 0 : head.due - Date.now()
    if (wait > 0) {
      q.timer = setTimeout(() => {
        q.timer = null
        this.pump(name, q)
      }, wait)
      return
    }
    q.entries.shift()
    q.busy = true
    this.applyEntry(head, err => {
      if (err && !/Database is (not open|closed)/.test(err)) console.error('shim: lagged index update of', name, 'failed:', err)
      q.busy = false
      this.pump(name, q)
    })
  }

  applyEntry (e, cb) {
    this.store.getTable(e.table.TableName, false, (err, current) => {
      // Gone or replaced: its indexes went with it.
      if (err || current.TableId !== e.table.TableId || current.TableStatus === 'DELETING') return cb()
      try {
        this.apply(this.store, e.table, e.oldItem, e.newItem, cb)
      }
      catch (err) {
        cb(err)
      }
    })
  }

  // dropTable forgets the queued entries of a table being deleted.
  dropTable (name) {
    const q = this.queues.get(name)
    if (!q) return
    clearTimeout(q.timer)
    q.timer = null
    q.entries.length = 0
    this.queues.delete(name)
  }

  // flush applies every queued entry now, then calls cb (after at most
  // timeoutMs).
  flush (timeoutMs, cb) {
    this.flushing = true
    for (const [ name, q ] of this.queues) {
      clearTimeout(q.timer)
      q.timer = null
      this.pump(name, q)
    }
    const deadline = Date.now() + timeoutMs
    const check = () => (!this.queues.size || Date.now() > deadline ? cb() : setTimeout(check, 10))
    check()
  }
}

// parseDuration reads a Go-style duration ("250ms", "1.5s", "1m30s") or a
// bare number of milliseconds, returning milliseconds, or NaN.
function parseDuration (v) {
  if (v == null || v === '') return 0
  if (typeof v === 'number') return v
  v = String(v).trim()
  if (/^\d+(\.\d+)?$/.test(v)) return Number(v)
  const units = { ns: 1e-6, us: 1e-3, 'µs': 1e-3, ms: 1, s: 1000, m: 60000, h: 3600000 }
  const re = /(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)/gy
  let ms = 0, m, end = 0
  while ((m = re.exec(v))) {
    ms += Number(m[1]) * units[m[2]]
    end = re.lastIndex
  }
  return end === v.length ? ms : NaN
}

module.exports = { IndexLag, parseDuration, MAX_LAG_MS }
