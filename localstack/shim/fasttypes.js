// A faster request type check. dynalite checks every request's JSON against
// its action's type table (validations/index.js, checkTypes) with one
// generic function: for each value it splits the type's name with a regular
// expression, builds the table of an AttributeValue's members afresh, and
// copies each object with reduce. A checkout's UpdateItem carries some
// thirty ExpressionAttributeValues and as many names, so this was about a
// tenth of the server's CPU.
//
// Here the common case takes a direct path: a string where a String
// belongs, a boolean where a Boolean does, a number where a number does
// (floored for the integer types, as dynalite does), and above all an
// AttributeValue that is a plain object with exactly one member, S or N
// (a string), BOOL or NULL (a boolean), SS or NS (an array of strings), L
// or M (of such AttributeValues), is copied as it is; so are the maps,
// lists and structures made of such values (Key, Item,
// ExpressionAttributeValues, ExpressionAttributeNames, RequestItems...).
// Anything else, anything dynalite would convert (a "true" for a Boolean),
// reject or treat specially (nulls inside maps and lists, B and BS, empty
// or two-member AttributeValues, "__proto__" keys, types not known here)
// makes the direct path give up on that top-level field of the request,
// which then goes through dynalite's own checkTypes, so that results and
// error messages are dynalite's.
//
// The direct path gives what dynalite gives: new objects and arrays (the
// input is never shared), keys in the type table's order for structures
// and in the input's order for maps, unknown and null members of
// structures deleted from the input as dynalite deletes them. Giving up
// midway leaves only deletions dynalite makes too, before any error it
// could throw, since both walk the value in the same order. TestFastTypes
// compares the two on a corpus of requests and on random ones.
'use strict'

const GIVE_UP = Symbol('give up')
const ATTRIBUTE_VALUE = 'AttrStruct<ValueStruct>'

// kinds caches a type name's split: "Map<AttributeValue>" is
// [ "Map", "AttributeValue" ], "String" is [ "String", undefined ].
const kinds = new Map()
function kindOf (name) {
  let k = kinds.get(name)
  if (k === undefined) {
    const m = /^(.+?)<(.+)>$/.exec(name)
    k = m ? [ m[1], m[2] ] : [ name, undefined ]
    kinds.set(name, k)
  }
  return k
}

// isRecord tells a plain object (as JSON.parse makes them) from anything else.
function isRecord (v) {
  return typeof v === 'object' && v !== null && Object.getPrototypeOf(v) === Object.prototype
}

// check is val checked as type (a name, or { type, children }), or GIVE_UP.
function check (val, type) {
  if (type === ATTRIBUTE_VALUE) return attributeValue(val) // the members of maps and lists of them
  let name = type, children
  if (typeof type === 'object' && type !== null) {
    name = type.type
    children = type.children
  }
  if (typeof name !== 'string') return GIVE_UP
  const [ kind, sub ] = kindOf(name)
  switch (kind) {
  case 'String':
    return typeof val === 'string' ? val : GIVE_UP
  case 'Boolean':
    return typeof val === 'boolean' ? val : GIVE_UP
  case 'Short': case 'Integer': case 'Long':
    return typeof val === 'number' ? Math.floor(val) : GIVE_UP
  case 'Double':
    return typeof val === 'number' ? val : GIVE_UP
  case 'List': case 'ParameterizedList':
    return Array.isArray(val) && children != null ? list(val, children) : GIVE_UP
  case 'Map': case 'ParameterizedMap':
    return isRecord(val) && children != null ? map(val, children) : GIVE_UP
  case 'ValueStruct': case 'FieldStruct':
    return isRecord(val) && isRecord(children) ? struct(val, children) : GIVE_UP
  case 'AttrStruct':
    return sub === 'ValueStruct' || sub === 'FieldStruct' ? attributeValue(val) : GIVE_UP
  }
  return GIVE_UP // Blob, and types this file does not know
}

// list copies an array whose members are of one type.
function list (val, children) {
  const out = new Array(val.length)
  for (let i = 0; i < val.length; i++) {
    const c = val[i] == null ? GIVE_UP : check(val[i], children)
    if (c === GIVE_UP) return GIVE_UP
    out[i] = c
  }
  return out
}

// map copies a map (an object of any keys) whose members are of one type,
// keeping its keys' order.
function map (val, children) {
  const out = {}
  for (const k in val) { // val is a plain object: its own keys, in Object.keys's order
    const v = val[k]
    const c = v == null || k === '__proto__' ? GIVE_UP : check(v, children)
    if (c === GIVE_UP) return GIVE_UP
    out[k] = c
  }
  return out
}

// struct checks a structure as dynalite's checkTypes does: unknown and null
// members are deleted from val, the others are copied in the table's order.
function struct (val, table) {
  for (const k in val) if (!table[k] || val[k] == null) delete val[k]
  const out = {}
  for (const k of Object.keys(table)) {
    if (val[k] == null) continue
    const c = check(val[k], table[k])
    if (c === GIVE_UP) return GIVE_UP
    out[k] = c
  }
  return out
}

// attributeValue copies a well-formed AttributeValue, or gives up.
function attributeValue (av) {
  if (!isRecord(av)) return GIVE_UP
  let type, n = 0
  for (const k in av) {
    if (++n > 1) return GIVE_UP
    type = k
  }
  const v = av[type]
  let c = GIVE_UP
  switch (type) {
  case 'S': case 'N':
    if (typeof v === 'string') c = v
    break
  case 'BOOL': case 'NULL':
    if (typeof v === 'boolean') c = v
    break
  case 'SS': case 'NS':
    if (allStrings(v)) c = v.slice()
    break
  case 'L':
    if (Array.isArray(v)) c = list(v, ATTRIBUTE_VALUE)
    break
  case 'M':
    if (isRecord(v)) c = map(v, ATTRIBUTE_VALUE)
    break
  } // anything else (none, B, BS, another member) gives up
  if (c === GIVE_UP) return GIVE_UP
  // Built as dynalite builds it, rather than as a literal { S: v }, so that
  // it has the hidden class of dynalite's own copies: the code reading it
  // later sees no new shapes.
  const out = {}
  out[type] = c
  return out
}

function allStrings (v) {
  if (!Array.isArray(v)) return false
  for (let i = 0; i < v.length; i++) if (typeof v[i] !== 'string') return false
  return true
}

// wrap returns checkTypes(data, types) that takes the direct path where it
// can, field by field, and calls original for the fields it cannot.
function wrap (original) {
  function checkTypes (data, types) {
    if (!isRecord(data) || !isRecord(types)) return original.apply(this, arguments)
    for (const k in data) if (!types[k] || data[k] == null) delete data[k]
    const out = {}
    for (const k of Object.keys(types)) {
      const val = data[k]
      if (val == null) continue
      let c = check(val, types[k])
      if (c === GIVE_UP) c = original({ [k]: val }, { [k]: types[k] })[k]
      if (c != null) out[k] = c
    }
    return out
  }
  checkTypes.original = original
  return checkTypes
}

// install wraps the checkTypes of dynalite's validations module (its
// exports: index.js calls validations.checkTypes).
function install (validations) {
  if (!validations.checkTypes.original) validations.checkTypes = wrap(validations.checkTypes)
}

module.exports = { wrap, install }
