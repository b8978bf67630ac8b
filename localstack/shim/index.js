// A shim that makes dynalite 4.0.0 behave like DynamoDB where this project's
// correctness depends on it. server.js calls install() before dynalite's CLI
// loads; install patches dynalite's modules in place (and in the require
// cache), so the pinned package itself stays untouched. What changes:
//
//  1. ReturnValuesOnConditionCheckFailure. dynalite drops the field in its
//     validation tables; it is accepted again on PutItem, UpdateItem and
//     DeleteItem (ALL_OLD or NONE; anything else is a ValidationException, as
//     on AWS), and a failed condition with ALL_OLD carries the existing item
//     in the error body ("Item"), which the SDK exposes as
//     ConditionalCheckFailedException.Item. BatchWriteItem has no conditions.
//
//  2. Index lag (indexlag.js): GSIs can trail the table by a configurable
//     delay, per table at run time, so tests see the eventual consistency
//     that DynamoDB has and dynalite lacks.
//
//  3. DynamoDB Streams (streams.js): StreamSpecification on CreateTable and
//     UpdateTable, LatestStreamArn/LatestStreamLabel in the table
//     description, a record for every write, and the Streams API.
//
//  5. Expression parsing in linear time (pegmemo.js): dynalite's generated
//     parsers are memoized, as PEG.js's --cache makes them; without it a
//     condition's parse time doubles with each level of its nesting. And
//     an expression sent again with new values is not parsed again
//     (parsecache.js): its kept parse gets the request's values.
//
//  4. Capacity (meter.js): ReturnConsumedCapacity TOTAL and INDEXES answered
//     as DynamoDB bills (item sizes by AWS's rules, index writes by
//     projection, failed conditions, read rounding), and running totals by
//     table, index and partition-key value, read and reset by table prefix.
//     Index writes are billed when the table is written, whatever the lag.
//
//  6. Comparisons with a missing operand (missing.js): in a condition or a
//     filter, =, <, <=, >, >=, BETWEEN and IN are false when an operand
//     names an attribute the item lacks, as on DynamoDB; dynalite held two
//     missing attributes equal (a >= b true) and threw on some others.
//
//  7. Index entries stored with their items (indexes.js): a write's
//     secondary-index entries are in the LevelDB batch of its item and
//     stream record, so a kill -9 keeps all or none of them; and a server
//     started on a data directory repairs every table's indexes from its
//     items before it answers (for what a lag held in memory, or older data).
//
//  8. SET operands read on the item as it was (setcopy.js): SET a = b with
//     ADD b in the same update left a with b's new value.
//
//  9. Request type checks with a direct path (fasttypes.js): well-formed
//     AttributeValues, strings and booleans are checked and copied without
//     dynalite's generic checkType, about a tenth of the server's CPU;
//     anything else still goes through it, so answers are unchanged.
//
// 10. Reads close their iterators (closeIterators): a Query, Scan or
//     DeleteTable no longer leaves one open, which kept the database as it
//     was when the read started and made memory grow with every read.
//
// 11. Refusals DynamoDB makes and dynalite did not (fidelity.js): a Scan of
//     a global secondary index with ConsistentRead; DeleteItem's
//     ReturnValues other than NONE and ALL_OLD; an empty String or Binary
//     as a secondary index's key, in a put or in the item an update makes;
//     an item over 400 KB in UTF-8 bytes (dynalite counted UTF-16 units);
//     an ADD, + or - whose result is beyond DynamoDB's Number range. And
//     comparisons as DynamoDB makes them: Maps and Lists equal by value;
//     IN, BETWEEN and attribute_type on a false or empty value.
//
// How: every write in dynalite passes the item's old and new image through
// db.updateIndexes and then stores the item with one itemDb.put or del.
// PutItem, UpdateItem and DeleteItem (which BatchWriteItem reuses) are run
// with a per-request view of the store on which updateIndexes notes the
// images and plans the index entries instead of writing them, and the
// item's put/del becomes one LevelDB batch with the entries and the stream
// record.
//
// Requests whose X-Amz-Target is DynamoDBStreams_20120810.* or DynamoDBShim.*
// are answered here; everything else goes to dynalite unchanged.
'use strict'

