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
'use strict'

// install patches dynalite's modules; dynalite(rel) requires one of them.
function install (dynalite) {
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
}

module.exports = { install }
