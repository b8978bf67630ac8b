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
'use strict'

// install patches dynalite's modules; dynalite(rel) requires one of them.
function install (dynalite) {
  // a.
  dynalite('validations/scan').types.ConsistentRead = 'Boolean'
}

module.exports = { install }
