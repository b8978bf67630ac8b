// Index entries that are stored with their items, and repaired on start.
//
// dynalite's updateIndexes writes a write's secondary-index entries with one
// LevelDB put or del each, and only then the item: a kill -9 in between
// leaves an index listing a version of the item that was never stored, or
// without the entry of the one that was. The shim computes those puts and
// deletes with dynalite's own getIndexActions (ops, below) and writes them
// in the LevelDB batch that writes the item and its stream record (index.js,
// tracked), so that a crash keeps all of them or none. Under an index lag
// the global indexes' share is queued instead (indexlag.js) and lives in
// memory until it is due.
//
// A batch does not cover what a kill -9 takes from that queue, nor data
// directories written before the shim batched entries. So a server started
// with --path repairs every table's indexes before it answers a request
// (repair, below): it reads the table's items, works out the entry each
// item calls for in each local and global secondary index, and puts the
// entries that are missing or differ and deletes those no item calls for.
// It logs one line per index it changed ("shim: repaired index ..."). It
// holds one table's expected entries in memory at a time, and takes 0.5 to
// 0.7 s for a table of 10,000 items with two global indexes (on 2 CPUs),
// whether every entry was missing or none was: reading and indexing the
// items is half of that, comparing each index's entries the rest.
'use strict'

// dynalite keeps each table's items and index entries under these LevelDB
// key prefixes (db/index.js: getItemDb, getIndexDb and their sub-databases,
// whose keys are the prefix, '~' and the key). Table and index names
// cannot contain '~', and keys are hex digits and '/'.
const itemPrefix = table => 'item-' + table + '~'
const indexPrefix = (kind, table, index) => 'index-' + kind.toLowerCase() + '~' + table + '~' + index + '~'
const KINDS = [ 'Local', 'Global' ]

// ops returns the LevelDB batch operations (full keys) that move table's
// secondary-index entries from oldItem to newItem, as db.updateIndexes
// would write them: deletes first, then puts.
function ops (db, table, oldItem, newItem) {
  const dels = [], puts = []
  if (!oldItem && !newItem) return dels
  for (const kind of KINDS) {
    const indexes = table[kind + 'SecondaryIndexes']
    if (!indexes || !indexes.length) continue
    const actions = db.getIndexActions(indexes, oldItem, newItem, table)
    for (const a of actions.deletes) dels.push({ type: 'del', key: indexPrefix(kind, table.TableName, a.index) + a.key })
    for (const a of actions.puts) puts.push({ type: 'put', key: indexPrefix(kind, table.TableName, a.index) + a.key, value: a.item })
  }
  return dels.concat(puts)
}

const BATCH = 1000 // operations per LevelDB batch while repairing

// repair makes every secondary index of every table in store (its LevelDB
// at store.db) match the table's items, and resolves once it is done.
async function repair (store, db) {
  const tables = []
  for await (const [ , table ] of range(store.db, 'table~')) tables.push(table)
  for (const table of tables) {
    // A table being deleted goes with its indexes.
    if (!table || !table.TableName || table.TableStatus === 'DELETING') continue
    // Each index, with the entries its table's items call for (by key).
    const indexes = [], byName = new Map()
    for (const kind of KINDS) {
      for (const ix of table[kind + 'SecondaryIndexes'] || []) {
        const x = { name: ix.IndexName, prefix: indexPrefix(kind, table.TableName, ix.IndexName), want: new Map() }
        indexes.push(x)
        byName.set(kind + '~' + ix.IndexName, x)
      }
    }
    if (!indexes.length) continue
    let unindexable = 0
    for await (const [ , item ] of range(store.db, itemPrefix(table.TableName))) {
      try {
        for (const kind of KINDS) {
          const list = table[kind + 'SecondaryIndexes']
          if (!list || !list.length) continue
          for (const a of db.getIndexActions(list, null, item, table).puts) byName.get(kind + '~' + a.index).want.set(a.key, a.item)
        }
      }
      catch {
        unindexable++ // an index key of the wrong type, which dynalite cannot index either
      }
    }
    if (unindexable) console.error('shim: %d items of table %s cannot be indexed; left out of its indexes', unindexable, table.TableName)

    // The entries there are, against them.
    for (const x of indexes) {
      const fixes = new Writer(store.db)
      let missing = 0, stale = 0, extra = 0
      for await (const [ key, entry ] of range(store.db, x.prefix)) {
        const k = key.slice(x.prefix.length)
        if (!x.want.has(k)) {
          extra++
          await fixes.add({ type: 'del', key })
          continue
        }
        const want = x.want.get(k)
        x.want.delete(k)
        if (!same(want, entry)) {
          stale++
          await fixes.add({ type: 'put', key, value: want })
        }
      }
      for (const [ k, want ] of x.want) {
        missing++
        await fixes.add({ type: 'put', key: x.prefix + k, value: want })
      }
      await fixes.flush()
      if (missing || stale || extra) {
        console.error('shim: repaired index %s of table %s: %d missing, %d stale, %d extra entries',
          x.name, table.TableName, missing, stale, extra)
      }
    }
  }
}

// range iterates the [key, value] pairs of LevelDB whose keys start with
// prefix (keys are ASCII, so every one sorts below prefix + '\xff').
function range (level, prefix) {
  return level.iterator({ gte: prefix, lt: prefix + '\xff' })
}

// Writer collects operations and writes them in batches. An iterator reads
// a snapshot, so writing while iterating changes nothing it yields.
class Writer {
  constructor (level) {
    this.level = level
    this.pending = []
  }

  async add (op) {
    this.pending.push(op)
    if (this.pending.length >= BATCH) await this.flush()
  }

  async flush () {
    if (!this.pending.length) return
    const batch = this.pending
    this.pending = []
    await this.level.batch(batch)
  }
}

// same tells whether an index entry read back from LevelDB holds what the
// item calls for, whatever order their attributes were written in (an entry
// is written from the item itself, so the plain JSON texts settle nearly
// every comparison).
function same (want, entry) {
  return JSON.stringify(want) === JSON.stringify(entry) || canonical(want) === canonical(entry)
}

// canonical is a JSON text of v with every object's keys sorted.
function canonical (v) {
  return JSON.stringify(v, (k, x) => x && typeof x === 'object' && !Array.isArray(x) ?
    Object.fromEntries(Object.keys(x).sort().map(key => [ key, x[key] ])) : x)
}

module.exports = { ops, repair, itemPrefix }
