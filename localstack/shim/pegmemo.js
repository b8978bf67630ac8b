// Memoized expression parsers. dynalite's condition, update and projection
// parsers are PEG.js parsers generated without a results cache: every
// parenthesised group is first tried as an operand, then parsed again as
// a condition, so a condition's parse time doubles with each level of
// nesting. The AWS SDK's expression builder parenthesises every operand,
// and a write whose condition nests five levels took dynalite 5 to 13 ms
// to parse, more than everything else the write cost it. DynamoDB itself
// has no such cost.
//
// memoize rewrites a generated parser's source so that each rule keeps its
// result per input position for the length of one parse, as PEG.js's own
// --cache option generates (a packrat parser: linear time). Rule results
// are the same with or without it: a rule's outcome at a position depends
// only on the input from there (the parsers' actions read the request's
// attribute names and values, which do not change during a parse). The
// failure positions that make up a syntax error's message are recorded by
// the first attempt at each position, as with --cache.
'use strict'

const fs = require('fs')
const Module = require('module')

// memoize returns the source of a PEG.js 0.10 generated parser with a
// results cache.
function memoize (src) {
  const rule = /^( {2})function (peg\$parse[A-Za-z_]+)\(\) \{$/gm
  const names = []
  let out = src.replace(rule, (m, indent, name) => {
    names.push(name)
    return indent + 'function ' + name + '() {\n' +
      indent + '  var key = peg$currPos * RULES + ' + (names.length - 1) + ', cached = peg$resultsCache[key];\n' +
      indent + '  if (cached) { peg$currPos = cached.nextPos; return cached.result; }\n' +
      indent + '  var result = ' + name + '$uncached();\n' +
      indent + '  peg$resultsCache[key] = { nextPos: peg$currPos, result: result };\n' +
      indent + '  return result;\n' +
      indent + '}\n' +
      indent + 'function ' + name + '$uncached() {'
  })
  if (names.length === 0) throw new Error('pegmemo: no rules found; not a PEG.js 0.10 parser?')
  out = out.replace(/RULES/g, String(names.length))
  // One cache per parse: declared with the parser's other per-parse state.
  const state = '      peg$maxFailPos       = 0,'
  if (!out.includes(state)) throw new Error('pegmemo: parser state not found; not a PEG.js 0.10 parser?')
  return out.replace(state, state + '\n      peg$resultsCache     = {},')
}

// install replaces the module at file (already resolved) with its
// memoized version, before anything requires it.
function install (file) {
  const m = new Module(file, module)
  m.filename = file
  m.paths = Module._nodeModulePaths(require('path').dirname(file))
  m._compile(memoize(fs.readFileSync(file, 'utf8')), file)
  m.loaded = true
  require.cache[file] = m
}

module.exports = { memoize, install }
