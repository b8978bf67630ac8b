// Refusals DynamoDB makes and dynalite did not, where a product bug could
// otherwise pass locally and fail in AWS. Each is cheap: it looks at the
// request's own item or fields only.
//
//  a. Scan's ConsistentRead (API reference, Scan): dynalite's Scan type
//     table lacked the field, so its type check dropped it: a Scan of a
//     global secondary index with ConsistentRead true was answered (DynamoDB:
//     ValidationException "Consistent reads are not supported on global
//     secondary indexes"; dynalite's scan.js has that check, it never saw
//     the field), and a consistent Scan was billed as an eventual one.
//
//  b. DeleteItem's ReturnValues (API reference, DeleteItem): "DeleteItem
//     does not recognize any values other than NONE or ALL_OLD". dynalite's
//     type table took all five; UPDATED_OLD answered like ALL_OLD. It
//     refused the others on PutItem already; DeleteItem now does the same,
//     with PutItem's message.
//
//  c. Empty index keys (API reference, PutItem, UpdateItem, BatchWriteItem;
//     "DynamoDB now supports empty values for non-key String and Binary
//     attributes"): a String or Binary attribute that keys a global or
//     local secondary index cannot be empty. dynalite refused empty table
//     keys only. A PutItem or a BatchWriteItem's put is judged on its item
//     before anything else (db.validateItem, which a batch runs on every put
//     before writing any, so the batch is refused whole, as on AWS); an
//     UpdateItem on the item it makes (patchUpdateItem: an empty value can
//     come from an attribute or if_not_exists as well as from a literal),
//     after its condition. The messages are the ones AWS is reported to
//     give, for a written item and for an update.
//
//  d. The 400 KB item size limit ("DynamoDB item sizes and formats"): a
//     string and an attribute name count their UTF-8 bytes. dynalite's
//     db.itemSize counted UTF-16 code units (a JavaScript string's length),
//     so an item of multibyte text up to three times too large was stored.
//     Its callers outside db (the limit in PutItem, BatchWriteItem and
//     UpdateItem, and BatchGetItem's 1 MB answer) size items with the
//     meter's itemSize (meter.js), which follows AWS's rules; db's own
//     uses (its capacity and Query/Scan page sizes) are left as they were.
//
//  e. Numbers made by an update (API reference, AttributeValue N: 38 digits
//     of precision, magnitude 1E-130 to 9.9999999999999999999999999999999999999E+125):
//     dynalite checked the request's numbers, but stored whatever ADD, + or
//     - made of them. DynamoDB refuses a result beyond the range ("Number
//     overflow. Attempting to store a number with magnitude larger than
//     supported range"), and one that needs more than 38 digits (1E+50 + 1)
//     with the same message, as other emulators checked against AWS report.
//     A non-zero result below 1E-130 is refused with dynalite's message for
//     such an input (AWS's for this case is not documented). patchUpdateItem
//     checks the three sums and differences of updateItem.js where they are
//     made: a few field reads of the result each, nothing per item.
//
//  f. Comparisons in conditions and filters (API reference, Condition: "EQ
//     is supported for all data types, including lists and maps", NE
//     likewise): dynalite's valsEqual compared a Map by reference (two
//     equal maps were never =, always <>) and a List as a set of element
//     references. Now a Map is equal to one with the same names and equal
//     values, a List to one with equal elements in the same order (sets
//     stay unordered, numbers compare by value). And IN, BETWEEN and
//     attribute_type took an attribute whose value is false or empty ("",
//     an empty binary) for a missing one: x IN (:false) was false on an
//     item whose x is false. patchDb fixes both in db/index.js's source;
//     the work is proportional to the values compared.
'use strict'

const meter = require('./meter')

// patchUpdateItem returns the source of dynalite's actions/updateItem.js
// with the checks of the item an update makes (c); setcopy.js compiles it.
const UPDATED = '        if (db.itemSize(item) > store.options.maxItemSize)'
// And the numbers it makes (e): each sum or difference is checked before
// it is stored; the functions return a validation error (or, resolveValue,
// its text) as they do for their own errors.
const ARITHMETIC = [
  [ '        item[attr].N = new Big(item[attr].N).plus(update.Value.N).toFixed()\n',
    '        var sum = new Big(item[attr].N).plus(update.Value.N), range = db.numberRangeError(sum)\n' +
    '        if (range) return db.validationError(range)\n' +
    '        item[attr].N = sum.toFixed()\n' ],
  [ '        existing.N = new Big(existing.N).plus(section.val.N).toFixed()\n',
    '        var sum = new Big(existing.N).plus(section.val.N), range = db.numberRangeError(sum)\n' +
    '        if (range) return db.validationError(range)\n' +
    '        existing.N = sum.toFixed()\n' ],
  [ "    val = { N: new Big(val1.N)[val.type == 'add' ? 'plus' : 'minus'](val2.N).toFixed() }\n",
    "    var num = new Big(val1.N)[val.type == 'add' ? 'plus' : 'minus'](val2.N), range = db.numberRangeError(num)\n" +
    '    if (range) return range\n' +
    '    val = { N: num.toFixed() }\n' ],
]
function patchUpdateItem (src) {
  return patchAll(src, [ [ UPDATED, '        err = db.validateUpdatedItem(item, table)\n        if (err) return cb(err)\n\n' + UPDATED ], ...ARITHMETIC ])
}

