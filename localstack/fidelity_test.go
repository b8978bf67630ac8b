package localstack

import (
	"fmt"
	"math/big"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// The tests here hold the local DynamoDB to what real DynamoDB refuses, so
// that a product bug that AWS would answer with a ValidationException does
// not pass locally. Each names the AWS API reference's rule it checks.

// indexedTable creates a table keyed by pk (S) and sk (S), with a global
// secondary index "by-g" (partition key g, S; sort key b, B) and a local
// secondary index "by-l" (sort key l, S).
func indexedTable(t *testing.T, c *dynamodb.Client, name string) {
	t.Helper()
	attr := func(n string, ty types.ScalarAttributeType) types.AttributeDefinition {
		return types.AttributeDefinition{AttributeName: aws.String(n), AttributeType: ty}
	}
	ks := func(n string, ty types.KeyType) types.KeySchemaElement {
		return types.KeySchemaElement{AttributeName: aws.String(n), KeyType: ty}
	}
	all := &types.Projection{ProjectionType: types.ProjectionTypeAll}
	_, err := c.CreateTable(ctxT(t), &dynamodb.CreateTableInput{
		TableName:   aws.String(name),
		BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			attr("pk", types.ScalarAttributeTypeS), attr("sk", types.ScalarAttributeTypeS),
			attr("g", types.ScalarAttributeTypeS), attr("b", types.ScalarAttributeTypeB), attr("l", types.ScalarAttributeTypeS),
		},
		KeySchema: []types.KeySchemaElement{ks("pk", types.KeyTypeHash), ks("sk", types.KeyTypeRange)},
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{{
			IndexName: aws.String("by-g"), Projection: all,
			KeySchema: []types.KeySchemaElement{ks("g", types.KeyTypeHash), ks("b", types.KeyTypeRange)},
		}},
		LocalSecondaryIndexes: []types.LocalSecondaryIndex{{
			IndexName: aws.String("by-l"), Projection: all,
			KeySchema: []types.KeySchemaElement{ks("pk", types.KeyTypeHash), ks("l", types.KeyTypeRange)},
		}},
	})
	if err != nil {
		t.Fatalf("CreateTable %s: %v", name, err)
	}
	w := dynamodb.NewTableExistsWaiter(c, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 10*time.Millisecond, 100*time.Millisecond
	})
	if err := w.Wait(ctxT(t), &dynamodb.DescribeTableInput{TableName: aws.String(name)}, 10*time.Second); err != nil {
		t.Fatalf("table %s not ACTIVE: %v", name, err)
	}
}

// refused fails the test unless err is a ValidationException whose message
// contains want.
func refused(t *testing.T, what string, err error, want string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: accepted; want ValidationException %q", what, want)
		return
	}
	if apiCode(err) != "ValidationException" || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: %v; want ValidationException %q", what, err, want)
	}
}

// Scan's ConsistentRead: "not supported on global secondary indexes. If you
// scan a global secondary index with ConsistentRead set to true, you will
// receive a ValidationException." A local secondary index allows it.
func TestScanConsistentReadOnGlobalIndex(t *testing.T) {
	t.Parallel()
	c := client(shimServer(t))
	table := uniqueName("scancr")
	indexedTable(t, c, table)
	_, err := c.Scan(ctxT(t), &dynamodb.ScanInput{TableName: aws.String(table), IndexName: aws.String("by-g"), ConsistentRead: aws.Bool(true)})
	refused(t, "Scan of a GSI with ConsistentRead", err, "Consistent reads are not supported on global secondary indexes")
	_, err = c.Query(ctxT(t), &dynamodb.QueryInput{
		TableName: aws.String(table), IndexName: aws.String("by-g"), ConsistentRead: aws.Bool(true),
		KeyConditionExpression:    aws.String("g = :g"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":g": s("x")},
	})
	refused(t, "Query of a GSI with ConsistentRead", err, "Consistent reads are not supported on global secondary indexes")
	for _, ix := range []*string{nil, aws.String("by-l")} {
		if _, err := c.Scan(ctxT(t), &dynamodb.ScanInput{TableName: aws.String(table), IndexName: ix, ConsistentRead: aws.Bool(true)}); err != nil {
			t.Errorf("Scan of %v with ConsistentRead: %v", aws.ToString(ix), err)
		}
	}
}

