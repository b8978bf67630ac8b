// SET values read before the update, as copies. DynamoDB evaluates every
// operand of an update expression on the item as it was, so in
//
//   SET a = if_not_exists(b, :zero)  ADD b :one
//
// a gets b's value before the ADD. dynalite resolves a SET's operands
// first, as it should, but an operand that is a plain path (or
// if_not_exists of one) resolves to b's own AttributeValue object, and the
// ADD then increments that object in place: a got b's new value. (SET
// with + or - builds a new value and was never affected.) lease keeps a
// completion's version so (end_version).
//
// install compiles dynalite's actions/updateItem.js with each resolved SET
// value copied, before anything requires it.
'use strict'

const fs = require('fs')
const path = require('path')
const Module = require('module')

const RESOLVE = 'section.val = resolveValue(section.val, item)'

function patch (src) {
  if (!src.includes(RESOLVE)) throw new Error('setcopy: resolveValue not found; not dynalite 4.0.0\'s updateItem.js?')
  return src.replace(RESOLVE, 'section.val = copyValue(resolveValue(section.val, item))') + `

// copyValue is a resolved SET value (an AttributeValue, or the text of an
// error) detached from the item it was read from.
function copyValue (val) {
  return val != null && typeof val == 'object' ? JSON.parse(JSON.stringify(val)) : val
}
`
}

// install compiles file with patch and then each of more (functions of
// the source, as patch), and puts it in the require cache.
function install (file, ...more) {
  compile(file, patch, ...more)
}

// compile compiles file with each of patches applied to its source in
// turn, and puts it in the require cache.
function compile (file, ...patches) {
  const m = new Module(file, module)
  m.filename = file
  m.paths = Module._nodeModulePaths(path.dirname(file))
  m._compile(patches.reduce((src, p) => p(src), fs.readFileSync(file, 'utf8')), file)
  m.loaded = true
  require.cache[file] = m
}

module.exports = { patch, install, compile }
