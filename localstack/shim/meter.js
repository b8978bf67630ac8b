// A capacity meter: what DynamoDB would bill for each request, in write and
// read units, per table, per global secondary index and per partition-key
// value. dynalite reports the table's units only (never an index's, nothing
// for a failed condition), and sizes items by JavaScript string length; this
// follows AWS's published rules instead.
//
// The rules, from the Amazon DynamoDB Developer Guide:
//
//   Item size ("DynamoDB item sizes and formats", CapacityUnitCalculations):
//   the sum of the lengths of attribute names and values. A name and a
//   string are their UTF-8 bytes; a number is about 1 byte per two
//   significant digits (leading and trailing zeros trimmed) plus 1 byte; a
//   binary value its raw bytes; null and Boolean 1 byte; a List or Map 3
//   bytes of overhead plus its elements, each element 1 byte more (a Map's
//   elements count their names too); a set the sum of its elements.
//
//   Writes ("Read/write capacity mode", "Managing settings on DynamoDB
//   provisioned capacity tables"): 1 write unit per 1 KB, rounded up, of the
//   larger of the item's before and after image (PutItem, UpdateItem); a
//   DeleteItem bills the deleted item; at least 1 unit. "If a
//   ConditionExpression evaluates to false, DynamoDB consumes write capacity
//   from the table": the size of the existing item, at least 1 unit. The item
//   that ReturnValuesOnConditionCheckFailure returns costs no read.
//
//   Index writes ("Global secondary indexes", provisioned throughput
//   considerations, GSI.ThroughputConsiderations.Writes): a write that makes
//   an item appear in an index is a put; one that makes it leave is a delete;
//   a changed index key attribute (from A to B) is a delete and a put; a
//   change of a projected attribute only is an update; an item in the index
//   neither before nor after costs the index nothing. Each is billed in 1 KB
//   units of the index entry, whose size ("Storage considerations for global
//   secondary indexes") is the table's primary key + the index key
//   attributes + the projected attributes + 100 bytes of overhead. Attributes
//   are counted once when they are both (an index keyed by a table key).
//   With ALL every attribute is projected; KEYS_ONLY only the keys;
//   INCLUDE the keys and NonKeyAttributes. An item that lacks an index key
//   attribute has no entry (a sparse index).
//
//   Reads ("Read/write capacity mode", read request units): 1 read unit per
//   4 KB, rounded up, strongly consistent; half of that eventually
//   consistent. GetItem rounds the one item (a missing one costs the
//   minimum); BatchGetItem rounds each item on its own; Query and Scan round
//   the sum of every item they read, before any FilterExpression, and cost
//   the minimum even when they read nothing. A ProjectionExpression does not
//   change what is read. A Query of a global secondary index reads its
//   entries: the sum of their projected attributes' sizes ("Reading from a
//   global secondary index"), always eventually consistent.
//
// Partitions: each write is also counted against the partition-key value it
// lands on: the table's key for the table; the entry's index partition key
// for an index (a delete on the old value, a put on the new one). Every
// partition of a table or index takes about 1,000 write units a second, so
// the busiest one is what caps a fleet. A Scan is counted against the key ""
// (it reads every partition). Local secondary indexes are not metered.
//
// Running totals are kept per table and read or reset by table-name prefix:
//   X-Amz-Target: DynamoDBShim.ReadCapacity   {"TablePrefix": "test-abc-"}
//   X-Amz-Target: DynamoDBShim.ResetCapacity  {"TablePrefix": "test-abc-"}
// They include failed conditional writes (which DynamoDB bills but does not
// report in the error) and every other client's requests on those tables.
'use strict'

const KB = 1024
const INDEX_OVERHEAD = 100

// nameSize is the UTF-8 length of an attribute name.
function nameSize (name) {
  return Buffer.byteLength(name, 'utf8')
}

// numberSize is the size of a DynamoDB number: 1 byte per two significant
// digits, rounded up, plus 1 byte. (A loop, not regular expressions: every
// write sizes every number of both its images.)
function numberSize (n) {
  const s = String(n).trim()
  let start = 0, end = s.length
  if (s[0] === '+' || s[0] === '-') start = 1
  for (let i = start; i < end; i++) {
    const c = s.charCodeAt(i)
    if (c === 101 || c === 69) { // e, E: the exponent is not a digit
      end = i
      break
    }
  }
  // The significant digits run from the first non-zero digit to the last,
  // the decimal point left out.
  let digit = 0, first = -1, last = -1, point = false
  for (let i = start; i < end; i++) {
    const c = s.charCodeAt(i)
    if (c === 46 && !point) {
      point = true
      continue
    }
    if (c !== 48) {
      if (first < 0) first = digit
      last = digit
    }
    digit++
  }
  return Math.ceil((first < 0 ? 0 : last - first + 1) / 2) + 1
}