// ReturnValues (API reference, DeleteItem and PutItem): "DeleteItem does
// not recognize any values other than NONE or ALL_OLD", and likewise
// PutItem. dynalite refused the others on PutItem only.
func TestReturnValuesOfDeleteAndPut(t *testing.T) {
	t.Parallel()
	c := client(shimServer(t))
	table := uniqueName("retvals")
	indexedTable(t, c, table)
	item := map[string]types.AttributeValue{"pk": s("p"), "sk": s("s"), "x": n(1)}
	k := map[string]types.AttributeValue{"pk": s("p"), "sk": s("s")}
	for _, rv := range []types.ReturnValue{types.ReturnValueUpdatedOld, types.ReturnValueUpdatedNew, types.ReturnValueAllNew} {
		_, err := c.PutItem(ctxT(t), &dynamodb.PutItemInput{TableName: aws.String(table), Item: item, ReturnValues: rv})
		refused(t, "PutItem ReturnValues "+string(rv), err, "ReturnValues can only be ALL_OLD or NONE")
		_, err = c.DeleteItem(ctxT(t), &dynamodb.DeleteItemInput{TableName: aws.String(table), Key: k, ReturnValues: rv})
		refused(t, "DeleteItem ReturnValues "+string(rv), err, "ReturnValues can only be ALL_OLD or NONE")
	}
	put(t, c, table, item)
	out, err := c.DeleteItem(ctxT(t), &dynamodb.DeleteItemInput{TableName: aws.String(table), Key: k, ReturnValues: types.ReturnValueAllOld})
	if err != nil || attrN(out.Attributes, "x") != "1" {
		t.Fatalf("DeleteItem ALL_OLD: %v, %v; want the item", out, err)
	}
	if _, err := c.DeleteItem(ctxT(t), &dynamodb.DeleteItemInput{TableName: aws.String(table), Key: k, ReturnValues: types.ReturnValueNone}); err != nil {
		t.Fatalf("DeleteItem NONE: %v", err)
	}
}

