// Comparisons with a missing operand. On DynamoDB a comparison in a
// ConditionExpression or FilterExpression (=, <, <=, >, >=, BETWEEN, IN)
// that names an attribute the item does not have is false, so its NOT is
// true: NOT (attempts >= max_attempts) holds for an item that has neither,
// as lease's belowLimitCond relies on. AWS's comparator reference
// ("Condition and filter expressions, operators, and functions in
// DynamoDB") defines each comparator on two values and says nothing more of
// a missing one; what DynamoDB answers is what other emulators checked
// against it report.
//
// dynalite's compare (db/index.js) takes a missing attribute for a value of
// no type, so two missing attributes are equal: a = b, a <= b and a >= b
// were true on an item lacking both, and NOT (a >= b) false. Against a
// value it answered false already. A BETWEEN whose upper bound or an IN
// whose list named a missing attribute threw, which ended the server.
//
// The shim does not touch compare: it rewrites the parsed expression so
// that each comparison is judged only once every operand that names an
// attribute (a document path, or size() of one) is there:
//
//   a >= b   becomes   attribute_exists(a) AND (attribute_exists(b) AND a >= b)
//
// dynalite evaluates the result with its own evaluator, whose AND stops at
// the first false, and resolves size() inside attribute_exists as it does
// in a comparison (a size it cannot take, as of a number, counts as
// missing). index.js applies it to every condition (db.checkConditional)
// and every filter (db.queryTable: Query and Scan of tables and indexes).
// The legacy Expected and QueryFilter compare attributes with values only
// and are left alone.
//
// Two cases are not documented and are decided here: IN is false when any
// operand is missing, its list included (a IN (b, :v) with b missing is
// false even when a = :v); and <> is left as dynalite has it: true when one
// operand is missing (which DynamoDB is reported to answer as well), false
// when both are (reports differ on that one).
'use strict'

// The comparisons guarded, by dynalite's parse node type.
const COMPARISONS = new Set([ '=', '<', '<=', '>', '>=', 'between', 'in' ])

// guardMissing returns a copy of a parsed condition or filter ({expression,
// nestedPaths, pathHeads}) whose comparisons are guarded; the parse itself
// (which parsecache.js may keep) is not changed.
function guardMissing (parsed) {
  return { ...parsed, expression: guard(parsed.expression) }
}

function guard (expr) {
  if (expr.type === 'and' || expr.type === 'or' || expr.type === 'not') return { ...expr, args: expr.args.map(guard) }
  if (!COMPARISONS.has(expr.type)) return expr
  return expr.args.filter(namesAttribute).reduceRight((rest, arg) => ({ type: 'and', args: [ exists(arg), rest ] }), expr)
}

// namesAttribute tells an operand that reads the item (a document path, an
// array of its pieces, or size() of one) from a value (an AttributeValue).
function namesAttribute (arg) {
  return Array.isArray(arg) || arg.type === 'function'
}

function exists (arg) {
  return { type: 'function', name: 'attribute_exists', args: [ arg ] }
}

module.exports = { guardMissing }
