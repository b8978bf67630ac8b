package localstack

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// The meter's cases are computed by hand from AWS's rules (shim/meter.js
// cites them); each one sits next to the boundary it tests, so one byte
// counted wrong moves a figure.

// meterTable creates a table keyed by pk with three global secondary
// indexes, one of each projection:
//
//	all:  status           ALL
//	keys: owner, at (N)    KEYS_ONLY
//	incl: queue            INCLUDE title
func meterTable(t *testing.T, c *dynamodb.Client, name string) {
	t.Helper()
	attr := func(n string, typ types.ScalarAttributeType) types.AttributeDefinition {
		return types.AttributeDefinition{AttributeName: aws.String(n), AttributeType: typ}
	}
	hash := func(n string) types.KeySchemaElement {
		return types.KeySchemaElement{AttributeName: aws.String(n), KeyType: types.KeyTypeHash}
	}
	in := &dynamodb.CreateTableInput{
		TableName:   aws.String(name),
		BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			attr("pk", types.ScalarAttributeTypeS), attr("status", types.ScalarAttributeTypeS),
			attr("owner", types.ScalarAttributeTypeS), attr("at", types.ScalarAttributeTypeN),
			attr("queue", types.ScalarAttributeTypeS),
		},
		KeySchema: []types.KeySchemaElement{hash("pk")},
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{
			{IndexName: aws.String("all"), KeySchema: []types.KeySchemaElement{hash("status")},
				Projection: &types.Projection{ProjectionType: types.ProjectionTypeAll}},
			{IndexName: aws.String("keys"), KeySchema: []types.KeySchemaElement{hash("owner"), {AttributeName: aws.String("at"), KeyType: types.KeyTypeRange}},
				Projection: &types.Projection{ProjectionType: types.ProjectionTypeKeysOnly}},
			{IndexName: aws.String("incl"), KeySchema: []types.KeySchemaElement{hash("queue")},
				Projection: &types.Projection{ProjectionType: types.ProjectionTypeInclude, NonKeyAttributes: []string{"title"}}},
		},
	}
	if _, err := c.CreateTable(ctxT(t), in); err != nil {
		t.Fatalf("CreateTable %s: %v", name, err)
	}
	w := dynamodb.NewTableExistsWaiter(c, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 10*time.Millisecond, 100*time.Millisecond
	})
	if err := w.Wait(ctxT(t), &dynamodb.DescribeTableInput{TableName: aws.String(name)}, 10*time.Second); err != nil {
		t.Fatalf("table %s not ACTIVE: %v", name, err)
	}
}

// consumed is a ConsumedCapacity in a comparable form: the total, the
// table's units and each index's.
type consumed struct {
	Total, Table float64
	Indexes      map[string]float64
}

func flat(c *types.ConsumedCapacity) consumed {
	if c == nil {
		return consumed{Total: -1}
	}
	out := consumed{Total: aws.ToFloat64(c.CapacityUnits), Indexes: map[string]float64{}}
	if c.Table != nil {
		out.Table = aws.ToFloat64(c.Table.CapacityUnits)
	}
	for n, ix := range c.GlobalSecondaryIndexes {
		out.Indexes[n] = aws.ToFloat64(ix.CapacityUnits)
	}
	return out
}

func (c consumed) String() string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	out := "total " + f(c.Total) + ", table " + f(c.Table)
	for _, n := range []string{"all", "keys", "incl"} {
		if v, ok := c.Indexes[n]; ok {
			out += ", " + n + " " + f(v)
		}
	}
	return out
}

func want(total, table float64, indexes ...any) consumed {
	c := consumed{Total: total, Table: table, Indexes: map[string]float64{}}
	for i := 0; i < len(indexes); i += 2 {
		c.Indexes[indexes[i].(string)] = float64(indexes[i+1].(int))
	}
	return c
}

func check(t *testing.T, what string, got *types.ConsumedCapacity, w consumed) {
	t.Helper()
	if g := flat(got); g.String() != w.String() {
		t.Errorf("%s: consumed %s, want %s", what, g, w)
	}
}