// Empty index keys (API reference, PutItem and UpdateItem; "Amazon DynamoDB
// now supports empty values for non-key String and Binary attributes"): a
// String or Binary attribute that is a key of a global or local secondary
// index cannot be empty; DynamoDB refuses the write with a
// ValidationException naming the index and the key ("A value specified for
// a secondary index key is not supported. The AttributeValue for a key
// attribute cannot contain an empty string value. IndexName: ..., IndexKey:
// ..."). dynalite refused empty table keys only. An UpdateItem is judged on
// the item it makes, whatever put the empty value there.
func TestEmptyIndexKeysRefused(t *testing.T) {
	t.Parallel()
	c := client(shimServer(t))
	table := uniqueName("emptykey")
	indexedTable(t, c, table)
	item := func(extra ...any) map[string]types.AttributeValue {
		it := map[string]types.AttributeValue{"pk": s("p"), "sk": s("s")}
		for i := 0; i < len(extra); i += 2 {
			it[extra[i].(string)] = extra[i+1].(types.AttributeValue)
		}
		return it
	}
	emptyB := &types.AttributeValueMemberB{Value: []byte{}}
	const emptyS, emptyBin = "cannot contain an empty string value", "cannot contain an empty binary value"

	// Table keys: refused already.
	_, err := c.PutItem(ctxT(t), &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{"pk": s("p"), "sk": s("")}})
	refused(t, "PutItem with an empty table key", err, emptyS+". Key: sk")

	for _, tc := range []struct {
		what string
		item map[string]types.AttributeValue
		want string
	}{
		{"GSI partition key", item("g", s("")), emptyS + ". IndexName: by-g, IndexKey: g"},
		{"GSI sort key (binary)", item("g", s("x"), "b", emptyB), emptyBin + ". IndexName: by-g, IndexKey: b"},
		{"LSI sort key", item("l", s("")), emptyS + ". IndexName: by-l, IndexKey: l"},
	} {
		_, err := c.PutItem(ctxT(t), &dynamodb.PutItemInput{TableName: aws.String(table), Item: tc.item})
		refused(t, "PutItem with an empty "+tc.what, err, tc.want)
		_, err = c.BatchWriteItem(ctxT(t), &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{
			table: {{PutRequest: &types.PutRequest{Item: item("sk", s("other"), "x", n(1))}}, {PutRequest: &types.PutRequest{Item: tc.item}}},
		}})
		refused(t, "BatchWriteItem with an empty "+tc.what, err, tc.want)
	}
	// The refused batch wrote nothing.
	if out, err := c.GetItem(ctxT(t), &dynamodb.GetItemInput{TableName: aws.String(table), Key: item("sk", s("other"))}); err != nil || out.Item != nil {
		t.Errorf("GetItem after refused batches: %v, %v; want no item", out.Item, err)
	}

	// Empty values of other attributes, and of an index key in a map, are fine.
	put(t, c, table, item("x", s(""), "y", emptyB, "m", &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"g": s("")}}, "e", s("")))

	upd := func(expr string, vals map[string]types.AttributeValue) error {
		_, err := c.UpdateItem(ctxT(t), &dynamodb.UpdateItemInput{
			TableName: aws.String(table), Key: item(), UpdateExpression: aws.String(expr), ExpressionAttributeValues: vals,
		})
		return err
	}
	refused(t, "UpdateItem SET g = :empty", upd("SET g = :e", map[string]types.AttributeValue{":e": s("")}), emptyS)
	refused(t, "UpdateItem SET g = e (an empty attribute)", upd("SET g = e", nil), "IndexName: by-g, IndexKey: g")
	refused(t, "UpdateItem SET l = if_not_exists(l, e)", upd("SET l = if_not_exists(l, e)", nil), "IndexName: by-l, IndexKey: l")
	refused(t, "UpdateItem SET g = :x, b = y (empty binary)", upd("SET g = :x, b = y", map[string]types.AttributeValue{":x": s("x")}), emptyBin)
	_, err = c.UpdateItem(ctxT(t), &dynamodb.UpdateItemInput{
		TableName: aws.String(table), Key: item(),
		AttributeUpdates: map[string]types.AttributeValueUpdate{"g": {Value: s(""), Action: types.AttributeActionPut}},
	})
	refused(t, "UpdateItem AttributeUpdates PUT g empty", err, "IndexName: by-g, IndexKey: g")
	// None of them changed the item; a non-empty index key is fine.
	if out, err := c.GetItem(ctxT(t), &dynamodb.GetItemInput{TableName: aws.String(table), Key: item(), ConsistentRead: aws.Bool(true)}); err != nil || out.Item["g"] != nil || out.Item["l"] != nil || out.Item["b"] != nil {
		t.Errorf("the item after refused updates: %v, %v; want no g, l or b", out.Item, err)
	}
	if err := upd("SET g = :x, l = :x, e = :e", map[string]types.AttributeValue{":x": s("x"), ":e": s("")}); err != nil {
		t.Fatalf("UpdateItem with non-empty index keys: %v", err)
	}
}

