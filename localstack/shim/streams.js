// A DynamoDB Streams API for dynalite, which has none.
//
// A table created (or updated) with StreamSpecification {StreamEnabled: true}
// gets a stream with one open shard. Every successful PutItem, UpdateItem and
// DeleteItem (BatchWriteItem runs the same code) adds one record holding the
// item images as written; a put or update that leaves the item exactly as it
// was adds none, as on AWS. Records are served by ListStreams, DescribeStream,
// GetShardIterator and GetRecords under X-Amz-Target DynamoDBStreams_20120810.
//
// Order and durability: sequence numbers are fixed-width decimal strings that
// strictly increase across the process (and across restarts: they start from
// the clock in microseconds times a thousand, and never go below the largest
// one loaded). With --path, a record is written in the same LevelDB batch as
// the item it describes (and the item's index entries), so after a kill -9
// either both the item change and its record survive or neither does; the
// write is answered only after that batch. A record becomes readable only
// once every record with a smaller sequence number has been written or has
// failed, so readers never skip one.
//
// Records are kept for 24 hours, and at most MAX_RECORDS per stream. Each
// is kept in memory as its JSON text (kept), which GetRecords answers as
// it is, without parsing it again:
// as objects, a record with both images of a 40-attribute item took 8 KB
// of heap, 2.4 times its JSON, and a busy stream's 100,000 records most of
// the server's memory.
// DeleteTable disables the table's stream and closes its shard; the records
// stay readable until they age out, as on AWS.
'use strict'

const crypto = require('crypto')
const { itemSize } = require('./meter') // sizes by AWS's rules

const RETENTION_MS = 24 * 60 * 60 * 1000
const MAX_RECORDS = 100000
const ITERATOR_TTL_MS = 15 * 60 * 1000
const MAX_BATCH_BYTES = 1024 * 1024
const SEQ_WIDTH = 21
const VIEW_TYPES = [ 'KEYS_ONLY', 'NEW_IMAGE', 'OLD_IMAGE', 'NEW_AND_OLD_IMAGES' ]

// LevelDB keys: stream descriptions sort before records ('m' < 'r'), and a
// stream's records sort by sequence number (fixed width).
const META = 'shimstream~m~', REC = 'shimstream~r~', END = 'shimstream\x7f'

class Streams {
  constructor (store, deps) {
    this.store = store
    this.db = deps.db // dynalite's db module: validationError
    this.Big = deps.Big
    this.persist = !!store.options.path
    this.byArn = new Map()
    this.lastSeq = 0n
    this.pending = [] // writes in flight, in sequence order
    setInterval(() => this.trim(), 60 * 1000).unref()
  }

  // load reads the streams and records kept under --path.
  async load () {
    if (!this.persist) return
    for await (const [ key, value ] of this.store.db.iterator({ gte: META, lt: END })) {
      if (key.startsWith(META)) {
        this.byArn.set(value.arn, Object.assign(value, { records: [], trimmed: null }))
        this.bump(value.start)
        continue
      }
      const rest = key.slice(REC.length), arn = rest.slice(0, rest.lastIndexOf('~'))
      const s = this.byArn.get(arn)
      if (s) s.records.push(kept(value, JSON.stringify(value)))
      this.bump(value.dynamodb.SequenceNumber)
    }
  }

  bump (seq) {
    if (seq && BigInt(seq) > this.lastSeq) this.lastSeq = BigInt(seq)
  }

  nextSeq () {
    const now = BigInt(Date.now()) * 1000000n
    this.lastSeq = now > this.lastSeq ? now : this.lastSeq + 1n
    return this.lastSeq.toString().padStart(SEQ_WIDTH, '0')
  }

  // enable gives table (a CreateTable request or a stored table) a new
  // stream: its StreamSpecification, LatestStreamLabel and LatestStreamArn.
  enable (table, viewType) {
    const base = 'arn:aws:dynamodb:' + this.store.tableDb.awsRegion + ':' +
      this.store.tableDb.awsAccountId + ':table/' + table.TableName + '/stream/'
    let t = Date.now(), label
    do label = new Date(t++).toISOString().slice(0, -1)
    while (this.byArn.has(base + label))
    table.StreamSpecification = { StreamEnabled: true, StreamViewType: viewType }
    table.LatestStreamLabel = label
    table.LatestStreamArn = base + label
  }