// patchDb returns the source of dynalite's db/index.js with its
// comparisons fixed (f); index.js compiles it before anything requires db.
const DB_PATCHES = [
  [ `function valsEqual (val1, val2) {
  if (Array.isArray(val1) && Array.isArray(val2)) {
    if (val1.length != val2.length) return false
    return val1.every(function (val) { return ~val2.indexOf(val) })
  }
  else {
    return val1 == val2
  }
}
`, `function valsEqual (val1, val2) {
  if (Array.isArray(val1) && Array.isArray(val2)) {
    if (val1.length != val2.length) return false
    // A List (of AttributeValues), in order; a set (of strings), in any.
    if (val1.length && typeof val1[0] == 'object') return val1.every(function (val, i) { return attrValsEqual(val, val2[i]) })
    return val1.every(function (val) { return ~val2.indexOf(val) })
  }
  if (val1 != null && val2 != null && typeof val1 == 'object' && typeof val2 == 'object') { // a Map
    var names = Object.keys(val1)
    if (names.length != Object.keys(val2).length) return false
    return names.every(function (name) { return Object.prototype.hasOwnProperty.call(val2, name) && attrValsEqual(val1[name], val2[name]) })
  }
  return val1 == val2
}

// attrValsEqual tells two AttributeValues (members of a Map or a List) equal.
function attrValsEqual (a, b) {
  if (a == null || b == null) return a == b
  var type = Object.keys(a)[0]
  if (type !== Object.keys(b)[0]) return false
  return type == 'N' ? new Big(a.N).eq(b.N) : valsEqual(a[type], b[type])
}
` ],
  [ '    if (!attrVal) return false\n    if (!compVals.some(', '    if (attrVal == null) return false\n    if (!compVals.some(' ], // IN
  [ '    if (!attrVal || compType != attrType ||', '    if (attrVal == null || compType != attrType ||' ], // BETWEEN
  [ '    if (!attrVal || !valsEqual(attrType, compVal)) return false', '    if (attrVal == null || !valsEqual(attrType, compVal)) return false' ], // attribute_type
]
function patchDb (src) {
  return patchAll(src, DB_PATCHES)
}

function patchAll (src, patches) {
  for (const [ from, to ] of patches) {
    if (src.split(from).length !== 2) throw new Error('fidelity: not dynalite 4.0.0? Not found once: ' + from)
    src = src.replace(from, to)
  }
  return src
}

// numberRangeError is the text of DynamoDB's refusal of a number (a Big)
// that an update made, or undefined for one it can store.
const OVERFLOW = 'Number overflow. Attempting to store a number with magnitude larger than supported range'
const UNDERFLOW = 'Number underflow. Attempting to store a number with magnitude smaller than supported range'
function numberRangeError (big) {
  if (big.c.length === 1 && big.c[0] === 0) return // zero
  if (big.e > 125 || big.c.length > 38) return OVERFLOW
  if (big.e < -130) return UNDERFLOW
}

// emptyIndexKey is the first secondary-index key attribute of item (a
// String or a Binary) that is empty, as { attr, type, index }, or undefined.
function emptyIndexKey (db, item, table) {
  return db.traverseIndexes(table, (attr, type, index) => {
    const v = item[attr]
    if (v != null && (type === 'S' || type === 'B') && v[type] === '') return { attr, type, index }
  })
}

function emptyKeyText (k) {
  return 'The AttributeValue for a key attribute cannot contain an empty ' + (k.type === 'S' ? 'string' : 'binary') +
    ' value. IndexName: ' + k.index.IndexName + ', IndexKey: ' + k.attr
}

// install patches dynalite's modules; dynalite(rel) requires one of them.
function install (dynalite) {
  const db = dynalite('db')

  // a.
  dynalite('validations/scan').types.ConsistentRead = 'Boolean'

  // b. After dynalite's own checks, which come first on AWS too (types).
  const deleteV = dynalite('validations/deleteItem'), deleteCustom = deleteV.custom
  deleteV.custom = function (data) {
    const msg = deleteCustom.apply(this, arguments)
    if (msg) return msg
    if (data.ReturnValues && data.ReturnValues !== 'ALL_OLD' && data.ReturnValues !== 'NONE') {
      return 'ReturnValues can only be ALL_OLD or NONE'
    }
  }

  // c. Puts (PutItem, BatchWriteItem) and the item an update makes.
  const validateItem = db.validateItem
  db.validateItem = function (item, table) {
    const err = validateItem.apply(this, arguments)
    if (err) return err
    const k = emptyIndexKey(db, item, table)
    if (k) return db.validationError('One or more parameter values are not valid. A value specified for a secondary index key is not supported. ' + emptyKeyText(k))
  }
  db.validateUpdatedItem = function (item, table) {
    const k = emptyIndexKey(db, item, table)
    if (k) return db.validationError('The update expression attempted to update a secondary index key to a value that is not supported. ' + emptyKeyText(k))
  }

  // e.
  db.numberRangeError = numberRangeError

  // d. Only the one-argument calls: db's own (with compression or
  // metadata sizes) call its local itemSize, not this export, anyway.
  const itemSize = db.itemSize
  db.itemSize = function (item) {
    return arguments.length === 1 ? meter.itemSize(item) : itemSize.apply(this, arguments)
  }
}

module.exports = { install, patchUpdateItem, patchDb }