// av builds an item from pairs of name and value (string: S, int: N,
// anything else as is).
func av(pairs ...any) map[string]types.AttributeValue {
	item := map[string]types.AttributeValue{}
	for i := 0; i < len(pairs); i += 2 {
		switch v := pairs[i+1].(type) {
		case string:
			item[pairs[i].(string)] = s(v)
		case int:
			item[pairs[i].(string)] = n(v)
		case types.AttributeValue:
			item[pairs[i].(string)] = v
		}
	}
	return item
}

func meterClient(t *testing.T) (*dynamodb.Client, string, string) {
	t.Helper()
	endpoint := shimServer(t)
	name := uniqueName("meter")
	c := client(endpoint)
	meterTable(t, c, name)
	return c, endpoint, name
}

func capacityOf(t *testing.T, endpoint, prefix string) Capacity {
	t.Helper()
	got, err := ReadCapacity(ctxT(t), endpoint, prefix)
	if err != nil {
		t.Fatalf("ReadCapacity: %v", err)
	}
	return got
}

// Item sizes: names and strings in UTF-8 bytes, numbers by significant
// digits, lists and maps with their overheads, sets, binary, null. Each
// item below is 1,024 bytes (1 write unit) with pad long enough, and 1,025
// (2 units) with one more byte.
func TestMeterItemSize(t *testing.T) {
	t.Parallel()
	c, _, table := meterClient(t)
	bin := &types.AttributeValueMemberB{Value: []byte{0, 1, 2, 3}}
	list := &types.AttributeValueMemberL{Value: []types.AttributeValue{s("ab"), n(12345)}}
	mp := &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"k": &types.AttributeValueMemberBOOL{Value: true}}}
	set := &types.AttributeValueMemberSS{Value: []string{"ab", "cde"}}
	null := &types.AttributeValueMemberNULL{Value: true}
	// Each put is of a new item keyed by one ASCII letter.
	cases := []struct {
		name  string
		fixed int // bytes of the item without pad's value
		item  func(pad string) map[string]types.AttributeValue
	}{
		// "pk"(2)+"k"(1) + "pad"(3)
		{"strings", 2 + 1 + 3, func(pad string) map[string]types.AttributeValue { return av("pk", "k", "pad", pad) }},
		// "é"(2, UTF-8) + "ü"(2)
		{"utf-8", 2 + 1 + 3 + 4, func(pad string) map[string]types.AttributeValue { return av("pk", "k", "pad", pad, "é", "ü") }},
		// "num"(3) + 1784000000000: 4 significant digits, 2 bytes + 1
		{"number", 2 + 1 + 3 + 3 + 3, func(pad string) map[string]types.AttributeValue {
			return av("pk", "k", "pad", pad, "num", &types.AttributeValueMemberN{Value: "1784000000000"})
		}},
		// "neg"(3) + -0.00123: 3 significant digits, 2 bytes + 1
		{"fraction", 2 + 1 + 3 + 3 + 3, func(pad string) map[string]types.AttributeValue {
			return av("pk", "k", "pad", pad, "neg", &types.AttributeValueMemberN{Value: "-0.00123"})
		}},
		// "l"(1) + 3 + ("ab" 2 + 1) + (12345: 3+1 bytes, + 1) = 12
		{"list", 2 + 1 + 3 + 12, func(pad string) map[string]types.AttributeValue { return av("pk", "k", "pad", pad, "l", list) }},
		// "m"(1) + 3 + ("k"(1) + true 1 + 1) = 7
		{"map", 2 + 1 + 3 + 7, func(pad string) map[string]types.AttributeValue { return av("pk", "k", "pad", pad, "m", mp) }},
		// "ss"(2) + 2 + 3 = 7; "b"(1) + 4 raw bytes = 5; "z"(1) + 1 = 2
		{"set, binary, null", 2 + 1 + 3 + 7 + 5 + 2, func(pad string) map[string]types.AttributeValue {
			return av("pk", "k", "pad", pad, "ss", set, "b", bin, "z", null)
		}},
	}
	for i, tc := range cases {
		for _, extra := range []int{0, 1} {
			pad := strings.Repeat("x", 1024-tc.fixed+extra)
			item := tc.item(pad)
			item["pk"] = s(string(rune('a' + 2*i + extra)))
			out, err := c.PutItem(ctxT(t), &dynamodb.PutItemInput{TableName: aws.String(table), Item: item,
				ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal})
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if got, w := aws.ToFloat64(out.ConsumedCapacity.CapacityUnits), float64(1+extra); got != w {
				t.Errorf("%s, %d bytes: %v write units, want %v", tc.name, 1024+extra, got, w)
			}
		}
	}
}