  // register returns the stream of a table with an enabled stream, creating
  // (and, with --path, saving) its description on first use. With cb, cb runs
  // once the description is saved.
  register (table, cb) {
    let s = this.byArn.get(table.LatestStreamArn)
    if (!s) {
      s = {
        arn: table.LatestStreamArn,
        label: table.LatestStreamLabel,
        tableName: table.TableName,
        keySchema: table.KeySchema,
        viewType: table.StreamSpecification.StreamViewType,
        created: Date.now() / 1000,
        shardId: 'shardId-' + String(Date.now()).padStart(20, '0') + '-' + crypto.randomBytes(4).toString('hex'),
        start: this.nextSeq(),
        end: null,
        status: 'ENABLED',
        records: [],
        trimmed: null,
        unsaved: true,
      }
      this.byArn.set(s.arn, s)
    }
    if (cb) this.save([ s ], cb)
    return s
  }

  // disable closes the shard of every enabled stream of tableName, saving
  // their descriptions before cb.
  disable (tableName, cb) {
    const list = [ ...this.byArn.values() ].filter(s => s.tableName === tableName && s.status === 'ENABLED')
    for (const s of list) {
      s.status = 'DISABLED'
      s.disabledAt = Date.now() / 1000
      s.end = this.lastSeq.toString().padStart(SEQ_WIDTH, '0') // at or past every record already numbered
      s.unsaved = true
    }
    this.save(list, cb)
  }

  save (list, cb) {
    list = list.filter(s => s.unsaved)
    if (!this.persist || !list.length) return setImmediate(cb)
    for (const s of list) delete s.unsaved
    this.store.db.batch(list.map(s => ({ type: 'put', key: META + s.arn, value: describe(s) })), cb)
  }

  // updateTable applies an UpdateTable StreamSpecification to a stored
  // table, or returns why it cannot. Once the table is stored, the caller
  // registers the new stream or disables the old one.
  updateTable (table, spec) {
    const enabled = table.StreamSpecification && table.StreamSpecification.StreamEnabled
    if (spec.StreamEnabled) {
      if (enabled) return this.db.validationError('Table already has an enabled stream: ' + table.LatestStreamArn)
      this.enable(table, spec.StreamViewType)
      return null
    }
    if (!enabled) return this.db.validationError('Table already has streams disabled')
    delete table.StreamSpecification
    return null
  }

  // recordFor returns the stream record for one write, or null when the
  // table has no enabled stream or the write changed nothing.
  recordFor ({ table, oldItem, newItem }) {
    const spec = table.StreamSpecification
    if (!spec || !spec.StreamEnabled || !table.LatestStreamArn || (!oldItem && !newItem)) return null
    if (oldItem && newItem && sameItem(oldItem, newItem, this.Big)) return null
    const s = this.register(table)
    if (s.status !== 'ENABLED') return null
    const keys = {}
    for (const k of s.keySchema) keys[k.AttributeName] = (newItem || oldItem)[k.AttributeName]
    const d = {
      ApproximateCreationDateTime: Math.floor(Date.now() / 1000),
      Keys: keys,
      SequenceNumber: this.nextSeq(),
      SizeBytes: 0,
      StreamViewType: s.viewType,
    }
    if (newItem && /NEW/.test(s.viewType)) d.NewImage = newItem
    if (oldItem && /OLD/.test(s.viewType)) d.OldImage = oldItem
    d.SizeBytes = [ d.Keys, d.NewImage, d.OldImage ].reduce((n, x) => n + (x ? itemSize(x) : 0), 0)
    return {
      stream: s,
      record: {
        eventID: crypto.randomUUID().replace(/-/g, ''), // 32 hex digits, from a pooled source
        eventName: !oldItem ? 'INSERT' : !newItem ? 'REMOVE' : 'MODIFY',
        eventVersion: '1.1',
        eventSource: 'aws:dynamodb',
        awsRegion: this.store.tableDb.awsRegion,
        dynamodb: d,
      },
    }
  }

  // commit writes itemOps (the item's own put or del and its index entries,
  // with full LevelDB keys) together with rec, and calls cb once rec is
  // readable.
  commit (itemOps, rec, cb) {
    const ops = [ ...itemOps ]
    if (rec.stream.unsaved && this.persist) {
      delete rec.stream.unsaved
      ops.push({ type: 'put', key: META + rec.stream.arn, value: describe(rec.stream) })
    }
    if (this.persist) ops.push({ type: 'put', key: REC + rec.stream.arn + '~' + rec.record.dynamodb.SequenceNumber, value: rec.record })
    // The record as written, whatever later becomes of the item objects.
    const p = { rec, json: JSON.stringify(rec.record), cb, done: false, err: null }
    this.pending.push(p)
    this.store.db.batch(ops, err => {
      p.done = true
      p.err = err
      this.flush()
    })
  }

  flush () {
    const ready = []
    while (this.pending.length && this.pending[0].done) ready.push(this.pending.shift())
    for (const p of ready) if (!p.err) p.rec.stream.records.push(kept(p.rec.record, p.json))
    for (const p of ready) p.cb(p.err)
  }

