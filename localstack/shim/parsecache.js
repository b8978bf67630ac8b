// A cache of parsed expressions. Clients send the same few expressions over
// and over, with new values: an SDK's expression builder turns one code
// path's expression into the same string and attribute names every time,
// and only ExpressionAttributeValues change. dynalite parses each one
// afresh, which is most of what a write with a long update expression costs
// it (a checkout's 25 clauses take longer to parse than to apply).
//
// A parse's result is a tree in which every ":value" is the very object of
// ExpressionAttributeValues it names, and every "#name" its string from
// ExpressionAttributeNames. What else a successful parse decides depends on
// the expression, the names and each value's type (operand and function
// checks), with two exceptions: BETWEEN compares its two bounds, and
// attribute_type checks its value's type name (one of S, N, B, SS, NS,
// BS, M, L, NULL, BOOL), so expressions with either are not cached. So a successful parse is kept,
// keyed by the expression, the names it was given and the types of the
// values, with each value replaced by a marker of its name; a later parse
// with the same key gets a fresh copy of the tree with the request's own
// values in place of the markers, and marks the same names and values used,
// as the parse would have. Failed parses (syntax errors, unknown names,
// type errors) are never kept: they run the parser every time.
//
// The result is the same tree the parser would build (TestParseCache
// compares them); the cache holds at most MAX_ENTRIES expressions and
// starts afresh when full.
'use strict'

const MAX_ENTRIES = 1000
const VALUE = Symbol('value') // a template's marker: { [VALUE]: ':name' }

// cached wraps a PEG.js parser module's parse(input, { context }).
function cached (parser) {
  const parse = parser.parse
  let entries = new Map()
  return Object.assign({}, parser, {
    parse (input, options) {
      const ctx = options && options.context
      if (!ctx || typeof input !== 'string' || /between|attribute_type/i.test(input)) return parse.apply(this, arguments)
      const k = key(input, ctx)
      const hit = entries.get(k)
      if (hit) {
        forget(ctx.unusedAttrNames, hit.names)
        forget(ctx.unusedAttrVals, hit.values)
        return instantiate(hit.template, ctx.attrVals)
      }
      // The parse runs on its own record of unused names and values, so
      // that it notes every one it uses, even those an earlier expression
      // of the request used too.
      const own = Object.assign({}, ctx, { unusedAttrNames: all(ctx.attrNames), unusedAttrVals: all(ctx.attrVals) })
      const result = parse.call(this, input, Object.assign({}, options, { context: own })) // throws on a syntax error
      const names = Object.keys(ctx.attrNames || {}).filter(n => !(n in own.unusedAttrNames))
      const values = Object.keys(ctx.attrVals || {}).filter(v => !(v in own.unusedAttrVals))
      forget(ctx.unusedAttrNames, names)
      forget(ctx.unusedAttrVals, values)
      if (!result || typeof result !== 'object') return result // an error message
      const markers = new Map()
      for (const v of values) markers.set(ctx.attrVals[v], v)
      if (entries.size >= MAX_ENTRIES) entries = new Map()
      entries.set(k, { template: template(result, markers), names, values })
      return result
    },
  })
}

// key names what a parse depends on: the input, whether it is a key
// condition, the attribute names, and each value's type.
function key (input, ctx) {
  let k = (ctx.isKeyCondition ? 'K' : 'E') + input.length + ':' + input
  const names = ctx.attrNames
  if (names) for (const n of Object.keys(names).sort()) k += '\u0000' + n + '=' + names[n]
  const vals = ctx.attrVals
  if (vals) for (const v of Object.keys(vals).sort()) k += '\u0001' + v + '=' + typeOf(vals[v])
  return k
}

// forget deletes keys from m (which may be missing).
function forget (m, keys) {
  if (m) for (const k of keys) delete m[k]
}

// all is a record with every key of m (which may be missing).
function all (m) {
  const out = Object.create(null)
  if (m) for (const k of Object.keys(m)) out[k] = true
  return out
}

// typeOf is a value's type as the parsers' checks see it.
function typeOf (val) {
  if (!val || typeof val !== 'object') return '?'
  for (const t of [ 'S', 'N', 'B', 'NULL', 'BOOL', 'SS', 'NS', 'BS', 'L', 'M' ]) {
    if (val[t] != null) return t
  }
  return '?'
}

// template copies a parse result, putting a marker in place of each value.
function template (node, markers) {
  if (!node || typeof node !== 'object') return node
  if (markers.has(node)) return { [VALUE]: markers.get(node) }
  if (Array.isArray(node)) return node.map(n => template(n, markers))
  const out = Object.create(Object.getPrototypeOf(node))
  for (const k of Object.keys(node)) out[k] = template(node[k], markers)
  return out
}

// instantiate copies a template, putting each value in place of its marker.
function instantiate (node, vals) {
  if (!node || typeof node !== 'object') return node
  if (Array.isArray(node)) return node.map(n => instantiate(n, vals))
  if (node[VALUE] !== undefined) return vals[node[VALUE]]
  const out = Object.create(Object.getPrototypeOf(node))
  for (const k of Object.keys(node)) out[k] = instantiate(node[k], vals)
  return out
}

module.exports = { cached }