const path = require('path')
const crypto = require('crypto')
const { IndexLag, parseDuration } = require('./indexlag')
const { Streams, RawJSON } = require('./streams')
const { repair, itemPrefix } = require('./indexes')
const meter = require('./meter')
const { guardMissing } = require('./missing')

const DIR = path.dirname(require.resolve('dynalite/package.json'))
const dep = name => require(require.resolve(name, { paths: [ DIR ] }))
const SHIM = Symbol('shim') // store[SHIM] = { lag, streams }
const CHANGE = Symbol('change') // on a per-request store: what updateIndexes saw
const INDEXES = Symbol('indexes') // on a per-request store: its index entries' plan (IndexLag.plan)
const TABLE = Symbol('table') // on a per-request store: the table it used
const READ = Symbol('read') // on a per-request read store: the items and entries it read
// The item a write's condition failed on, by request (null: there was none).
const failedOn = new WeakMap()
const STREAMS_API = 'DynamoDBStreams_20120810', SHIM_API = 'DynamoDBShim'

function dynalite (rel) {
  return require(path.join(DIR, rel))
}

// replace swaps a dynalite module's exports before anything else requires it.
function replace (rel, wrap) {
  const file = require.resolve(path.join(DIR, rel)), orig = require(file)
  require.cache[file].exports = wrap(orig)
}

