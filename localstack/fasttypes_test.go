package localstack

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// installed is the folder of the local DynamoDB's Node.js code, its
// packages installed, for a test that runs a script of its own there.
func installed(t *testing.T) string {
	t.Helper()
	dir, err := FindDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := Install(ctxT(t), dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The shim checks request types with a direct path for well-formed values
// (shim/fasttypes.js) and leaves the rest to dynalite's checkTypes.
// fastTypesScript runs both on the same requests, each on its own copy, and
// fails unless they give the same result or throw the same error (status,
// body and message), leave their input alike (dynalite deletes unknown and
// null members) and share no object with it. The requests are a fixed
// corpus of well-formed and odd ones, then random ones built from every
// action's type table with a few odd values mixed in (seeded: the test logs
// the seed, and FASTTYPES_SEED=n replays it). It also fails if a
// well-formed UpdateItem needs dynalite's checkTypes at all.
func TestFastTypes(t *testing.T) {
	t.Parallel()
	dir := installed(t)
	seed := time.Now().UnixNano() % 1_000_000_000
	if s := os.Getenv("FASTTYPES_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("FASTTYPES_SEED: %v", err)
		}
	}
	t.Logf("seed %d (FASTTYPES_SEED=%d replays it)", seed, seed)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "-e", fastTypesScript, strconv.FormatInt(seed, 10), "5000")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("seed %d: %v\n%s", seed, err, out)
	}
	t.Logf("%s", bytes.TrimSpace(out))
}

