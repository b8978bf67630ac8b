package localstack

import (
	"errors"
	"regexp"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// exprNames and exprValues hold every placeholder the comparison tests use;
// each request is sent only those its expressions name (DynamoDB refuses
// unused ones).
var (
	exprNames  = map[string]string{"#a": "a", "#b": "b", "#x": "x"}
	exprValues = map[string]types.AttributeValue{":v": n(5), ":w": n(6), ":lo": n(1), ":hi": n(9)}
	exprToken  = regexp.MustCompile(`[#:][a-z]+`)
)

// placeholders returns the names and values that exprs use.
func placeholders(exprs ...string) (map[string]string, map[string]types.AttributeValue) {
	names, values := map[string]string{}, map[string]types.AttributeValue{}
	for _, e := range exprs {
		for _, tok := range exprToken.FindAllString(e, -1) {
			if v, ok := exprNames[tok]; ok {
				names[tok] = v
			}
			if v, ok := exprValues[tok]; ok {
				values[tok] = v
			}
		}
	}
	if len(values) == 0 {
		values = nil
	}
	return names, values
}

// serving fails the test at once if the server has exited (judging expr).
func serving(t *testing.T, d *Dynalite, expr string) {
	t.Helper()
	select {
	case <-d.Done():
		t.Fatalf("the server exited judging %q: %v", expr, d.Stop())
	default:
	}
}

// In a condition, a comparison (=, <, <=, >, >=, BETWEEN, IN) one of whose
// operands names an attribute the item does not have is false on DynamoDB,
// so its NOT is true. dynalite held two missing attributes equal (a = b,
// a <= b and a >= b were true), and a BETWEEN whose bound or an IN whose
// list named a missing attribute threw and took the server down.
//
// The item is {pk: "bare", x: 5}: it has neither a nor b.
func TestConditionComparisonsWithMissingAttributes(t *testing.T) {
	t.Parallel()
	// Its own server: unpatched, some of these conditions end the process.
	d := start(t, Options{IndexLag: -1})
	c := client(d.Endpoint)
	table := uniqueName("missing")
	createTasks(t, c, table, "")
	bare := map[string]types.AttributeValue{"pk": s("bare"), "x": n(5)}
	put(t, c, table, bare)

	cases := []struct {
		cond  string
		holds bool
	}{
		// Both operands missing: the case of lease's NOT (attempts >= max_attempts).
		{"#a >= #b", false},
		{"NOT (#a >= #b)", true},
		{"#a <= #b", false},
		{"NOT (#a <= #b)", true},
		{"#a = #b", false},
		{"NOT (#a = #b)", true},
		{"#a < #b", false},
		{"NOT (#a < #b)", true},
		{"#a > #b", false},
		{"NOT (#a > #b)", true},
		// An attribute against a value.
		{"#a = :v", false},
		{"NOT (#a = :v)", true},
		{"#a < :v", false},
		{"#a <= :v", false},
		{"#a > :v", false},
		{"#a >= :v", false},
		{"NOT (#a >= :v)", true},
		// One attribute present, the other missing, on either side.
		{"#x >= #a", false},
		{"NOT (#x >= #a)", true},
		{"#a <= #x", false},
		{"#x = #a", false},
		// BETWEEN and IN, the missing attribute in any place.
		{"#a BETWEEN :lo AND :hi", false},
		{"NOT (#a BETWEEN :lo AND :hi)", true},
		{"#x BETWEEN #a AND :hi", false},
		{"#x BETWEEN :lo AND #b", false},
		{"NOT (#x BETWEEN :lo AND #b)", true},
		{"#a IN (:v, :w)", false},
		{"NOT (#a IN (:v, :w))", true},
		{"#x IN (#a, :v)", false},
		// size() of a missing attribute is missing too.
		{"size(#a) >= :lo", false},
		{"NOT (size(#a) >= :lo)", true},
		{"size(#a) = size(#b)", false},
		// <> with one operand missing stays true, as dynalite has it.
		{"#a <> :v", true},
		{"#x <> #a", true},
		// Present attributes compare as before.
		{"#x = :v", true},
		{"#x >= :v AND #x < :w", true},
		{"#x BETWEEN :lo AND :hi", true},
		{"#x IN (:w, :v)", true},
		{"NOT (#x = :v)", false},
	}
	check := func(t *testing.T, what, cond string, holds bool, err error) {
		t.Helper()
		serving(t, d, cond)
		var ccf *types.ConditionalCheckFailedException
		switch {
		case holds && err != nil:
			t.Errorf("%s with %q: %v, want success (the condition holds)", what, cond, err)
		case !holds && !errors.As(err, &ccf):
			t.Errorf("%s with %q: err = %v, want ConditionalCheckFailedException", what, cond, err)
		}
	}
	for _, tc := range cases {
		// UpdateItem and PutItem leave the item as it is when they succeed.
		names, values := placeholders(tc.cond, "#x :v")
		_, err := c.UpdateItem(ctxT(t), &dynamodb.UpdateItemInput{
			TableName: aws.String(table), Key: key("bare"),
			UpdateExpression:          aws.String("SET #x = :v"),
			ConditionExpression:       aws.String(tc.cond),
			ExpressionAttributeNames:  names,
			ExpressionAttributeValues: values,
		})
		check(t, "UpdateItem", tc.cond, tc.holds, err)

		names, values = placeholders(tc.cond)
		_, err = c.PutItem(ctxT(t), &dynamodb.PutItemInput{
			TableName: aws.String(table), Item: bare,
			ConditionExpression:       aws.String(tc.cond),
			ExpressionAttributeNames:  names,
			ExpressionAttributeValues: values,
		})
		check(t, "PutItem", tc.cond, tc.holds, err)
	}

	// With no item at all every attribute is missing.
	_, err := c.PutItem(ctxT(t), &dynamodb.PutItemInput{
		TableName: aws.String(table), Item: map[string]types.AttributeValue{"pk": s("new")},
		ConditionExpression:      aws.String("NOT (#a >= #b)"),
		ExpressionAttributeNames: map[string]string{"#a": "a", "#b": "b"},
	})
	check(t, "PutItem of a new item", "NOT (#a >= #b)", true, err)
	_, err = c.PutItem(ctxT(t), &dynamodb.PutItemInput{
		TableName: aws.String(table), Item: map[string]types.AttributeValue{"pk": s("newer")},
		ConditionExpression:      aws.String("#a = #b"),
		ExpressionAttributeNames: map[string]string{"#a": "a", "#b": "b"},
	})
	check(t, "PutItem of a new item", "#a = #b", false, err)
	if item := getItem(t, c, table, "bare", true); len(item) != 2 || attrN(item, "x") != "5" {
		t.Fatalf("the item changed: %v", item)
	}
}

// A FilterExpression is judged as a condition is: an item that lacks an
// attribute a comparison names fails the comparison and passes its NOT.
func TestFilterComparisonsWithMissingAttributes(t *testing.T) {
	t.Parallel()
	d := start(t, Options{IndexLag: -1})
	c := client(d.Endpoint)
	table := uniqueName("filter")
	createTasks(t, c, table, "")
	for _, it := range []map[string]types.AttributeValue{
		{"pk": s("bare"), "status": s("open"), "x": n(5)},
		{"pk": s("lt"), "status": s("open"), "a": n(1), "b": n(2), "x": n(5)},
		{"pk": s("eq"), "status": s("open"), "a": n(2), "b": n(2), "x": n(5)},
		{"pk": s("gt"), "status": s("open"), "a": n(3), "b": n(2), "x": n(5)},
		{"pk": s("only-a"), "status": s("open"), "a": n(5), "x": n(5)},
	} {
		put(t, c, table, it)
	}
	cases := []struct {
		filter string
		want   []string
	}{
		{"#a >= #b", []string{"eq", "gt"}},
		{"NOT (#a >= #b)", []string{"bare", "lt", "only-a"}},
		{"#a = #b", []string{"eq"}},
		{"NOT (#a = #b)", []string{"bare", "gt", "lt", "only-a"}},
		{"#a <= #b", []string{"eq", "lt"}},
		{"#x = #a", []string{"only-a"}},
		{"#a BETWEEN :lo AND #b", []string{"eq", "lt"}},
		{"#x IN (#a, :w)", []string{"only-a"}},
		{"#a <> :v", []string{"bare", "eq", "gt", "lt"}},
	}
	for _, tc := range cases {
		names, values := placeholders(tc.filter)
		var got []string
		for _, index := range []string{"", "by-status"} { // the table and a global index
			in := &dynamodb.ScanInput{
				TableName:                 aws.String(table),
				FilterExpression:          aws.String(tc.filter),
				ExpressionAttributeNames:  names,
				ExpressionAttributeValues: values,
				ConsistentRead:            aws.Bool(index == ""),
			}
			if index != "" {
				in.IndexName = aws.String(index)
			}
			out, err := c.Scan(ctxT(t), in)
			serving(t, d, tc.filter)
			if err != nil {
				t.Fatalf("Scan %q of %q: %v", index, tc.filter, err)
			}
			got = got[:0]
			for _, it := range out.Items {
				got = append(got, attrS(it, "pk"))
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("Scan %q with filter %q returned %v, want %v", index, tc.filter, got, tc.want)
			}
		}
		// A Query filters the same way.
		qnames, qvalues := placeholders(tc.filter, "#s :s")
		qnames["#s"] = "status"
		if qvalues == nil {
			qvalues = map[string]types.AttributeValue{}
		}
		qvalues[":s"] = s("open")
		out, err := c.Query(ctxT(t), &dynamodb.QueryInput{
			TableName: aws.String(table), IndexName: aws.String("by-status"),
			KeyConditionExpression:    aws.String("#s = :s"),
			FilterExpression:          aws.String(tc.filter),
			ExpressionAttributeNames:  qnames,
			ExpressionAttributeValues: qvalues,
		})
		if err != nil {
			t.Fatalf("Query with filter %q: %v", tc.filter, err)
		}
		got = got[:0]
		for _, it := range out.Items {
			got = append(got, attrS(it, "pk"))
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("Query with filter %q returned %v, want %v", tc.filter, got, tc.want)
		}
	}
}