// valueSize is the size of one attribute value, without its name.
function valueSize (v) {
  if (v == null || typeof v !== 'object') return 0
  const type = Object.keys(v)[0], val = v[type]
  switch (type) {
  case 'S': return Buffer.byteLength(val, 'utf8')
  case 'N': return numberSize(val)
  case 'B': return Buffer.from(val, 'base64').length
  case 'SS': return val.reduce((sum, x) => sum + Buffer.byteLength(x, 'utf8'), 0)
  case 'NS': return val.reduce((sum, x) => sum + numberSize(x), 0)
  case 'BS': return val.reduce((sum, x) => sum + Buffer.from(x, 'base64').length, 0)
  case 'NULL': return 1
  case 'BOOL': return 1
  case 'L': return 3 + val.reduce((sum, x) => sum + 1 + valueSize(x), 0)
  case 'M': return 3 + Object.keys(val).reduce((sum, k) => val[k] == null ? sum : sum + 1 + nameSize(k) + valueSize(val[k]), 0)
  }
  return 0
}

// itemSize is the size of an item (or of the attributes of an index entry).
function itemSize (item) {
  if (!item) return 0
  let size = 0
  for (const name of Object.keys(item)) {
    if (item[name] == null) continue
    size += nameSize(name) + valueSize(item[name])
  }
  return size
}

function writeUnits (bytes) {
  return Math.max(1, Math.ceil(bytes / KB))
}

function readUnits (bytes, consistent) {
  return Math.max(1, Math.ceil(bytes / (4 * KB))) * (consistent ? 1 : 0.5)
}

function keyNames (keySchema) {
  return keySchema.map(k => k.AttributeName)
}

// keyValue is the partition-key value of item under keySchema, as a string
// ("" when the item has none).
function keyValue (item, keySchema) {
  const v = item && item[keySchema[0].AttributeName]
  if (!v) return ''
  const type = Object.keys(v)[0]
  return String(v[type])
}

// indexEntry is the attributes an index holds for item, or null when the item
// lacks one of the index's key attributes (a sparse index).
function indexEntry (table, index, item) {
  if (!item) return null
  const ikeys = keyNames(index.KeySchema)
  for (const k of ikeys) if (item[k] == null) return null
  const p = index.Projection || { ProjectionType: 'ALL' }
  if (p.ProjectionType === 'ALL') return item
  const entry = {}
  const take = names => {
    for (const n of names) if (item[n] != null) entry[n] = item[n]
  }
  take(keyNames(table.KeySchema))
  take(ikeys)
  if (p.ProjectionType === 'INCLUDE' && p.NonKeyAttributes) take(p.NonKeyAttributes)
  return entry
}

// same tells whether two attribute values (or records of them, attributes
// that are null left out) are equal, as their JSON would be.
function same (a, b) {
  if (a === b) return true
  if (a == null || b == null || typeof a !== 'object' || typeof b !== 'object') return a == null && b == null
  if (Array.isArray(a)) {
    if (!Array.isArray(b) || a.length !== b.length) return false
    for (let i = 0; i < a.length; i++) if (!same(a[i], b[i])) return false
    return true
  }
  if (Array.isArray(b)) return false
  let n = 0
  for (const k in a) {
    if (a[k] == null) continue
    if (!same(a[k], b[k])) return false
    n++
  }
  for (const k in b) if (b[k] != null) n--
  return n === 0
}

function sameKeys (a, b, names) {
  return names.every(n => same(a[n], b[n]))
}

// Usage is what one request consumed: units of the table and of each index,
// and the partitions they landed on.
class Usage {
  constructor (tableName) {
    this.tableName = tableName
    this.table = 0
    this.indexes = {} // index name -> units
    this.parts = [] // { index ('' for the table), key, units }
  }

  add (index, key, units) {
    if (!units) return
    if (index) this.indexes[index] = (this.indexes[index] || 0) + units
    else this.table += units
    this.parts.push({ index, key, units })
  }

  total () {
    return Object.values(this.indexes).reduce((a, b) => a + b, this.table)
  }

  // consumed is the ConsumedCapacity DynamoDB returns for mode (TOTAL or
  // INDEXES), or undefined.
  consumed (mode) {
    if (mode !== 'TOTAL' && mode !== 'INDEXES') return undefined
    const out = { TableName: this.tableName, CapacityUnits: this.total() }
    if (mode === 'INDEXES') {
      out.Table = { CapacityUnits: this.table }
      const names = Object.keys(this.indexes)
      if (names.length) {
        out.GlobalSecondaryIndexes = {}
        for (const n of names) out.GlobalSecondaryIndexes[n] = { CapacityUnits: this.indexes[n] }
      }
    }
    return out
  }
}