  trim () {
    const cutoff = (Date.now() - RETENTION_MS) / 1000, dels = []
    for (const s of this.byArn.values()) {
      let n = 0
      while (n < s.records.length && (s.records.length - n > MAX_RECORDS || s.records[n].at < cutoff)) n++
      if (n) {
        s.trimmed = s.records[n - 1].seq
        for (const r of s.records.splice(0, n)) dels.push(REC + s.arn + '~' + r.seq)
      }
      if (s.status === 'DISABLED' && !s.records.length && s.disabledAt < cutoff) {
        this.byArn.delete(s.arn)
        dels.push(META + s.arn)
      }
    }
    if (this.persist && dels.length) {
      this.store.db.batch(dels.map(key => ({ type: 'del', key })), err => {
        if (err && !/Database is (not open|closed)/.test(err)) console.error('shim: trimming streams:', err)
      })
    }
  }

  // The Streams API. Each takes the request body and returns the answer or
  // throws an error with statusCode and body, as dynalite's actions do.

  ListStreams (data) {
    const limit = this.limit(data, 100)
    let list = [ ...this.byArn.values() ]
      .filter(s => data.TableName == null || s.tableName === data.TableName)
      .sort((a, b) => cmp(a.tableName, b.tableName) || cmp(a.label, b.label))
    if (data.ExclusiveStartStreamArn != null) {
      list = list.slice(list.findIndex(s => s.arn === data.ExclusiveStartStreamArn) + 1)
    }
    const out = { Streams: list.slice(0, limit).map(s => ({ StreamArn: s.arn, TableName: s.tableName, StreamLabel: s.label })) }
    if (list.length > limit) out.LastEvaluatedStreamArn = out.Streams[limit - 1].StreamArn
    return out
  }

  DescribeStream (data) {
    const s = this.stream(data.StreamArn)
    this.limit(data, 100)
    const range = { StartingSequenceNumber: s.start }
    if (s.end) range.EndingSequenceNumber = s.end
    // The one shard has no parent and no children.
    const shards = data.ExclusiveStartShardId === s.shardId || data.ShardFilter ? [] :
      [ { ShardId: s.shardId, SequenceNumberRange: range } ]
    return {
      StreamDescription: {
        StreamArn: s.arn,
        StreamLabel: s.label,
        StreamStatus: s.status,
        StreamViewType: s.viewType,
        CreationRequestDateTime: s.created,
        TableName: s.tableName,
        KeySchema: s.keySchema,
        Shards: shards,
      },
    }
  }

  GetShardIterator (data) {
    const s = this.stream(data.StreamArn)
    if (data.ShardId !== s.shardId) throw notFound('Requested resource not found: Shard does not exist')
    let pos, incl = false
    switch (data.ShardIteratorType) {
    case 'TRIM_HORIZON':
      pos = ''
      break
    case 'LATEST':
      pos = s.records.length ? s.records[s.records.length - 1].seq : s.start
      break
    case 'AT_SEQUENCE_NUMBER':
    case 'AFTER_SEQUENCE_NUMBER':
      incl = data.ShardIteratorType === 'AT_SEQUENCE_NUMBER'
      pos = this.seqArg(data.SequenceNumber, s)
      if (s.trimmed && (incl ? pos <= s.trimmed : pos < s.trimmed)) {
        throw awsError('TrimmedDataAccessException', 'The sequence number ' + data.SequenceNumber + ' is beyond the trim horizon')
      }
      break
    default:
      throw this.db.validationError('1 validation error detected: Value \'' + data.ShardIteratorType +
        '\' at \'shardIteratorType\' failed to satisfy constraint: Member must satisfy enum value set: ' +
        '[TRIM_HORIZON, LATEST, AT_SEQUENCE_NUMBER, AFTER_SEQUENCE_NUMBER]')
    }
    return { ShardIterator: iterator({ a: s.arn, h: s.shardId, p: pos, i: incl }) }
  }

  GetRecords (data) {
    let it
    try {
      it = JSON.parse(Buffer.from(String(data.ShardIterator), 'base64url').toString())
      if (typeof it.a !== 'string' || typeof it.p !== 'string' || typeof it.t !== 'number') throw new Error()
    }
    catch {
      throw this.db.validationError('Invalid ShardIterator')
    }
    if (Date.now() - it.t > ITERATOR_TTL_MS) throw awsError('ExpiredIteratorException', 'Iterator expired')
    const s = this.stream(it.a)
    const limit = this.limit(data, 1000)
    if (it.p && s.trimmed && (it.i ? it.p <= s.trimmed : it.p < s.trimmed)) {
      throw awsError('TrimmedDataAccessException', 'The iterator points past the trim horizon')
    }
    const recs = s.records
    let i = it.p === '' ? 0 : lowerBound(recs, it.p, it.i), size = 0
    const out = []
    while (i < recs.length && out.length < limit && size < MAX_BATCH_BYTES) {
      out.push(recs[i].json)
      size += recs[i++].size
    }
    let body = '{"Records":[' + out.join(',') + ']'
    // A closed shard read to its end has no next iterator; an open one always has.
    if (!(s.end && i >= recs.length)) {
      const next = out.length ? iterator({ a: s.arn, h: s.shardId, p: recs[i - 1].seq, i: false }) : iterator(it)
      body += ',"NextShardIterator":' + JSON.stringify(next)
    }
    return new RawJSON(body + '}')
  }