// Requests with odd values get the answers dynalite gave before the shim's
// direct path: conversions ("yes" is true for BOOL, a Limit of 1.9 is 1),
// null and unknown members dropped, and the same errors, word for word. The
// odd ones are sent as raw JSON, which the SDK would not write.
func TestFastTypesServer(t *testing.T) {
	t.Parallel()
	endpoint := shimServer(t)
	c := client(endpoint)
	name := uniqueName("fasttypes")
	createTasks(t, c, name, "")
	call := func(action, body string) (int, string) {
		t.Helper()
		return rawCall(t, endpoint, action, strings.ReplaceAll(body, "TABLE", name))
	}
	serialization := func(msg string) string {
		return `{"__type":"com.amazon.coral.service#SerializationException","Message":"` + msg + `"}`
	}
	validation := func(msg string) string {
		return `{"__type":"com.amazon.coral.validate#ValidationException","message":"` + msg + `"}`
	}
	update := func(vals string) string {
		return `{"TableName":"TABLE","Key":{"pk":{"S":"a"}},"UpdateExpression":"SET v = :v","ExpressionAttributeValues":` + vals + `}`
	}
	for _, tc := range []struct{ what, action, body, want string }{
		{"an item with odd values", "PutItem",
			`{"TableName":"TABLE","Item":{"pk":{"S":"a"},"v":{"N":"1"},"b":{"BOOL":"yes"},"z":{"NULL":"1"},"bin":{"B":"aGVsbG8="},"m":{"M":{"x":{"L":[{"S":"y"},{"NS":["1","2"]}]}}},"junk":{"S":"j","X":null}},"Junk":1}`,
			`{}`},
		{"a plain item", "PutItem", `{"TableName":"TABLE","Item":{"pk":{"S":"b"}}}`, `{}`},
		{"a get with a string boolean", "GetItem", `{"TableName":"TABLE","Key":{"pk":{"S":"a"}},"ConsistentRead":"true"}`,
			`{"Item":{"pk":{"S":"a"},"v":{"N":"1"},"b":{"BOOL":true},"z":{"NULL":true},"bin":{"B":"aGVsbG8="},"m":{"M":{"x":{"L":[{"S":"y"},{"NS":["1","2"]}]}}},"junk":{"S":"j"}}}`},
		{"a number for S", "UpdateItem", update(`{":v":{"S":5}}`), serialization("NUMBER_VALUE cannot be converted to String")},
		{"a number for S in the key", "UpdateItem",
			`{"TableName":"TABLE","Key":{"pk":{"S":5}},"UpdateExpression":"SET v = :v","ExpressionAttributeValues":{":v":{"S":true}}}`,
			serialization("NUMBER_VALUE cannot be converted to String")},
		{"a word for BOOL", "UpdateItem", update(`{":v":{"BOOL":"maybe"}}`), serialization("Unexpected token received from parser")},
		{"bad base64", "UpdateItem", update(`{":v":{"B":"abc"}}`), serialization("Base64 encoded length is expected a multiple of 4 bytes but found: 3")},
		{"a number in SS", "UpdateItem", update(`{":v":{"SS":["a",1]}}`), serialization("NUMBER_VALUE cannot be converted to String")},
		{"a list for the values", "UpdateItem", update(`[{"S":"a"}]`),
			serialization("Unrecognized collection type java.util.Map<java.lang.String, com.amazonaws.dynamodb.v20120810.AttributeValue>")},
		{"two types", "UpdateItem", update(`{":v":{"S":"a","N":"1"}}`),
			validation("ExpressionAttributeValues contains invalid value: Supplied AttributeValue has more than one datatypes set, must contain exactly one of the supported datatypes for key :v")},
		{"no type", "UpdateItem", update(`{":v":{}}`),
			validation("ExpressionAttributeValues contains invalid value: Supplied AttributeValue is empty, must contain exactly one of the supported datatypes for key :v")},
		{"a string for NULL", "UpdateItem",
			`{"TableName":"TABLE","Key":{"pk":{"S":"a"}},"UpdateExpression":"SET v = :v, w = :w","ExpressionAttributeValues":{":v":{"N":"2"},":w":{"NULL":"true"}},"ReturnValues":"UPDATED_NEW"}`,
			`{"Attributes":{"v":{"N":"2"},"w":{"NULL":true}}}`},
		{"a fractional limit", "Scan", `{"TableName":"TABLE","Limit":1.9,"Select":"COUNT"}`, ``},
	} {
		status, got := call(tc.action, tc.body)
		if tc.want == "" { // the scan: one item, whichever it is
			var out struct{ Count, ScannedCount int }
			if status != http.StatusOK || json.Unmarshal([]byte(got), &out) != nil || out.Count != 1 || out.ScannedCount != 1 {
				t.Errorf("%s: %d %s, want Count and ScannedCount 1", tc.what, status, got)
			}
			continue
		}
		wantStatus := http.StatusOK
		if strings.Contains(tc.want, "__type") {
			wantStatus = http.StatusBadRequest
		}
		if status != wantStatus || !sameJSON(got, tc.want) {
			t.Errorf("%s: %d %s\nwant %d %s", tc.what, status, got, wantStatus, tc.want)
		}
	}

	// And through the SDK: a write with many values of every type.
	vals := map[string]types.AttributeValue{}
	expr := []string{}
	for i := range 30 {
		p := ":v" + strconv.Itoa(i)
		expr = append(expr, "a"+strconv.Itoa(i)+" = "+p)
		switch i % 6 {
		case 0:
			vals[p] = s("x" + strconv.Itoa(i))
		case 1:
			vals[p] = n(i)
		case 2:
			vals[p] = &types.AttributeValueMemberBOOL{Value: i%4 == 2}
		case 3:
			vals[p] = &types.AttributeValueMemberSS{Value: []string{"a", strconv.Itoa(i)}}
		case 4:
			vals[p] = &types.AttributeValueMemberL{Value: []types.AttributeValue{s("l"), &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"n": n(i)}}}}
		case 5:
			vals[p] = &types.AttributeValueMemberNULL{Value: true}
		}
	}
	_, err := c.UpdateItem(ctxT(t), &dynamodb.UpdateItemInput{
		TableName: aws.String(name), Key: key("b"),
		UpdateExpression:          aws.String("SET " + strings.Join(expr, ", ")),
		ExpressionAttributeValues: vals,
	})
	if err != nil {
		t.Fatalf("UpdateItem with 30 values: %v", err)
	}
	item := getItem(t, c, name, "b", true)
	for i := range 30 {
		if got, want := item["a"+strconv.Itoa(i)], vals[":v"+strconv.Itoa(i)]; !reflect.DeepEqual(got, want) {
			t.Errorf("a%d = %#v, want %#v", i, got, want)
		}
	}
}

