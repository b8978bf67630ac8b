package localstack

import (
	"context"
	"encoding/json"
	"os/exec"
	"testing"
	"time"
)

// A stream keeps up to 100,000 records (and a day of them) in memory, so
// what each costs bounds the server's memory: a record takes at most twice
// its JSON's length of heap. Held as objects, a record with both images of
// a 40-attribute item took 2.4 times; a busy table's stream, 800 MB.
//
// streamMemoryScript runs the server in the node process and writes the
// same items again and again, to a table without a stream and then to one
// with: the heap that the second adds per write is what a record costs.
func TestStreamRecordMemory(t *testing.T) {
	t.Parallel()
	dir := installed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "--expose-gc", "-e", streamMemoryScript)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var got struct{ PerRecord, JSON float64 }
	if err := json.Unmarshal(out, &got); err != nil || got.JSON == 0 {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Logf("a record of %.0f bytes of JSON takes %.0f bytes of heap (%.2f times)", got.JSON, got.PerRecord, got.PerRecord/got.JSON)
	if got.PerRecord > 2*got.JSON {
		t.Errorf("a stream record takes %.0f bytes of heap, more than twice its %.0f bytes of JSON", got.PerRecord, got.JSON)
	}
}

const streamMemoryScript = `
'use strict'
const path = require('path')
const dir = process.cwd()
const DIR = path.dirname(require.resolve('dynalite/package.json', { paths: [ dir ] }))
require(path.join(dir, 'shim')).install({ 'index-lag': '0' })
const server = require(DIR)({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 })
server.listen(0, '127.0.0.1', () => main().then(() => process.exit(0), err => {
  console.error(err)
  process.exit(1)
}))

async function main () {
  const url = 'http://127.0.0.1:' + server.address().port + '/'
  const call = async (target, body) => {
    const res = await fetch(url, { method: 'POST', body: JSON.stringify(body), headers: {
      'content-type': 'application/x-amz-json-1.0', 'x-amz-target': target, 'x-amz-date': '20260101T000000Z',
      authorization: 'AWS4-HMAC-SHA256 Credential=local/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host;x-amz-date;x-amz-target, Signature=0',
    } })
    const text = await res.text()
    if (res.status !== 200) throw new Error(target + ': ' + res.status + ' ' + text)
    return JSON.parse(text)
  }
  const N = 2000
  let tables = 0
  // perWrite is the heap that N updates of 20 items add, per update.
  const perWrite = async stream => {
    const TableName = 'stream-memory-' + tables++
    await call('DynamoDB_20120810.CreateTable', {
      TableName, BillingMode: 'PAY_PER_REQUEST',
      AttributeDefinitions: [ { AttributeName: 'pk', AttributeType: 'S' } ],
      KeySchema: [ { AttributeName: 'pk', KeyType: 'HASH' } ],
      ...(stream ? { StreamSpecification: { StreamEnabled: true, StreamViewType: 'NEW_AND_OLD_IMAGES' } } : {}),
    })
    // Written only once active: a busy server may still be creating it.
    while ((await call('DynamoDB_20120810.DescribeTable', { TableName })).Table.TableStatus !== 'ACTIVE') {
      await new Promise(resolve => setTimeout(resolve, 10))
    }
    // Items like a task's: 40 attributes, strings and numbers.
    const names = {}, values = {}, sets = []
    for (let a = 0; a < 40; a++) {
      names['#a' + a] = 'attribute_' + a
      sets.push('#a' + a + ' = :a' + a)
    }
    const update = async (k, i) => {
      for (let a = 0; a < 40; a++) values[':a' + a] = a % 2 ? { N: String(1796302251405 + i * 40 + a) } : { S: 'value-' + a + '-' + i + '-' + k }
      await call('DynamoDB_20120810.UpdateItem', {
        TableName, Key: { pk: { S: 'item-' + k } }, UpdateExpression: 'SET ' + sets.join(', '),
        ExpressionAttributeNames: names, ExpressionAttributeValues: values,
      })
    }
    for (let k = 0; k < 20; k++) await update(k, 0)
    global.gc()
    const before = process.memoryUsage().heapUsed
    for (let i = 1; i <= N; i++) await update(i % 20, i)
    global.gc()
    global.gc()
    return { TableName, bytes: (process.memoryUsage().heapUsed - before) / N }
  }
  await perWrite(false) // warm up
  const without = await perWrite(false), withStream = await perWrite(true)
  // The records' JSON, as GetRecords answers them.
  const arn = (await call('DynamoDBStreams_20120810.ListStreams', { TableName: withStream.TableName })).Streams[0].StreamArn
  const shard = (await call('DynamoDBStreams_20120810.DescribeStream', { StreamArn: arn })).StreamDescription.Shards[0].ShardId
  let it = (await call('DynamoDBStreams_20120810.GetShardIterator', { StreamArn: arn, ShardId: shard, ShardIteratorType: 'TRIM_HORIZON' })).ShardIterator
  let n = 0, json = 0
  while (it) {
    const out = await call('DynamoDBStreams_20120810.GetRecords', { ShardIterator: it })
    if (!out.Records.length) break
    for (const r of out.Records) json += JSON.stringify(r).length
    n += out.Records.length
    it = out.NextShardIterator
  }
  if (n !== N + 20) throw new Error(n + ' records, want ' + (N + 20))
  console.log(JSON.stringify({ perRecord: withStream.bytes - without.bytes, json: json / n }))
}
`
