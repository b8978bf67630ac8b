package localstack

import (
	"context"
	"encoding/json"
	"os/exec"
	"testing"
	"time"
)

// Every read that walks the database (Query and Scan, of a table or an
// index, stopped by a Limit or read to the end, and DeleteTable) closes the
// iterator it opened. An open iterator keeps the database as it was when
// it started: with memory-level, that version of the tree and every value
// in it; with LevelDB, a snapshot. Left open, they made the server's
// memory grow with every read for as long as it ran.
//
// iteratorsScript runs the server in the node process, counts the
// iterators the database has open after each kind of read, and prints
// them with the answers' counts.
func TestReadsCloseTheirIterators(t *testing.T) {
	t.Parallel()
	dir := installed(t)
	for _, storage := range []struct{ name, path string }{{"memory", ""}, {"path", t.TempDir()}} {
		t.Run(storage.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "node", "-e", iteratorsScript, storage.path)
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			var got []struct {
				Read        string
				Open, Count int
				More        bool
			}
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			want := map[string]struct {
				count int
				more  bool
			}{
				"query limit 1": {1, true}, "query": {1, false}, "index query limit 1": {1, true},
				"index query": {20, false}, "scan limit 5": {5, true}, "scan": {20, false}, "delete table": {0, false},
			}
			if len(got) != len(want) {
				t.Fatalf("%d reads, want %d: %s", len(got), len(want), out)
			}
			for _, r := range got {
				w, ok := want[r.Read]
				if !ok || r.Count != w.count || r.More != w.more {
					t.Errorf("%s: %d items, more %v; want %d, %v", r.Read, r.Count, r.More, w.count, w.more)
				}
				if r.Open != 0 {
					t.Errorf("%s: %d iterators left open, want 0", r.Read, r.Open)
				}
			}
		})
	}
}

const iteratorsScript = `
'use strict'
const path = require('path')
const dir = process.cwd()
const DIR = path.dirname(require.resolve('dynalite/package.json', { paths: [ dir ] }))
// The database's open iterators: abstract-level attaches each to its db
// until it is closed.
const { AbstractLevel } = require(require.resolve('abstract-level', { paths: [ DIR ] }))
const open = new Set()
const attach = AbstractLevel.prototype.attachResource, detach = AbstractLevel.prototype.detachResource
AbstractLevel.prototype.attachResource = function (r) { open.add(r); return attach.call(this, r) }
AbstractLevel.prototype.detachResource = function (r) { open.delete(r); return detach.call(this, r) }

require(path.join(dir, 'shim')).install({ 'index-lag': '0' })
const server = require(DIR)({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0, path: process.argv[1] || undefined })
server.listen(0, '127.0.0.1', () => main().then(() => process.exit(0), err => {
  console.error(err)
  process.exit(1)
}))

async function main () {
  const url = 'http://127.0.0.1:' + server.address().port + '/'
  const call = async (op, body) => {
    const res = await fetch(url, { method: 'POST', body: JSON.stringify(body), headers: {
      'content-type': 'application/x-amz-json-1.0', 'x-amz-target': 'DynamoDB_20120810.' + op, 'x-amz-date': '20260101T000000Z',
      authorization: 'AWS4-HMAC-SHA256 Credential=local/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host;x-amz-date;x-amz-target, Signature=0',
    } })
    const out = await res.json()
    if (res.status !== 200) throw new Error(op + ': ' + res.status + ' ' + JSON.stringify(out))
    return out
  }
  const TableName = 'iterators'
  await call('CreateTable', {
    TableName, BillingMode: 'PAY_PER_REQUEST',
    AttributeDefinitions: [ { AttributeName: 'pk', AttributeType: 'S' }, { AttributeName: 'status', AttributeType: 'S' } ],
    KeySchema: [ { AttributeName: 'pk', KeyType: 'HASH' } ],
    GlobalSecondaryIndexes: [ { IndexName: 'by-status', KeySchema: [ { AttributeName: 'status', KeyType: 'HASH' } ], Projection: { ProjectionType: 'ALL' } } ],
    StreamSpecification: { StreamEnabled: true, StreamViewType: 'NEW_AND_OLD_IMAGES' },
  })
  // Written only once active: a busy server may still be creating it.
  while ((await call('DescribeTable', { TableName })).Table.TableStatus !== 'ACTIVE') {
    await new Promise(resolve => setTimeout(resolve, 10))
  }
  for (let i = 0; i < 20; i++) await call('PutItem', { TableName, Item: { pk: { S: 'k' + i }, status: { S: 'todo' } } })
  const settle = () => new Promise(resolve => setTimeout(resolve, 100))
  await settle()
  const base = open.size
  const byKey = { KeyConditionExpression: 'pk = :k', ExpressionAttributeValues: { ':k': { S: 'k1' } } }
  const byStatus = { IndexName: 'by-status', KeyConditionExpression: '#s = :s', ExpressionAttributeNames: { '#s': 'status' }, ExpressionAttributeValues: { ':s': { S: 'todo' } } }
  const reads = [
    [ 'query limit 1', 'Query', { ...byKey, Limit: 1 } ],
    [ 'query', 'Query', byKey ],
    [ 'index query limit 1', 'Query', { ...byStatus, Limit: 1 } ],
    [ 'index query', 'Query', byStatus ],
    [ 'scan limit 5', 'Scan', { Limit: 5 } ],
    [ 'scan', 'Scan', {} ],
  ]
  const out = []
  for (const [ read, op, body ] of reads) {
    let res
    for (let i = 0; i < 50; i++) res = await call(op, { TableName, ...body })
    await settle()
    out.push({ read, open: open.size - base, count: res.Count, more: !!res.LastEvaluatedKey })
  }
  await call('DeleteTable', { TableName })
  await settle()
  out.push({ read: 'delete table', open: open.size - base, count: 0, more: false })
  console.log(JSON.stringify(out))
}
`