// rawCall sends a DynamoDB action with the given JSON body, looking signed
// as dynalite wants it (it does not check signatures), and returns the
// answer's status and body.
func rawCall(t *testing.T, endpoint, action, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodPost, endpoint+"/", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	req.Header.Set("X-Amz-Target", "DynamoDB_20120810."+action)
	req.Header.Set("X-Amz-Date", now.Format("20060102T150405Z"))
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=local/"+now.Format("20060102")+
		"/us-east-1/dynamodb/aws4_request, SignedHeaders=host;x-amz-date;x-amz-target, Signature=0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", action, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: %v", action, err)
	}
	return resp.StatusCode, string(out)
}

// sameJSON tells whether two JSON texts hold the same value.
func sameJSON(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	xs, _ := json.Marshal(x)
	ys, _ := json.Marshal(y)
	return string(xs) == string(ys)
}

// fastTypesScript is run by node in the localstack directory with a seed
// and a count of random requests; it prints a summary, or the first
// differences and exits 1.
const fastTypesScript = `
'use strict'
const path = require('path')
const fs = require('fs')
const util = require('util')

const dir = process.cwd()
require(path.join(dir, 'shim')).install({ 'index-lag': '0' })
const DIR = path.dirname(require.resolve('dynalite/package.json', { paths: [ dir ] }))
const validations = require(path.join(DIR, 'validations'))
const original = validations.checkTypes.original
if (typeof original !== 'function') throw new Error('the shim did not wrap validations.checkTypes')
// The wrapper under test, with its calls of dynalite's checkTypes counted.
let fallbacks = 0
const fast = require(path.join(dir, 'shim', 'fasttypes')).wrap(function () {
  fallbacks++
  return original.apply(this, arguments)
})

const tables = {}
for (const f of fs.readdirSync(path.join(DIR, 'validations'))) {
  if (f !== 'index.js') tables[f.replace(/\.js$/, '')] = require(path.join(DIR, 'validations', f)).types
}

// run is fn's result, or the error it threw, in comparable form.
function run (fn, data, types) {
  try {
    return { result: fn(data, types) }
  }
  catch (err) {
    return { threw: { name: err && err.constructor && err.constructor.name, message: err && err.message, statusCode: err && err.statusCode, body: err && err.body } }
  }
}

// same compares two values in full: types, -0, key order, holes, and
// prototypes other than Object's and Array's (dynalite gives a map's
// "__proto__" member as its result's prototype).
function same (a, b) {
  return canon(a) === canon(b)
}
function canon (v) {
  if (typeof v === 'number') return Object.is(v, -0) ? 'n-0' : 'n' + v
  if (typeof v !== 'object' || v === null) return typeof v + ':' + JSON.stringify(v)
  const proto = Object.getPrototypeOf(v)
  let s = Array.isArray(v) ? '[' : '{'
  if (proto !== Object.prototype && proto !== Array.prototype) s += '<' + canon(proto) + '>'
  for (const k of Reflect.ownKeys(v)) s += JSON.stringify(String(k)) + ':' + canon(v[k]) + ','
  return s + (Array.isArray(v) ? ']' : '}')
}
function objects (v, set = new Set()) {
  if (typeof v === 'object' && v !== null && !set.has(v)) {
    set.add(v)
    for (const k of Reflect.ownKeys(v)) objects(v[k], set)
    objects(Object.getPrototypeOf(v), set)
  }
  return set
}
function shared (input, out) { // objects of the result that were in the input
  let n = 0
  for (const o of objects(out)) if (input.has(o) && o !== Object.prototype && o !== Array.prototype) n++
  return n
}

const stats = { cases: 0, errors: 0, direct: 0 }
const failures = []
// compare checks one request body (JSON) for one action.
function compare (action, json, label) {
  const types = tables[action]
  const a = JSON.parse(json), b = JSON.parse(json)
  const inA = objects(a), inB = objects(b)
  const before = fallbacks
  const ra = run(original, a, types), rb = run(fast, b, types)
  stats.cases++
  if (ra.threw) stats.errors++
  if (fallbacks === before) stats.direct++
  const problems = []
  if (!same(ra, rb)) problems.push('results differ:\n  dynalite: ' + util.inspect(ra, { depth: 20 }) + '\n  shim:     ' + util.inspect(rb, { depth: 20 }))
  if (!same(a, b)) problems.push('inputs left differently:\n  dynalite: ' + util.inspect(a, { depth: 20 }) + '\n  shim:     ' + util.inspect(b, { depth: 20 }))
  if (ra.result && shared(inA, ra.result) !== shared(inB, rb.result)) problems.push('the shim\'s result shares objects with its input')
  if (problems.length) failures.push(label + ' ' + action + ' ' + json + '\n' + problems.join('\n'))
  return { fell: fallbacks - before, ra }
}

// The fixed corpus.
const av30 = {}
for (let i = 0; i < 30; i++) av30[':v' + i] = [ { S: 'x' + i }, { N: String(i) }, { BOOL: i % 2 === 0 }, { NULL: true }, { SS: [ 'a', 'b' ] }, { NS: [ '1', '2.5' ] }, { L: [ { S: 'l' }, { M: { n: { N: '1' } } } ] }, { M: { a: { S: 'm' }, 10: { N: '2' }, 2: { L: [] } } } ][i % 8]
const updateBody = {
  TableName: 'tasks', Key: { pk: { S: 'a' }, sk: { N: '1' } },
  UpdateExpression: 'SET #a = :v0', ConditionExpression: 'attribute_exists(pk)',
  ExpressionAttributeNames: { '#a': 'a', '#b': 'b' }, ExpressionAttributeValues: av30,
  ReturnValues: 'ALL_NEW', ReturnConsumedCapacity: 'TOTAL', ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
}
{
  const { fell, ra } = compare('updateItem', JSON.stringify(updateBody), 'checkout update')
  if (fell !== 0 || ra.threw) failures.push('a well-formed UpdateItem did not take the direct path all through (' + fell + ' fields fell back)')
}
const withValues = (action, extra, vals) => JSON.stringify(Object.assign({ TableName: 'tasks', Key: { pk: { S: 'a' } }, UpdateExpression: 'SET a = :v' }, extra, { ExpressionAttributeValues: vals }))
const oddValues = [
  '{":v":{"S":5}}', '{":v":{"S":5.5}}', '{":v":{"S":true}}', '{":v":{"S":["a"]}}', '{":v":{"S":{}}}', '{":v":{"S":null}}',
  '{":v":{"N":1}}', '{":v":{"BOOL":"true"}}', '{":v":{"BOOL":"no"}}', '{":v":{"BOOL":"maybe"}}', '{":v":{"BOOL":1}}', '{":v":{"BOOL":0.5}}',
  '{":v":{"NULL":"YES"}}', '{":v":{"NULL":[]}}', '{":v":{"NULL":{}}}',
  '{":v":{"B":"aGVsbG8="}}', '{":v":{"B":"abc"}}', '{":v":{"B":"aGVsbG9="}}', '{":v":{"B":5}}', '{":v":{"BS":["AAAA","QQ=="]}}', '{":v":{"BS":"AAAA"}}',
  '{":v":{"SS":["a",1]}}', '{":v":{"SS":["a",null]}}', '{":v":{"SS":"a"}}', '{":v":{"SS":{"a":"b"}}}', '{":v":{"NS":[1,2]}}', '{":v":{"NS":[]}}', '{":v":{"SS":[]}}',
  '{":v":{"L":[]}}', '{":v":{"M":{}}}', '{":v":{"L":{}}}', '{":v":{"M":[]}}', '{":v":{"L":[null]}}', '{":v":{"M":{"a":null}}}', '{":v":{"L":[{"S":1}]}}',
  '{":v":{"M":{"a":{"M":{"b":{"L":[{"L":[{"M":{"c":{"N":"1","S":"x"}}}]}]}}}}}}', '{":v":{"M":{"a":{"M":{"b":{"L":[{"L":[{"M":{"c":{"N":"1"}}}]}]}}}}}}',
  '{":v":{}}', '{":v":null}', '{":v":{"S":"a","N":"1"}}', '{":v":{"S":"a","N":null}}', '{":v":{"S":"a","X":"1"}}', '{":v":{"X":"1"}}', '{":v":{"s":"a"}}',
  '{":v":"a"}', '{":v":5}', '{":v":true}', '{":v":["a"]}', '{":v":[{"S":"a"}]}', '{":v":{"constructor":"a"}}', '{":v":{"toString":{"S":"a"}}}',
  '{":v":{"__proto__":{"S":"a"}}}', '{"__proto__":{"S":"a"}}', '{":v":{"M":{"__proto__":{"S":"a"}}}}', '{":v":{"M":{"constructor":{"S":"a"}}}}',
  '{":v":{"S":"a"},":w":{"S":1},":x":{"N":"1"}}', '{"10":{"S":"a"},"2":{"S":"b"},"a":{"S":"c"}}', '[]', '"a"', '5', '{}',
]
for (const v of oddValues) {
  for (const action of [ 'updateItem', 'putItem', 'query', 'scan', 'deleteItem' ]) compare(action, withValues(action, {}, JSON.parse(v)), 'odd value')
  compare('putItem', JSON.stringify({ TableName: 'tasks', Item: JSON.parse(v) }), 'odd item')
  compare('getItem', JSON.stringify({ TableName: 'tasks', Key: JSON.parse(v) }), 'odd key')
}
const bodies = [
  [ 'updateItem', '{"TableName":5,"Key":{"pk":{"S":"a"}}}' ],
  [ 'updateItem', '{"TableName":"t","Key":{"pk":{"S":"a"}},"ExpressionAttributeNames":{"#a":1}}' ],
  [ 'updateItem', '{"TableName":"t","Key":{"pk":{"S":"a"}},"ExpressionAttributeNames":{"#a":null}}' ],
  [ 'updateItem', '{"TableName":"t","Key":{"pk":{"S":"a"}},"ExpressionAttributeNames":["a"]}' ],
  [ 'updateItem', '{"TableName":"t","Key":[{"S":"a"}]}' ],
  [ 'updateItem', '{"TableName":"t","Key":"a"}' ],
  [ 'updateItem', '{"TableName":"t","Key":{"pk":{"S":"a"}},"Unknown":1,"ReturnValues":null,"UpdateExpression":null}' ],
  [ 'updateItem', '{"Key":{"pk":{"S":"a"}},"TableName":"t","ReturnValues":"ALL_NEW","ExpressionAttributeValues":{":b":{"S":"b"},":a":{"N":"1"}}}' ],
  [ 'updateItem', '{"TableName":"t","Key":{"pk":{"S":"a"}},"AttributeUpdates":{"a":{"Action":"PUT","Value":{"S":"x"}},"b":{"Value":{"N":"1"},"Action":"ADD","Other":1},"c":{"Action":"DELETE","Value":null}}}' ],
  [ 'updateItem', '{"TableName":"t","Key":{"pk":{"S":"a"}},"AttributeUpdates":{"a":{"Action":"PUT","Value":{"S":5}}}}' ],
  [ 'updateItem', '{"TableName":"t","Key":{"pk":{"S":"a"}},"AttributeUpdates":{"a":{"Action":"PUT","Value":[]}}}' ],
  [ 'updateItem', '{"TableName":"t","Key":{"pk":{"S":"a"}},"AttributeUpdates":{"a":5}}' ],
  [ 'updateItem', '{"TableName":"t","Key":{"pk":{"S":"a"}},"Expected":{"a":{"Exists":"true"},"b":{"Exists":false,"Value":{"S":"x"}},"c":{"ComparisonOperator":"IN","AttributeValueList":[{"S":"a"},{"N":"1"}]}}}' ],
  [ 'updateItem', '{"TableName":"t","Key":{"pk":{"S":"a"}},"Expected":{"a":{"Exists":1}}}' ],
  [ 'updateItem', '{"TableName":"t","Key":{"pk":{"S":"a"}},"Expected":{"a":{"AttributeValueList":{"S":"a"}}}}' ],
  [ 'updateItem', '{"TableName":"t","Key":{"pk":{"S":"a"},"x":{"S":1}},"ExpressionAttributeValues":{":a":{"S":true}}}' ],
  [ 'updateItem', '{"TableName":"t","ExpressionAttributeValues":{":a":{"S":true}},"Key":{"pk":{"S":1}}}' ],
  [ 'query', '{"TableName":"t","Limit":2.7,"ConsistentRead":"yes","ScanIndexForward":false,"KeyConditionExpression":"pk = :p","ExpressionAttributeValues":{":p":{"S":"a"}},"ExclusiveStartKey":{"pk":{"S":"a"},"sk":{"N":"1"}}}' ],
  [ 'query', '{"TableName":"t","Limit":-2.5,"KeyConditions":{"pk":{"ComparisonOperator":"EQ","AttributeValueList":[{"S":"a"}]}},"QueryFilter":{"x":{"ComparisonOperator":"NULL"}}}' ],
  [ 'query', '{"TableName":"t","Limit":"2"}' ],
  [ 'query', '{"TableName":"t","Limit":true}' ],
  [ 'query', '{"TableName":"t","ConsistentRead":1}' ],
  [ 'query', '{"TableName":"t","AttributesToGet":["a",1]}' ],
  [ 'query', '{"TableName":"t","AttributesToGet":"a"}' ],
  [ 'scan', '{"TableName":"t","Segment":1,"TotalSegments":2.5,"ExclusiveStartKey":{"pk":{"B":"AAAA"}},"ScanFilter":{"a":{"ComparisonOperator":"EQ","AttributeValueList":[{"BOOL":"false"}]}}}' ],
  [ 'batchWriteItem', '{"RequestItems":{"t":[{"PutRequest":{"Item":{"pk":{"S":"a"},"n":{"N":"1"},"l":{"L":[{"M":{}}]}}}},{"DeleteRequest":{"Key":{"pk":{"S":"b"}}}},{"PutRequest":{"Item":{"pk":{"S":"c"}}},"Junk":1}],"u":[{"DeleteRequest":{"Key":{"pk":{"N":"1"}},"Junk":null}}]},"ReturnConsumedCapacity":"TOTAL"}' ],
  [ 'batchWriteItem', '{"RequestItems":{"t":[{"PutRequest":{"Item":{"pk":{"S":"a"}}}},{"PutRequest":{"Item":{"pk":{"S":1}}}}]}}' ],
  [ 'batchWriteItem', '{"RequestItems":{"t":[{"PutRequest":{"Item":{"pk":{"S":"a"},"b":{"BOOL":"true"}}}}]}}' ],
  [ 'batchWriteItem', '{"RequestItems":{"t":{"PutRequest":{"Item":{"pk":{"S":"a"}}}}}}' ],
  [ 'batchWriteItem', '{"RequestItems":{"t":[[]]}}' ],
  [ 'batchWriteItem', '{"RequestItems":{"t":["a"]}}' ],
  [ 'batchWriteItem', '{"RequestItems":{"t":"a"}}' ],
  [ 'batchWriteItem', '{"RequestItems":{"t":[{"PutRequest":[]}]}}' ],
  [ 'batchWriteItem', '{"RequestItems":{"t":[{"PutRequest":{"Item":[]}}]}}' ],
  [ 'batchWriteItem', '{"RequestItems":{"t":[null,{"PutRequest":{"Item":{"pk":{"S":"a"}}}}]}}' ],
  [ 'batchGetItem', '{"RequestItems":{"t":{"Keys":[{"pk":{"S":"a"}},{"pk":{"N":"2"}}],"ConsistentRead":true,"ProjectionExpression":"a","ExpressionAttributeNames":{"#a":"a"}},"u":{"Keys":[{"pk":{"S":"b"}}],"AttributesToGet":["x"]}}}' ],
  [ 'batchGetItem', '{"RequestItems":{"t":{"Keys":[{"pk":{"S":"a"}},[]]}}}' ],
  [ 'batchGetItem', '{"RequestItems":{"t":{"Keys":[{"pk":null}]}}}' ],
  [ 'batchGetItem', '{"RequestItems":{"t":{"Keys":{"pk":{"S":"a"}}}}}' ],
  [ 'batchGetItem', '{"RequestItems":{"t":{"Keys":["a"]}}}' ],
  [ 'batchGetItem', '{"RequestItems":[{"Keys":[]}]}' ],
  [ 'createTable', '{"TableName":"t","AttributeDefinitions":[{"AttributeName":"pk","AttributeType":"S"}],"KeySchema":[{"AttributeName":"pk","KeyType":"HASH"}],"ProvisionedThroughput":{"ReadCapacityUnits":1.5,"WriteCapacityUnits":"1"},"StreamSpecification":{"StreamEnabled":"true","StreamViewType":"NEW_IMAGE"}}' ],
  [ 'createTable', '{"TableName":"t","BillingMode":"PAY_PER_REQUEST","AttributeDefinitions":[{"AttributeName":"pk","AttributeType":"S"}],"KeySchema":[{"AttributeName":"pk","KeyType":"HASH"}],"GlobalSecondaryIndexes":[{"IndexName":"i","KeySchema":[{"AttributeName":"pk","KeyType":"HASH"}],"Projection":{"ProjectionType":"INCLUDE","NonKeyAttributes":["a"]}}],"Tags":[{"Key":"k","Value":"v"}]}' ],
  [ 'updateTable', '{"TableName":"t","StreamSpecification":{"StreamEnabled":true,"StreamViewType":"KEYS_ONLY"},"GlobalSecondaryIndexUpdates":[{"Delete":{"IndexName":"i"}}]}' ],
  [ 'listTables', '{"Limit":3.9,"ExclusiveStartTableName":"a"}' ],
  [ 'describeTable', '{"TableName":"t","Extra":{"S":"x"}}' ],
  [ 'tagResource', '{"ResourceArn":"arn","Tags":[{"Key":"a","Value":1}]}' ],
  [ 'putItem', 'null' ],
]
for (const [ action, json ] of bodies) compare(action, json, 'body')

// Random requests, from each action's type table.
const args = process.argv.slice(require.main ? 2 : 1) // node -e has no script name
const seed = Number(args[0] || 1), count = Number(args[1] || 2000)
let state = seed >>> 0
function rand () { // mulberry32
  state = (state + 0x6D2B79F5) >>> 0
  let t = state
  t = Math.imul(t ^ (t >>> 15), t | 1)
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}
const pick = a => a[Math.floor(rand() * a.length)]
const own = (o, k, v) => Object.defineProperty(o, k, { value: v, enumerable: true, writable: true, configurable: true })

let odds // the chance that a value is replaced by an odd one
const ODD = [ null, 'true', 'no', 'x', '', 0, 1, 2.5, -1, true, false, [], [ null ], [ 'a' ], [ 1 ], {}, { S: 'a' }, { S: 1 }, { N: '1', S: 'a' }, { B: 'AAAA' }, { a: null } ]
const KEYS = [ ':a', ':b', 'pk', 'sk', 'x', '0', '10', '2', 'constructor', 'toString', '__proto__', '', 'a.b', '#n' ]
function odd () {
  return JSON.parse(JSON.stringify(pick(ODD)))
}
function gen (type, depth) {
  if (rand() < odds) return odd()
  let name = type, children
  if (typeof type === 'object') { name = type.type; children = type.children }
  const m = /^(.+?)<(.+)>$/.exec(name)
  switch (m ? m[1] : name) {
  case 'String': return type.enum && rand() < 0.7 ? pick(type.enum) : pick([ 'a', 'tasks', 'SET a = :a', '#n', '', 'ALL_NEW' ])
  case 'Boolean': return rand() < 0.5
  case 'Short': case 'Integer': case 'Long': case 'Double': return pick([ 0, 1, 3, 25, 2.5, -3.7, 100, 1e21 ])
  case 'Blob': return pick([ '', 'AAAA', 'aGVsbG8=', 'abc', 'QQ==', 'a===' ])
  case 'List': case 'ParameterizedList': {
    const out = []
    for (let n = Math.floor(rand() * 4); n > 0; n--) out.push(gen(children, depth + 1))
    return out
  }
  case 'Map': case 'ParameterizedMap': {
    const out = {}
    for (let n = Math.floor(rand() * 5); n > 0; n--) own(out, rand() < 0.9 ? ':v' + Math.floor(rand() * 40) : pick(KEYS), gen(children, depth + 1))
    return out
  }
  case 'ValueStruct': case 'FieldStruct': return struct(children, depth + 1)
  case 'AttrStruct': return attributeValue(depth + 1)
  }
  throw new Error('no generator for ' + name)
}
function struct (table, depth) {
  const keys = Object.keys(table).filter(() => rand() < 0.6)
  if (rand() < 0.3) keys.reverse()
  const out = {}
  for (const k of keys) own(out, k, gen(table[k], depth))
  if (rand() < odds) own(out, pick(KEYS), odd())
  return out
}
function attributeValue (depth) {
  const deep = depth < 6 && rand() < 0.5
  const type = deep ? pick([ 'L', 'M' ]) : pick([ 'S', 'S', 'N', 'N', 'BOOL', 'NULL', 'SS', 'NS', 'L', 'M', 'B', 'BS' ])
  let v
  switch (type) {
  case 'S': v = pick([ 'a', '', 'x y', '\u00e9' ]); break
  case 'N': v = pick([ '1', '-2.5', '1e3' ]); break
  case 'BOOL': case 'NULL': v = rand() < 0.8 || type === 'BOOL' ? rand() < 0.5 : 'true'; break
  case 'SS': case 'NS': v = [ 'a', '1', '2' ].slice(0, Math.floor(rand() * 4)); break
  case 'B': v = pick([ 'AAAA', 'aGk=', 'abc' ]); break
  case 'BS': v = [ 'AAAA', 'QQ==' ].slice(0, Math.floor(rand() * 3)); break
  case 'L': v = []; for (let n = Math.floor(rand() * 4); n > 0; n--) v.push(rand() < odds ? odd() : attributeValue(depth + 1)); break
  case 'M': v = {}; for (let n = Math.floor(rand() * 4); n > 0; n--) own(v, pick(KEYS), rand() < odds ? odd() : attributeValue(depth + 1))
  }
  const out = { [type]: v }
  if (rand() < odds) own(out, pick([ 'S', 'N', 'X', 'M' ]), pick([ null, 'a', {} ]))
  return out
}
const actions = Object.keys(tables)
const itemActions = [ 'updateItem', 'putItem', 'getItem', 'deleteItem', 'query', 'scan', 'batchWriteItem', 'batchGetItem' ]
for (let i = 0; i < count && failures.length < 5; i++) {
  odds = pick([ 0, 0, 0.01, 0.03, 0.1, 0.3 ])
  const action = rand() < 0.8 ? pick(itemActions) : pick(actions)
  compare(action, JSON.stringify(struct(tables[action], 0)), 'random #' + i)
}

if (failures.length) {
  console.log(failures.slice(0, 5).join('\n\n'))
  process.exit(1)
}
console.log(stats.cases + ' requests (seed ' + seed + '): ' + stats.errors + ' rejected, ' + stats.direct + " checked without dynalite's checkTypes")
`
