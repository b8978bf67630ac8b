// Starts dynalite exactly as its own cli.js does (same flags), with two
// changes.
//
// The shim (shim/index.js; read its header) is installed first: it makes
// dynalite honour ReturnValuesOnConditionCheckFailure, lets global secondary
// indexes lag the table (--index-lag DURATION, default $DYNALITE_INDEX_LAG,
// plus per-table rules at run time), and adds a DynamoDB Streams API.
//
// And it keeps running when a client hangs up in the middle of a request.
// dynalite throws from the request's 'error' handler ("aborted",
// ECONNRESET), which would end the whole process: one cancelled request
// would take the database down for every test sharing it. Such a request
// has nobody left to answer, so the error is dropped; any other uncaught
// error still ends the process.
'use strict'

process.on('uncaughtException', function (err) {
  if (err && (err.code === 'ECONNRESET' || err.message === 'aborted')) return
  console.error(err)
  process.exit(1)
})

require('./shim').install()
require('dynalite/cli.js')