// Item size (Developer Guide, "DynamoDB item sizes and formats"; the 400 KB
// limit in "Constraints"): strings and attribute names count their UTF-8
// bytes. dynalite counted UTF-16 code units, so an item of multibyte text
// up to three times too large was stored locally and refused in AWS.
func TestItemSizeLimitCountsUTF8Bytes(t *testing.T) {
	t.Parallel()
	c := client(shimServer(t))
	table := uniqueName("itemsize")
	indexedTable(t, c, table)
	const limit = 400 * 1024
	k := map[string]types.AttributeValue{"pk": s("p"), "sk": s("s")}
	with := func(name, text string) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{"pk": s("p"), "sk": s("s"), name: s(text)}
	}
	keyBytes := len("pk") + len("p") + len("sk") + len("s")
	// "€" is 3 UTF-8 bytes and 1 UTF-16 unit; "😀" 4 bytes and 2 units.
	euros := strings.Repeat("€", (limit-keyBytes-1)/3+1) // one byte over with the name "x"
	emoji := strings.Repeat("😀", limit/4)
	for what, it := range map[string]map[string]types.AttributeValue{
		"3-byte characters": with("x", euros),
		"4-byte characters": with("x", emoji),
		"a multibyte name":  with(strings.Repeat("é", 20000), strings.Repeat("a", limit-keyBytes-30000)),
	} {
		_, err := c.PutItem(ctxT(t), &dynamodb.PutItemInput{TableName: aws.String(table), Item: it})
		refused(t, "PutItem of "+what, err, "Item size has exceeded the maximum allowed size")
		_, err = c.BatchWriteItem(ctxT(t), &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{
			table: {{PutRequest: &types.PutRequest{Item: it}}},
		}})
		refused(t, "BatchWriteItem of "+what, err, "Item size has exceeded the maximum allowed size")
	}
	put(t, c, table, k) // what a refused put above may have left is replaced
	_, err := c.UpdateItem(ctxT(t), &dynamodb.UpdateItemInput{
		TableName: aws.String(table), Key: k, UpdateExpression: aws.String("SET x = :x"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":x": s(euros)},
	})
	refused(t, "UpdateItem to 3-byte characters", err, "Item size to update has exceeded the maximum allowed size")

	// Exactly at the limit is fine, in bytes.
	atLimit := with("x", strings.Repeat("€", (limit-keyBytes-1)/3)+strings.Repeat("a", (limit-keyBytes-1)%3))
	put(t, c, table, atLimit)
	if _, err := c.UpdateItem(ctxT(t), &dynamodb.UpdateItemInput{
		TableName: aws.String(table), Key: k, UpdateExpression: aws.String("SET x = :x"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":x": s(strings.Repeat("a", limit-keyBytes-1))},
	}); err != nil {
		t.Fatalf("UpdateItem to an item of exactly 400 KB: %v", err)
	}
}