// writeUsage bills a successful write of table from oldItem to newItem
// (either may be missing) at key (the request's Item or Key).
function writeUsage (table, oldItem, newItem, key) {
  const u = new Usage(table.TableName)
  const item = newItem || oldItem || key
  u.add('', keyValue(item, table.KeySchema), writeUnits(Math.max(itemSize(oldItem), itemSize(newItem))))
  for (const index of table.GlobalSecondaryIndexes || []) {
    const before = indexEntry(table, index, oldItem), after = indexEntry(table, index, newItem)
    const name = index.IndexName, ks = index.KeySchema
    const size = e => itemSize(e) + INDEX_OVERHEAD
    if (!before && !after) continue
    if (!before) {
      u.add(name, keyValue(after, ks), writeUnits(size(after))) // put
    }
    else if (!after) {
      u.add(name, keyValue(before, ks), writeUnits(size(before))) // delete
    }
    else if (!sameKeys(before, after, keyNames(ks))) {
      u.add(name, keyValue(before, ks), writeUnits(size(before))) // delete
      u.add(name, keyValue(after, ks), writeUnits(size(after))) // and put
    }
    else if (!same(before, after)) {
      u.add(name, keyValue(after, ks), writeUnits(Math.max(size(before), size(after)))) // update
    }
  }
  return u
}

// failedWriteUsage bills a write whose condition failed: the table only, by
// the item it was tried on.
function failedWriteUsage (table, key, existingItem) {
  const u = new Usage(table.TableName)
  u.add('', keyValue(existingItem || key, table.KeySchema), writeUnits(itemSize(existingItem)))
  return u
}

// getUsage bills a GetItem of key that found item (or nothing).
function getUsage (table, key, item, consistent) {
  const u = new Usage(table.TableName)
  u.add('', keyValue(key, table.KeySchema), readUnits(itemSize(item), consistent))
  return u
}

// queryUsage bills a Query or Scan that read items (before any filter), from
// the table or from indexName, on partition key (Scan: '').
function queryUsage (table, indexName, key, items, consistent) {
  const u = new Usage(table.TableName)
  const bytes = items.reduce((sum, it) => sum + itemSize(it), 0)
  u.add(indexName || '', key, readUnits(bytes, consistent && !indexName))
  return u
}

// Meter keeps the running totals.
class Meter {
  constructor (db) {
    this.db = db // dynalite's db module: validationError
    this.tables = new Map() // table name -> { w, r, indexes: Map, parts: Map }
  }

  record (usage, isRead) {
    let t = this.tables.get(usage.tableName)
    if (!t) this.tables.set(usage.tableName, t = { w: 0, r: 0, indexes: new Map(), parts: new Map() })
    const f = isRead ? 'r' : 'w'
    t[f] += usage.table
    for (const [ name, units ] of Object.entries(usage.indexes)) {
      let ix = t.indexes.get(name)
      if (!ix) t.indexes.set(name, ix = { w: 0, r: 0 })
      ix[f] += units
    }
    for (const p of usage.parts) {
      const k = p.index + '\u0000' + p.key
      let pt = t.parts.get(k)
      if (!pt) t.parts.set(k, pt = { index: p.index, key: p.key, w: 0, r: 0 })
      pt[f] += p.units
    }
  }

  prefix (data) {
    if (typeof data.TablePrefix !== 'string') throw this.db.validationError('TablePrefix (a string, "" for every table) is required')
    return data.TablePrefix
  }

  // ReadCapacity answers the totals of every table whose name starts with
  // TablePrefix.
  ReadCapacity (data) {
    const prefix = this.prefix(data), tables = []
    for (const [ name, t ] of this.tables) {
      if (!name.startsWith(prefix)) continue
      tables.push({
        TableName: name,
        WriteUnits: t.w,
        ReadUnits: t.r,
        Indexes: [ ...t.indexes ].map(([ n, ix ]) => ({ IndexName: n, WriteUnits: ix.w, ReadUnits: ix.r })),
        Partitions: [ ...t.parts.values() ].map(p => ({ IndexName: p.index, Key: p.key, WriteUnits: p.w, ReadUnits: p.r })),
      })
    }
    return { Tables: tables }
  }

  // ResetCapacity forgets the totals of every table whose name starts with
  // TablePrefix.
  ResetCapacity (data) {
    const prefix = this.prefix(data)
    let n = 0
    for (const name of [ ...this.tables.keys() ]) {
      if (name.startsWith(prefix)) {
        this.tables.delete(name)
        n++
      }
    }
    return { TablePrefix: prefix, Tables: n }
  }
}

// Collector stands in for ReturnConsumedCapacity on the writes and reads a
// BatchWriteItem or BatchGetItem makes, gathering their usage by table.
class Collector {
  constructor () {
    this.byTable = new Map()
  }

  add (u) {
    let t = this.byTable.get(u.tableName)
    if (!t) this.byTable.set(u.tableName, t = new Usage(u.tableName))
    t.table += u.table
    for (const [ n, v ] of Object.entries(u.indexes)) t.indexes[n] = (t.indexes[n] || 0) + v
  }

  // consumed is the list BatchWriteItem and BatchGetItem return, one per table.
  consumed (mode) {
    if (mode !== 'TOTAL' && mode !== 'INDEXES') return undefined
    return [ ...this.byTable.values() ].map(u => u.consumed(mode))
  }
}

module.exports = {
  Meter, Collector, Usage,
  itemSize, valueSize, numberSize, indexEntry, writeUsage, failedWriteUsage, getUsage, queryUsage,
  INDEX_OVERHEAD,
}