  stream (arn) {
    const s = typeof arn === 'string' && this.byArn.get(arn)
    if (!s) throw notFound('Requested resource not found: Stream: ' + arn + ' not found')
    return s
  }

  limit (data, max) {
    if (data.Limit == null) return max
    if (!Number.isInteger(data.Limit) || data.Limit < 1 || data.Limit > max) {
      throw this.db.validationError('1 validation error detected: Value \'' + data.Limit +
        '\' at \'limit\' failed to satisfy constraint: Member must have value between 1 and ' + max)
    }
    return data.Limit
  }

  seqArg (seq, s) {
    const digits = typeof seq === 'string' && /^\d{1,40}$/.test(seq) ? seq.replace(/^0+(?=\d)/, '') : null
    if (digits == null || digits.length > SEQ_WIDTH) throw this.db.validationError('Invalid SequenceNumber: ' + seq)
    const pos = digits.padStart(SEQ_WIDTH, '0')
    if (pos < s.start || (s.end && pos > s.end)) {
      throw this.db.validationError('Invalid SequenceNumber ' + seq + ' for shard ' + s.shardId)
    }
    return pos
  }
}

Streams.VIEW_TYPES = VIEW_TYPES

// describe is what is kept of a stream on disk: all but its records.
function describe (s) {
  const { records, trimmed, unsaved, ...rest } = s // eslint-disable-line no-unused-vars
  return rest
}

// kept is what a stream holds of a record in memory: its JSON text, and
// what trimming and reading look up without parsing it.
function kept (record, json) {
  const d = record.dynamodb
  return { seq: d.SequenceNumber, at: d.ApproximateCreationDateTime, size: d.SizeBytes, json }
}

function iterator (it) {
  return Buffer.from(JSON.stringify({ a: it.a, h: it.h, p: it.p, i: it.i, t: Date.now() })).toString('base64url')
}

// lowerBound is the index of the first record at (inclusive) or after seq.
function lowerBound (recs, seq, inclusive) {
  let lo = 0, hi = recs.length
  while (lo < hi) {
    const mid = (lo + hi) >> 1, s = recs[mid].seq
    if (s < seq || (!inclusive && s === seq)) lo = mid + 1
    else hi = mid
  }
  return lo
}

function cmp (a, b) {
  return a < b ? -1 : a > b ? 1 : 0
}

function awsError (type, message) {
  const err = new Error(message)
  err.statusCode = 400
  err.body = { __type: 'com.amazonaws.dynamodb.v20120810#' + type, message }
  return err
}

function notFound (message) {
  return awsError('ResourceNotFoundException', message)
}

// sameItem tells whether DynamoDB holds two items equal: the same
// attributes with equal values (sets in any order, numbers in any
// notation). Most writes change something, and the first difference ends
// the comparison.
function sameItem (a, b, Big) {
  const keys = Object.keys(a)
  if (keys.length !== Object.keys(b).length) return false
  for (const k of keys) {
    if (!Object.prototype.hasOwnProperty.call(b, k) || !sameValue(a[k], b[k], Big)) return false
  }
  return true
}

function sameValue (v, w, Big) {
  const type = Object.keys(v)[0]
  if (Object.keys(w)[0] !== type) return false
  const x = v[type], y = w[type]
  switch (type) {
  case 'N': return x === y || new Big(x).eq(new Big(y))
  case 'NS': return x.length === y.length && sameStrings(x.map(n => new Big(n).toString()), y.map(n => new Big(n).toString()))
  case 'SS':
  case 'BS': return x.length === y.length && sameStrings(x, y)
  case 'M': return sameItem(x, y, Big)
  case 'L': return x.length === y.length && x.every((e, i) => sameValue(e, y[i], Big))
  default: return x === y
  }
}

// sameStrings tells whether two lists of strings hold the same set.
function sameStrings (xs, ys) {
  const set = new Set(xs)
  return ys.every(y => set.has(y))
}

// RawJSON is an answer already serialized: the shim sends its text as it is.
class RawJSON {
  constructor (text) { this.text = text }
}

module.exports = { Streams, awsError, RawJSON }