// Number range (API reference, AttributeValue N; Developer Guide, "Data
// types"): up to 38 digits of precision, magnitude from 1E-130 to
// 9.9999999999999999999999999999999999999E+125. DynamoDB refuses an ADD or
// a SET with + or - whose result is out of that range ("Number overflow.
// Attempting to store a number with magnitude larger than supported range";
// a result that needs more than 38 digits, as 1E+50 + 1, is refused with
// the same message, as other emulators checked against AWS report).
// dynalite checked the numbers of the request only, and stored any result.
func TestNumberArithmeticOverflowRefused(t *testing.T) {
	t.Parallel()
	c := client(shimServer(t))
	table := uniqueName("numrange")
	indexedTable(t, c, table)
	k := map[string]types.AttributeValue{"pk": s("p"), "sk": s("s")}
	N := func(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
	const max, overflow = "9.9999999999999999999999999999999999999E+125", "Number overflow. Attempting to store a number with magnitude larger than supported range"
	upd := func(x, expr string, vals map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
		put(t, c, table, map[string]types.AttributeValue{"pk": s("p"), "sk": s("s"), "x": N(x)})
		out, err := c.UpdateItem(ctxT(t), &dynamodb.UpdateItemInput{
			TableName: aws.String(table), Key: k, UpdateExpression: aws.String(expr), ExpressionAttributeValues: vals,
			ReturnValues: types.ReturnValueAllNew,
		})
		if err != nil {
			return nil, err
		}
		return out.Attributes, nil
	}
	for _, tc := range []struct{ x, expr, a, b string }{
		{max, "ADD x :a", max, ""},
		{"-" + max, "ADD x :a", "-1E+125", ""},
		{"0", "SET y = :a + :b", "9E+125", "9E+125"},
		{"0", "SET y = :a - :b", "9E+125", "-9E+125"},
		{max, "SET x = x + :a", "1E+125", ""},
		{"0", "SET y = :a + :b", "1E+50", "1"},         // 51 digits
		{"1E+50", "ADD x :a", "-1", ""},                // 50 digits
		{"0", "SET y = :a - :b", "1.1E-130", "1E-130"}, // 1E-131: too small
	} {
		vals := map[string]types.AttributeValue{":a": N(tc.a)}
		if tc.b != "" {
			vals[":b"] = N(tc.b)
		}
		_, err := upd(tc.x, tc.expr, vals)
		want := overflow
		if strings.Contains(tc.b, "E-130") {
			want = "Number underflow"
		}
		refused(t, fmt.Sprintf("x = %s, %s with %s, %s", tc.x, tc.expr, tc.a, tc.b), err, want)
	}
	// The legacy AttributeUpdates ADD too.
	put(t, c, table, map[string]types.AttributeValue{"pk": s("p"), "sk": s("s"), "x": N(max)})
	_, err := c.UpdateItem(ctxT(t), &dynamodb.UpdateItemInput{
		TableName: aws.String(table), Key: k,
		AttributeUpdates: map[string]types.AttributeValueUpdate{"x": {Value: N(max), Action: types.AttributeActionAdd}},
	})
	refused(t, "AttributeUpdates ADD to the largest number", err, overflow)
	// The refused updates left the item as it was.
	if got := attrN(getItemKey(t, c, table, k), "x"); !sameNumber(got, max) {
		t.Errorf("x after a refused ADD = %s; want the largest number", got)
	}

	// Within the range, at its edges, results are stored.
	for _, tc := range []struct{ x, expr, a, b, want string }{
		{"1E+125", "ADD x :a", "1E+125", "", "2E+125"},
		{"0", "SET y = :a + :b", "1E+37", "1", "10000000000000000000000000000000000001"},
		{"0", "SET y = :a - :b", "2E-130", "1E-130", "1e-130"},
		{max, "ADD x :a", "-" + max, "", "0"},
	} {
		vals := map[string]types.AttributeValue{":a": N(tc.a)}
		if tc.b != "" {
			vals[":b"] = N(tc.b)
		}
		got, err := upd(tc.x, tc.expr, vals)
		attr := "x"
		if strings.HasPrefix(tc.expr, "SET y") {
			attr = "y"
		}
		if err != nil {
			t.Errorf("x = %s, %s with %s, %s: %v", tc.x, tc.expr, tc.a, tc.b, err)
		} else if v := attrN(got, attr); !sameNumber(v, tc.want) {
			t.Errorf("x = %s, %s with %s, %s: %s = %s; want %s", tc.x, tc.expr, tc.a, tc.b, attr, v, tc.want)
		}
	}
}

// sameNumber tells whether two DynamoDB numbers are equal.
func sameNumber(a, b string) bool {
	x, okx := new(big.Rat).SetString(a)
	y, oky := new(big.Rat).SetString(b)
	return okx && oky && x.Cmp(y) == 0
}

func getItemKey(t *testing.T, c *dynamodb.Client, table string, k map[string]types.AttributeValue) map[string]types.AttributeValue {
	t.Helper()
	out, err := c.GetItem(ctxT(t), &dynamodb.GetItemInput{TableName: aws.String(table), Key: k, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatalf("GetItem %s: %v", table, err)
	}
	return out.Item
}

// Comparisons of Maps, Lists, false and empty values (Developer Guide,
// "Condition and filter expressions, operators, and functions"; API
// reference, Condition: "EQ is supported for all data types, including
// lists and maps", NE likewise). dynalite compared a Map by reference (two
// equal maps were never =, always <>) and a List as a set of references;
// and its IN, BETWEEN and attribute_type took an attribute whose value was
// false or empty ("", empty binary) for a missing one, so x IN (:false)
// was false on an item whose x is false.
func TestComparisonsOfMapsListsFalseAndEmpty(t *testing.T) {
	t.Parallel()
	c := client(shimServer(t))
	table := uniqueName("compare")
	indexedTable(t, c, table)
	k := map[string]types.AttributeValue{"pk": s("p"), "sk": s("s")}
	N := func(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
	M := func(kv ...any) types.AttributeValue {
		m := map[string]types.AttributeValue{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1].(types.AttributeValue)
		}
		return &types.AttributeValueMemberM{Value: m}
	}
	L := func(vs ...types.AttributeValue) types.AttributeValue { return &types.AttributeValueMemberL{Value: vs} }
	f := &types.AttributeValueMemberBOOL{Value: false}
	tr := &types.AttributeValueMemberBOOL{Value: true}
	eb := &types.AttributeValueMemberB{Value: []byte{}}
	item := map[string]types.AttributeValue{
		"pk": s("p"), "sk": s("s"),
		"m":  M("a", N("1"), "b", s("x"), "c", L(N("2"), M("d", s("y")))),
		"li": L(N("1"), s("x"), M("a", L())),
		"f":  f, "e": s(""), "eb": eb,
		"ss": &types.AttributeValueMemberSS{Value: []string{"a", "b"}},
	}
	put(t, c, table, item)
	vals := map[string]types.AttributeValue{
		":m":    M("c", L(N("2"), M("d", s("y"))), "b", s("x"), "a", N("1.0")), // same map, other order
		":m2":   M("a", N("1"), "b", s("x")),                                   // fewer members
		":m3":   M("a", N("1"), "b", s("x"), "c", L(M("d", s("y")), N("2"))),   // list in another order
		":c":    L(N("2"), M("d", s("y"))),
		":c2":   L(M("d", s("y")), N("2")),
		":l":    L(N("1"), s("x"), M("a", L())),
		":l2":   L(s("x"), N("1"), M("a", L())),
		":l3":   L(N("1"), s("x")),
		":f":    f,
		":t":    tr,
		":e":    s(""),
		":z":    s("z"),
		":eb":   eb,
		":ss":   &types.AttributeValueMemberSS{Value: []string{"b", "a"}},
		":BOOL": s("BOOL"),
		":S":    s("S"),
		":B":    s("B"),
		":N":    s("N"),
	}
	holds := func(cond string) (bool, error) {
		used := map[string]types.AttributeValue{}
		for _, tok := range regexpValue.FindAllString(cond, -1) {
			used[tok] = vals[tok]
		}
		_, err := c.UpdateItem(ctxT(t), &dynamodb.UpdateItemInput{
			TableName: aws.String(table), Key: k, UpdateExpression: aws.String("SET touched = :t"),
			ConditionExpression: aws.String(cond), ExpressionAttributeValues: mergeValues(used, ":t", tr),
		})
		if apiCode(err) == "ConditionalCheckFailedException" {
			return false, nil
		}
		return err == nil, err
	}
	for cond, want := range map[string]bool{
		"m = :m": true, "m <> :m": false, "m = :m2": false, "m <> :m2": true, "m = :m3": false,
		"m IN (:m2, :m)": true, "m.c = :c": true, "m.c = :c2": false,
		"li = :l": true, "li <> :l": false, "li = :l2": false, "li <> :l2": true, "li = :l3": false, "li IN (:l2, :l)": true,
		"ss = :ss": true,
		"f = :f":   true, "f IN (:f)": true, "f IN (:t, :f)": true, "f IN (:t)": false, "attribute_type(f, :BOOL)": true,
		"e = :e": true, "e IN (:e)": true, "e IN (:z)": false, "e BETWEEN :e AND :z": true, "attribute_type(e, :S)": true,
		"eb IN (:eb)": true, "attribute_type(eb, :B)": true, "NOT (e IN (:e))": false, "NOT (f IN (:f))": false,
		"attribute_type(e, :N)": false,
	} {
		got, err := holds(cond)
		if err != nil {
			t.Errorf("%s: %v", cond, err)
		} else if got != want {
			t.Errorf("%s: %v; want %v", cond, got, want)
		}
	}
	// A filter judges the same way.
	out, err := c.Scan(ctxT(t), &dynamodb.ScanInput{
		TableName: aws.String(table), FilterExpression: aws.String("m = :m AND li = :l AND f IN (:f) AND e BETWEEN :e AND :z"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":m": vals[":m"], ":l": vals[":l"], ":f": f, ":e": s(""), ":z": s("z")},
	})
	if err != nil || out.Count != 1 {
		t.Errorf("Scan filtered on m, l, f and e: %v, %v; want the item", out, err)
	}
}

var regexpValue = regexp.MustCompile(`:[A-Za-z0-9]+`)

func mergeValues(m map[string]types.AttributeValue, k string, v types.AttributeValue) map[string]types.AttributeValue {
	m[k] = v
	return m
}