// install patches dynalite; argv is the command line as dynalite's CLI reads it.
exports.install = function install (argv = dep('minimist')(process.argv.slice(2))) {
  // 5. Before anything of dynalite's requires the parsers.
  for (const parser of [ 'conditionParser', 'updateParser', 'projectionParser' ]) {
    const file = require.resolve(path.join(DIR, 'db', parser))
    if (require.cache[file]) continue
    require('./pegmemo').install(file)
    require.cache[file].exports = require('./parsecache').cached(require.cache[file].exports)
  }
  // 11. dynalite's comparisons fixed (fidelity.js), before anything requires db.
  const dbFile = require.resolve(path.join(DIR, 'db'))
  if (!require.cache[dbFile]) require('./setcopy').compile(dbFile, require('./fidelity').patchDb)
  // 8. SET values read before the update, as copies (setcopy.js).
  const updateItem = require.resolve(path.join(DIR, 'actions', 'updateItem'))
  // And 11: the checks of the item an update makes (fidelity.js).
  if (!require.cache[updateItem]) require('./setcopy').install(updateItem, require('./fidelity').patchUpdateItem)
  // 9. After 5: dynalite's validations require the parsers.
  require('./fasttypes').install(dynalite('validations'))
  // 11. Refusals DynamoDB makes (fidelity.js).
  require('./fidelity').install(dynalite)
  const defaultLag = parseDuration(argv['index-lag'] != null ? argv['index-lag'] : process.env.DYNALITE_INDEX_LAG)
  if (!(defaultLag >= 0)) throw new Error('--index-lag / DYNALITE_INDEX_LAG: not a duration: ' + (argv['index-lag'] || process.env.DYNALITE_INDEX_LAG))

  const db = dynalite('db')
  const Big = dep('big.js')
  const crc32 = dep('buffer-crc32')

  // 1. ReturnValuesOnConditionCheckFailure: keep the field, attach the item.
  for (const action of [ 'putItem', 'updateItem', 'deleteItem' ]) {
    dynalite('validations/' + action).types.ReturnValuesOnConditionCheckFailure = { type: 'String', enum: [ 'ALL_OLD', 'NONE' ] }
  }
  // And 6: the condition is judged with its comparisons guarded against
  // missing operands, on a copy of the request (failedOn keeps the request).
  const checkConditional = db.checkConditional
  db.checkConditional = function (data, existingItem) {
    const judged = data && data._condition ? { ...data, _condition: guardMissing(data._condition) } : data
    const err = checkConditional.call(this, judged, existingItem)
    if (err && data && typeof data === 'object') failedOn.set(data, existingItem || null)
    if (err && err.body && existingItem && data.ReturnValuesOnConditionCheckFailure === 'ALL_OLD') err.body.Item = existingItem
    return err
  }

  // 6. And so are filters (Query and Scan, of a table or an index).
  const queryTable = db.queryTable
  db.queryTable = function (store, table, data, ...rest) {
    if (data._filter) data = { ...data, _filter: guardMissing(data._filter) }
    return queryTable.call(this, store, table, data, ...rest)
  }

  // 3. StreamSpecification on CreateTable and UpdateTable.
  const streamSpec = {
    type: 'FieldStruct<StreamSpecification>',
    children: {
      StreamEnabled: { type: 'Boolean', notNull: true },
      StreamViewType: { type: 'String', enum: Streams.VIEW_TYPES },
    },
  }
  const checkSpec = spec => spec && spec.StreamEnabled && !spec.StreamViewType ?
    'One or more parameter values were invalid: StreamViewType is required when StreamEnabled is true' : undefined
  const createV = dynalite('validations/createTable'), createCustom = createV.custom
  createV.types.StreamSpecification = streamSpec
  createV.custom = function (data) {
    return createCustom.apply(this, arguments) || checkSpec(data.StreamSpecification)
  }
  const updateV = dynalite('validations/updateTable'), updateCustom = updateV.custom
  updateV.types.StreamSpecification = streamSpec
  updateV.custom = function (data) {
    if (data.StreamSpecification && !otherTableUpdates(data)) return checkSpec(data.StreamSpecification)
    return updateCustom.apply(this, arguments) || checkSpec(data.StreamSpecification)
  }

  // 2 and 3. Each store gets its lag queues and its streams; every index
  // update goes through the lag, and a per-request store notes the change.
  const create = db.create, updateIndexes = db.updateIndexes
  let store
  db.create = function (options) {
    store = create.apply(this, arguments)
    closeIterators(store.db)
    const deps = { db, Big, updateIndexes }
    store[SHIM] = { lag: new IndexLag(store, defaultLag, deps), streams: new Streams(store, deps), meter: new meter.Meter(db) }
    const deleteItemDb = store.deleteItemDb
    store.deleteItemDb = function (name) { // DeleteTable, before it deletes anything
      store[SHIM].lag.dropTable(name)
      return deleteItemDb.apply(this, arguments)
    }
    return store
  }
  db.updateIndexes = function (s, table, oldItem, newItem, cb) {
    if (Object.prototype.hasOwnProperty.call(s, CHANGE)) {
      // A write on a per-request store: its index entries go into the
      // batch that stores the item (or, under a lag, to the queue after it).
      s[CHANGE] = { table, oldItem, newItem }
      s[INDEXES] = s[SHIM].lag.plan(table, oldItem, newItem)
      return cb()
    }
    if (!s[SHIM]) return updateIndexes.apply(this, arguments)
    s[SHIM].lag.update(s, table, oldItem, newItem, cb)
  }

  // 3 and 4. Writes run on a per-request store whose item put or delete
  // carries the stream record, and are metered once they are done. putItem
  // and deleteItem are replaced before batchWriteItem requires them, so
  // batches are recorded and metered too; getItem before batchGetItem; all
  // of them before index.js loads the actions.
  for (const action of [ 'putItem', 'updateItem', 'deleteItem' ]) {
    replace('actions/' + action, run => function (s, data, cb) {
      const t = tracked(s)
      return run(t, data, (err, res) => {
        let usage
        if (!err && t[CHANGE]) usage = meter.writeUsage(t[CHANGE].table, t[CHANGE].oldItem, t[CHANGE].newItem, data.Item || data.Key)
        else if (err && failedOn.has(data) && t[TABLE] && /ConditionalCheckFailed/.test(err.body && err.body.__type)) {
          usage = meter.failedWriteUsage(t[TABLE], data.Item || data.Key, failedOn.get(data))
        }
        report(s, data, usage, false, err, res, cb)
      })
    })
  }

  // 4. Reads run on a per-request store that notes what they read.
  replace('actions/getItem', run => function (s, data, cb) {
    const t = reading(s)
    return run(t, data, (err, res) => {
      const usage = !err && t[TABLE] ? meter.getUsage(t[TABLE], data.Key, t[READ][0], data.ConsistentRead) : undefined
      report(s, data, usage, true, err, res, cb)
    })
  })
  for (const action of [ 'query', 'scan' ]) {
    replace('actions/' + action, run => function (s, data, cb) {
      const t = reading(s)
      return run(t, data, (err, res) => {
        let usage
        if (!err && t[TABLE]) {
          const table = t[TABLE], gsi = (table.GlobalSecondaryIndexes || []).find(ix => ix.IndexName === data.IndexName)
          const lsi = (table.LocalSecondaryIndexes || []).find(ix => ix.IndexName === data.IndexName)
          const ks = (gsi || lsi || table).KeySchema
          const cond = action === 'query' && data.KeyConditions && data.KeyConditions[ks[0].AttributeName]
          const key = cond ? { [ks[0].AttributeName]: cond.AttributeValueList[0] } : null
          // Only the items counted in ScannedCount were read; a stream may
          // have run ahead of the Limit.
          const items = t[READ].slice(0, res.ScannedCount != null ? res.ScannedCount : t[READ].length)
          usage = meter.queryUsage(table, gsi || lsi ? data.IndexName : '', key ? String(Object.values(key[ks[0].AttributeName])[0]) : '', items, data.ConsistentRead)
        }
        report(s, data, usage, true, err, res, cb)
      })
    })
  }
  for (const action of [ 'batchWriteItem', 'batchGetItem' ]) {
    replace('actions/' + action, run => function (s, data, cb) {
      // The batch passes ReturnConsumedCapacity on to each put, delete or
      // get it makes: a Collector there gathers their usage.
      const mode = data.ReturnConsumedCapacity, col = new meter.Collector()
      data.ReturnConsumedCapacity = col
      return run(s, data, (err, res) => {
        data.ReturnConsumedCapacity = mode
        if (res) {
          delete res.ConsumedCapacity
          const consumed = col.consumed(mode)
          if (consumed) res.ConsumedCapacity = consumed
        }
        cb(err, res)
      })
    })
  }

  // report records usage in the totals and answers ConsumedCapacity as the
  // request asked for it (a failed request carries none).
  function report (s, data, usage, isRead, err, res, cb) {
    if (usage) s[SHIM].meter.record(usage, isRead)
    const mode = data.ReturnConsumedCapacity
    if (usage && mode instanceof meter.Collector) mode.add(usage)
    if (!err && res) {
      delete res.ConsumedCapacity
      const consumed = usage && usage.consumed(mode)
      if (consumed) res.ConsumedCapacity = consumed
    }
    cb(err, res)
  }

  replace('actions/createTable', run => function (s, data, cb) {
    const spec = data.StreamSpecification
    if (!spec || !spec.StreamEnabled) {
      delete data.StreamSpecification
      return run(s, data, cb)
    }
    s[SHIM].streams.enable(data, spec.StreamViewType)
    run(s, data, (err, res) => {
      if (err) return cb(err)
      s[SHIM].streams.register(res.TableDescription, err => cb(err, res))
    })
  })

  replace('actions/deleteTable', run => function (s, data, cb) {
    run(s, data, (err, res) => {
      if (err) return cb(err)
      s[SHIM].streams.disable(data.TableName, err => cb(err, res))
    })
  })

  replace('actions/updateTable', run => function (s, data, cb) {
    const spec = data.StreamSpecification
    if (!spec) return run(s, data, cb)
    delete data.StreamSpecification
    updateStream(s, data.TableName, spec, (err, res) => {
      if (err || !otherTableUpdates(data)) return cb(err, res)
      run(s, data, cb)
    })
  })

  function updateStream (s, name, spec, cb) {
    s.tableDb.lock(name, release => {
      cb = release(cb)
      s.getTable(name, false, (err, table) => {
        if (err) return cb(err)
        if (table.TableStatus !== 'ACTIVE') {
          return cb(inUse('Attempt to change a resource which is still in use: Table is being ' + table.TableStatus.toLowerCase() + ': ' + name))
        }
        const invalid = s[SHIM].streams.updateTable(table, spec)
        if (invalid) return cb(invalid)
        s.tableDb.put(name, table, err => {
          if (err) return cb(err)
          const done = err => cb(err, { TableDescription: table })
          if (spec.StreamEnabled) s[SHIM].streams.register(table, done)
          else s[SHIM].streams.disable(name, done)
        })
      })
    })
  }

  // The HTTP server: answer the Streams API and the shim's own actions, and
  // hold every request until the streams kept on disk are loaded.
  replace('index.js', make => function (options) {
    const server = make.apply(this, arguments)
    // Keep idle connections open longer than clients keep them (Go's
    // default transport: 90 s). With Node's 5 s, a request sent on a
    // pooled connection just as the server closed it failed, and the SDK
    // sent it again: a write or read the server had already done was
    // done, and billed, twice.
    server.keepAliveTimeout = 120 * 1000
    server.headersTimeout = 125 * 1000
    const s = store
    const dynaliteHandler = server.listeners('request')[0]
    server.removeAllListeners('request')
    // With --path, the streams are loaded and the indexes repaired first.
    let loaded = false
    const ready = s[SHIM].streams.load().then(() => s.options.path && repair(s, db)).then(() => { loaded = true }, err => {
      console.error('shim: cannot load streams or repair indexes:', err)
      process.exit(1)
    })
    server.on('request', (req, res) => {
      const [ api, op ] = String(req.headers['x-amz-target'] || '').split('.')
      if (api !== STREAMS_API && api !== SHIM_API) {
        if (loaded) return dynaliteHandler(req, res)
        return ready.then(() => dynaliteHandler(req, res))
      }
      readJson(req, (err, data) => ready.then(() => {
        if (!err) {
          const target = api === STREAMS_API ? s[SHIM].streams : op === 'SetIndexLag' || op === 'IndexLagPending' ? s[SHIM].lag
            : op === 'ProcessUsage' ? usage : s[SHIM].meter
          const fn = (api === SHIM_API ? [ 'SetIndexLag', 'IndexLagPending', 'ReadCapacity', 'ResetCapacity', 'ProcessUsage' ] :
            [ 'ListStreams', 'DescribeStream', 'GetShardIterator', 'GetRecords' ]).includes(op) && target[op]
          try {
            if (!fn) throw coralError('UnknownOperationException')
            return send(res, 200, fn.call(target, data))
          }
          catch (e) {
            err = e
          }
        }
        if (!err.statusCode) console.error('shim:', err)
        send(res, err.statusCode || 500, err.body ||
          { __type: 'com.amazonaws.dynamodb.v20120810#InternalServerError', message: 'Internal server error' })
      }))
    })
    if (s.options.path) {
      // Apply queued index entries before a graceful stop; the data outlives us.
      for (const sig of [ 'SIGTERM', 'SIGINT' ]) {
        process.once(sig, () => s[SHIM].lag.flush(2000, () => process.kill(process.pid, sig)))
      }
    }
    return server
  })

  // ProcessUsage answers the CPU time this server has used so far, so that a
  // benchmark can tell what each of its scenarios cost the server.
  const usage = {
    ProcessUsage () {
      const { user, system } = process.cpuUsage()
      return { UserMicros: user, SystemMicros: system }
    },
  }

  function send (res, status, data) {
    const body = data instanceof RawJSON ? data.text : JSON.stringify(data)
    res.statusCode = status
    res.setHeader('x-amzn-RequestId', crypto.randomBytes(39).toString('base64').toUpperCase().replace(/\+|\//g, '0'))
    res.setHeader('x-amz-crc32', crc32.unsigned(body))
    res.setHeader('Content-Type', 'application/x-amz-json-1.0')
    res.setHeader('Content-Length', Buffer.byteLength(body))
    res.end(body)
  }
}

// tracked returns a view of store for one write: updateIndexes notes the
// old and new item on it and plans the index entries, and the item's put or
// del becomes one LevelDB batch with those entries and its stream record.
function tracked (store) {
  const s = Object.create(store)
  s[CHANGE] = null
  s[INDEXES] = null
  noteTable(s, store)
  s.getItemDb = function (name) {
    const itemDb = store.getItemDb(name), view = Object.create(itemDb)
    const commit = (key, item, cb) => {
      const { streams, lag } = store[SHIM], plan = s[INDEXES]
      const ops = [ item ? { type: 'put', key: itemPrefix(name) + key, value: item } : { type: 'del', key: itemPrefix(name) + key } ]
      if (plan) ops.push(...plan.ops)
      const done = err => {
        if (!err && plan) lag.written(plan)
        cb(err)
      }
      const rec = s[CHANGE] && streams.recordFor(s[CHANGE])
      if (rec) streams.commit(ops, rec, done)
      else store.db.batch(ops, done)
    }
    view.put = (key, item, cb) => commit(key, item, cb)
    view.del = (key, cb) => commit(key, null, cb)
    return view
  }
  return s
}

// closeIterators gives level (the store's database) key and value streams
// that close their iterator once they end, fail or are destroyed (a Query
// stopped by its Limit). dynalite's own close it with iterator.return(),
// which level's iterators lack, so every Query, Scan and DeleteTable left
// one open; and an open iterator keeps the database as it was when it
// started (in memory, that version of the tree and every value in it; on
// disk, a LevelDB snapshot): memory grew with every read.
function closeIterators (level) {
  const { Readable } = require('stream')
  const stream = iterator => new Readable({
    objectMode: true,
    read () {
      iterator.next().then(value => this.push(value === undefined ? null : value), err => this.destroy(err))
    },
    destroy (err, cb) {
      iterator.close().then(() => cb(err), closeErr => cb(err || closeErr))
    },
  })
  level.createKeyStream = options => stream(level.keys(options))
  level.createValueStream = options => stream(level.values(options))
}

// noteTable makes s (a view of store) note the table a request uses.
function noteTable (s, store) {
  s[TABLE] = null
  s.getTable = function (...args) {
    const cb = args.pop()
    return store.getTable(...args, (err, table) => {
      if (table) s[TABLE] = table
      cb(err, table)
    })
  }
}

// reading returns a view of store for one read: every item or index entry
// it reads, in order, is noted in s[READ].
function reading (store) {
  const s = Object.create(store)
  s[READ] = []
  noteTable(s, store)
  const tap = db => {
    const view = Object.create(db)
    view.get = (key, cb) => db.get(key, (err, item) => {
      if (!err && item) s[READ].push(item)
      cb(err, item)
    })
    view.createValueStream = opts => {
      const st = db.createValueStream(opts)
      st.on('data', item => s[READ].push(item))
      return st
    }
    return view
  }
  s.getItemDb = name => tap(store.getItemDb(name))
  s.getIndexDb = (...args) => tap(store.getIndexDb(...args))
  return s
}

function otherTableUpdates (data) {
  return !!(data.ProvisionedThroughput || data.BillingMode || data.SSESpecification ||
    (data.GlobalSecondaryIndexUpdates && data.GlobalSecondaryIndexUpdates.length))
}

function readJson (req, cb) {
  const chunks = []
  let size = 0
  req.on('error', () => {}) // a client gone mid-request has nobody to answer
  req.on('data', c => {
    size += c.length
    if (size <= 16 << 20) chunks.push(c)
  })
  req.on('end', () => {
    let data
    try {
      data = JSON.parse(Buffer.concat(chunks).toString() || '{}')
    }
    catch {
      return cb(coralError('SerializationException'))
    }
    if (size > 16 << 20 || !data || typeof data !== 'object' || Array.isArray(data)) return cb(coralError('SerializationException'))
    cb(null, data)
  })
}

function coralError (type) {
  const err = new Error(type)
  err.statusCode = 400
  err.body = { __type: 'com.amazon.coral.service#' + type }
  return err
}

function inUse (message) {
  const err = new Error(message)
  err.statusCode = 400
  err.body = { __type: 'com.amazonaws.dynamodb.v20120810#ResourceInUseException', message }
  return err
}