// Writes bill the larger image; a failed condition bills the item it was
// tried on, or 1 unit, and only in the totals.
func TestMeterWrites(t *testing.T) {
	t.Parallel()
	c, endpoint, table := meterClient(t)
	ctx := ctxT(t)
	// "pk"(2)+"w"(1) + "body"(4) + 2,500 = 2,507 bytes: 3 units.
	big := av("pk", "w", "body", strings.Repeat("b", 2500))
	out, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: big, ReturnConsumedCapacity: types.ReturnConsumedCapacityIndexes})
	if err != nil {
		t.Fatal(err)
	}
	check(t, "put 2,507 bytes", out.ConsumedCapacity, want(3, 3))

	// Shrinking it to 10 bytes bills the 2,507 before.
	up, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(table), Key: key("w"),
		UpdateExpression: aws.String("SET body = :b"), ExpressionAttributeValues: av(":b", "abc"),
		ReturnConsumedCapacity: types.ReturnConsumedCapacityIndexes})
	if err != nil {
		t.Fatal(err)
	}
	check(t, "update 2,507 -> 10 bytes", up.ConsumedCapacity, want(3, 3))

	// A put over it bills the larger, the new 2,507.
	out, err = c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: big, ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal})
	if err != nil {
		t.Fatal(err)
	}
	check(t, "put 10 -> 2,507 bytes", out.ConsumedCapacity, consumed{Total: 3})

	before := capacityOf(t, endpoint, table)
	// A failed condition: 3 units (the 2,507 bytes it was tried on), not
	// reported in the error, counted in the totals; ALL_OLD is free.
	_, err = c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: av("pk", "w"),
		ConditionExpression:                 aws.String("attribute_not_exists(pk)"),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		ReturnConsumedCapacity:              types.ReturnConsumedCapacityIndexes})
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		t.Fatalf("conditional put: %v", err)
	}
	// On a missing item: 1 unit.
	_, err = c.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(table), Key: key("none"),
		UpdateExpression: aws.String("SET v = :v"), ConditionExpression: aws.String("attribute_exists(pk)"),
		ExpressionAttributeValues: av(":v", 1), ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal})
	if !errors.As(err, &ccf) {
		t.Fatalf("conditional update: %v", err)
	}
	d := capacityOf(t, endpoint, table).Sub(before)
	if got := d.Tables[table]; got != (Units{Write: 4}) {
		t.Errorf("failed conditions: %+v, want 3 + 1 write units", got)
	}
	if got := d.Partitions[Partition{table, "", "w"}]; got != (Units{Write: 3}) {
		t.Errorf("failed condition on w: %+v in partitions %v, want 3 write units", got, d.Partitions)
	}

	// A delete bills the item it deletes; a delete of nothing 1 unit.
	del, err := c.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(table), Key: key("w"), ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal})
	if err != nil {
		t.Fatal(err)
	}
	check(t, "delete 2,507 bytes", del.ConsumedCapacity, consumed{Total: 3})
	del, err = c.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(table), Key: key("w"), ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal})
	if err != nil {
		t.Fatal(err)
	}
	check(t, "delete of nothing", del.ConsumedCapacity, consumed{Total: 1})
	if got := capacityOf(t, endpoint, table).Sub(before).Partitions[Partition{table, "", "w"}]; got != (Units{Write: 3 + 3 + 1}) {
		t.Errorf("partition w after a failed put, a delete and a delete of nothing: %+v, want 7 write units", got)
	}
	// NONE (or no field) answers no ConsumedCapacity.
	del, err = c.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(table), Key: key("w")})
	if err != nil {
		t.Fatal(err)
	}
	if del.ConsumedCapacity != nil {
		t.Errorf("no ReturnConsumedCapacity, got %s", flat(del.ConsumedCapacity))
	}
}

// Index writes: put, update, delete and key change, each index sized by its
// projection, and nothing for an item the index does not hold.
//
// The item: pk "t1" (2+2) status "todo" (6+4) owner "ann" (5+3) at 1700
// (2+2) queue "q" (5+1) title "hi" (5+2) body (4+n): 43+n bytes. Entries,
// with 100 bytes of overhead each: all = the item; keys = pk, owner, at
// (16); incl = pk, queue, title (17).
func TestMeterIndexWrites(t *testing.T) {
	t.Parallel()
	c, endpoint, table := meterClient(t)
	ctx := ctxT(t)
	// Index entries are billed when the table is written, whatever the lag.
	if err := SetIndexLag(ctx, endpoint, table, time.Hour); err != nil {
		t.Fatal(err)
	}
	update := func(what, expr string, values map[string]types.AttributeValue, w consumed) {
		t.Helper()
		in := &dynamodb.UpdateItemInput{TableName: aws.String(table), Key: key("t1"), UpdateExpression: aws.String(expr),
			ExpressionAttributeValues: values, ReturnConsumedCapacity: types.ReturnConsumedCapacityIndexes}
		for alias, name := range map[string]string{"#s": "status", "#o": "owner"} {
			if strings.Contains(expr, alias) {
				in.ExpressionAttributeNames = map[string]string{alias: name}
			}
		}
		out, err := c.UpdateItem(ctx, in)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		check(t, what, out.ConsumedCapacity, w)
	}
	item := av("pk", "t1", "status", "todo", "owner", "ann", "at", 1700, "queue", "q", "title", "hi", "body", strings.Repeat("b", 2000))
	out, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: item, ReturnConsumedCapacity: types.ReturnConsumedCapacityIndexes})
	if err != nil {
		t.Fatal(err)
	}
	// 2,043 bytes: table 2; all 2,143: 3; keys 116: 1; incl 117: 1.
	check(t, "new item", out.ConsumedCapacity, want(7, 2, "all", 3, "keys", 1, "incl", 1))

	// body 2,100 (item 2,143): table 3; all updated, 2,243: 3; keys and incl
	// project no body: nothing.
	update("change of an attribute only ALL projects", "SET body = :b", av(":b", strings.Repeat("b", 2100)), want(6, 3, "all", 3))
	// title "hey" (item 2,144): all 3, incl updated 1.
	update("change of an INCLUDEd attribute", "SET title = :t", av(":t", "hey"), want(7, 3, "all", 3, "incl", 1))
	// status todo -> done: all deletes 2,244 and puts 2,244: 3 + 3.
	update("change of an index key", "SET #s = :s", av(":s", "done"), func() consumed {
		w := want(9, 3, "all", 6)
		return w
	}())
	// owner removed (item 2,136): keys deletes its 116-byte entry.
	update("index key removed (sparse)", "REMOVE #o", nil, want(7, 3, "all", 3, "keys", 1))
	// owner back: keys puts.
	update("index key added", "SET #o = :o", av(":o", "bob"), want(7, 3, "all", 3, "keys", 1))
	// The same values again: the item is written, no index entry changes.
	update("no change", "SET #o = :o", av(":o", "bob"), want(3, 3))

	del, err := c.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(table), Key: key("t1"), ReturnConsumedCapacity: types.ReturnConsumedCapacityIndexes})
	if err != nil {
		t.Fatal(err)
	}
	check(t, "delete", del.ConsumedCapacity, want(8, 3, "all", 3, "keys", 1, "incl", 1))

	// An item with no index key is in no index.
	out, err = c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: av("pk", "t2", "body", "0123456789"),
		ReturnConsumedCapacity: types.ReturnConsumedCapacityIndexes})
	if err != nil {
		t.Fatal(err)
	}
	check(t, "item in no index", out.ConsumedCapacity, want(1, 1))

	// The 100 bytes of an entry's overhead: pk "eN" (4) + owner (5+n) + at
	// 1700 (4) is a 13+n byte item, a 113+n byte KEYS_ONLY entry.
	for _, n := range []int{911, 912} {
		out, err = c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table),
			Item:                   av("pk", "e"+strconv.Itoa(n%10), "owner", strings.Repeat("o", n), "at", 1700),
			ReturnConsumedCapacity: types.ReturnConsumedCapacityIndexes})
		if err != nil {
			t.Fatal(err)
		}
		entry := n - 911 + 1 // 1,024 bytes: 1 unit; 1,025: 2
		check(t, "entry of "+strconv.Itoa(113+n)+" bytes", out.ConsumedCapacity, want(float64(1+entry), 1, "keys", entry))
	}

	// The partitions: every status entry of the item landed on "todo" (put,
	// two updates, the delete of the key change) or "done" (the put of the
	// key change, three updates, the delete).
	got := capacityOf(t, endpoint, table)
	for _, pc := range []struct {
		p Partition
		w float64
	}{
		{Partition{table, "all", "todo"}, 3 + 3 + 3 + 3},
		{Partition{table, "all", "done"}, 3 + 3 + 3 + 3},
		{Partition{table, "keys", "ann"}, 1 + 1},
		{Partition{table, "keys", "bob"}, 1 + 1},
		{Partition{table, "incl", "q"}, 1 + 1 + 1},
		{Partition{table, "", "t1"}, 2 + 3*7},
		{Partition{table, "", "t2"}, 1},
	} {
		if u := got.Partitions[pc.p]; u.Write != pc.w {
			t.Errorf("partition %+v: %v write units, want %v", pc.p, u.Write, pc.w)
		}
	}
	if w := got.Indexes[IndexKey(table, "all")].Write; w != 3+3+3+6+3+3+3 {
		t.Errorf("index all: %v write units", w)
	}
	if total := got.Total().Write; total != 7+6+7+9+7+7+3+8+1+2+3 {
		t.Errorf("total %v write units", total)
	}
}

// Reads: 4 KB units, half when eventually consistent, at least one unit;
// GetItem and BatchGetItem round each item, Query and Scan the sum of what
// they read, before filters and projections.
func TestMeterReads(t *testing.T) {
	t.Parallel()
	c, endpoint, table := meterClient(t)
	ctx := ctxT(t)
	// "pk"(2)+"rN"(2) + "status"(6)+"s"(1) + "body"(4) + 1,985 = 2,000 bytes.
	for _, pk := range []string{"r1", "r2", "r3"} {
		put(t, c, table, av("pk", pk, "status", "s", "body", strings.Repeat("b", 1985)))
	}
	// "pk" + "r4" + "body" + 4,996 = 5,004 bytes.
	put(t, c, table, av("pk", "r4", "body", strings.Repeat("b", 4996)))
	if err := ResetCapacity(ctx, endpoint, table); err != nil {
		t.Fatal(err)
	}
	get := func(what, pk string, consistent bool, w float64) {
		t.Helper()
		out, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: key(pk), ConsistentRead: aws.Bool(consistent),
			ProjectionExpression: aws.String("pk"), ReturnConsumedCapacity: types.ReturnConsumedCapacityIndexes})
		if err != nil {
			t.Fatal(err)
		}
		check(t, what, out.ConsumedCapacity, want(w, w))
	}
	get("get 5,004 bytes, consistent (projection ignored)", "r4", true, 2)
	get("get 5,004 bytes, eventually consistent", "r4", false, 1)
	get("get of nothing, consistent", "none", true, 1)
	get("get of nothing, eventually consistent", "none", false, 0.5)

	query := func(what string, in *dynamodb.QueryInput, w consumed) {
		t.Helper()
		in.TableName, in.ReturnConsumedCapacity = aws.String(table), types.ReturnConsumedCapacityIndexes
		out, err := c.Query(ctx, in)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		check(t, what, out.ConsumedCapacity, w)
	}
	byStatus := func(v string) *dynamodb.QueryInput {
		return &dynamodb.QueryInput{IndexName: aws.String("all"), KeyConditionExpression: aws.String("#s = :s"),
			ExpressionAttributeNames: map[string]string{"#s": "status"}, ExpressionAttributeValues: av(":s", v)}
	}
	// Three entries of 2,000 bytes: 6,000 bytes, 2 units, halved.
	query("query of an index", byStatus("s"), consumed{Total: 1, Indexes: map[string]float64{"all": 1}})
	q := byStatus("s")
	q.FilterExpression, q.ExpressionAttributeValues = aws.String("body = :none"), av(":s", "s", ":none", "x")
	query("query whose filter keeps nothing", q, consumed{Total: 1, Indexes: map[string]float64{"all": 1}})
	q = byStatus("s")
	q.Limit = aws.Int32(2) // 4,000 bytes: 1 unit, halved
	query("query with a limit", q, consumed{Total: 0.5, Indexes: map[string]float64{"all": 0.5}})
	query("empty query", byStatus("nothing"), consumed{Total: 0.5, Indexes: map[string]float64{"all": 0.5}})
	query("consistent query of the table", &dynamodb.QueryInput{KeyConditionExpression: aws.String("pk = :p"),
		ExpressionAttributeValues: av(":p", "r4"), ConsistentRead: aws.Bool(true), ProjectionExpression: aws.String("pk")}, want(2, 2))

	// Scan: 3 x 2,000 + 5,004 = 11,004 bytes: 3 units, halved.
	scan, err := c.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(table), ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal})
	if err != nil {
		t.Fatal(err)
	}
	check(t, "scan", scan.ConsumedCapacity, consumed{Total: 1.5})

	// BatchGetItem rounds each item: 1 + 1 + 2 consistent, plus 1 for a
	// key that is missing.
	bg, err := c.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
		table: {Keys: []map[string]types.AttributeValue{key("r1"), key("r2"), key("r4"), key("none")}, ConsistentRead: aws.Bool(true)},
	}, ReturnConsumedCapacity: types.ReturnConsumedCapacityIndexes})
	if err != nil {
		t.Fatal(err)
	}
	if len(bg.ConsumedCapacity) != 1 {
		t.Fatalf("batch get: ConsumedCapacity %v, want one per table", bg.ConsumedCapacity)
	}
	check(t, "batch get", &bg.ConsumedCapacity[0], want(5, 5))

	got := capacityOf(t, endpoint, table)
	if w := (Units{Read: 2 + 1 + 1 + 0.5 + 2 + 1.5 + 5}); got.Tables[table] != w {
		t.Errorf("table reads %+v, want %+v", got.Tables[table], w)
	}
	if w := (Units{Read: 1 + 1 + 0.5 + 0.5}); got.Indexes[IndexKey(table, "all")] != w {
		t.Errorf("index reads %+v, want %+v", got.Indexes[IndexKey(table, "all")], w)
	}
	if r := got.Partitions[Partition{table, "all", "s"}].Read; r != 2.5 {
		t.Errorf("index partition s: %v read units, want 2.5", r)
	}
	if r := got.Partitions[Partition{table, "", "r4"}].Read; r != 2+1+2+2 {
		t.Errorf("table partition r4: %v read units, want 7", r)
	}
}

// BatchWriteItem answers one ConsumedCapacity per table, indexes included.
func TestMeterBatchWrite(t *testing.T) {
	t.Parallel()
	c, endpoint, table := meterClient(t)
	other := uniqueName("meter")
	meterTable(t, c, other)
	ctx := ctxT(t)
	putReq := func(item map[string]types.AttributeValue) types.WriteRequest {
		return types.WriteRequest{PutRequest: &types.PutRequest{Item: item}}
	}
	out, err := c.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{
		table: {putReq(av("pk", "a", "status", "s")), putReq(av("pk", "b", "status", "s", "queue", "q"))},
		other: {putReq(av("pk", "a"))},
	}, ReturnConsumedCapacity: types.ReturnConsumedCapacityIndexes})
	if err != nil {
		t.Fatal(err)
	}
	byTable := map[string]types.ConsumedCapacity{}
	for _, cc := range out.ConsumedCapacity {
		byTable[aws.ToString(cc.TableName)] = cc
	}
	if len(byTable) != 2 {
		t.Fatalf("ConsumedCapacity %v, want one per table", out.ConsumedCapacity)
	}
	tc, oc := byTable[table], byTable[other]
	check(t, "batch, first table", &tc, want(5, 2, "all", 2, "incl", 1))
	check(t, "batch, second table", &oc, want(1, 1))

	// Totals are kept per table, and reset by prefix.
	if err := ResetCapacity(ctx, endpoint, table); err != nil {
		t.Fatal(err)
	}
	if got := capacityOf(t, endpoint, table).Total(); !got.IsZero() {
		t.Errorf("after reset: %+v", got)
	}
	if got := capacityOf(t, endpoint, other).Total(); got != (Units{Write: 1}) {
		t.Errorf("the other table after a reset of the first: %+v", got)
	}
	busiest := capacityOf(t, endpoint, other).Busiest()
	if len(busiest) != 1 || busiest[0].Partition != (Partition{other, "", "a"}) || busiest[0].Write != 1 {
		t.Errorf("busiest %+v", busiest)
	}
}
