package localstack

import (
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// The shim keeps parsed expressions (shim/parsecache.js). An expression
// sent again, with other values, other names or values of other types, is
// judged and applied as DynamoDB would, as if it had never been seen:
// each request's own values are used, type errors and unused or missing
// names and values are still reported, and BETWEEN still checks its
// bounds.
func TestParseCache(t *testing.T) {
	t.Parallel()
	c := client(shimServer(t))
	name := uniqueName("parsecache")
	createTasks(t, c, name, "")
	put(t, c, name, task("a", "todo", 1))
	update := func(upd, cond string, names map[string]string, vals map[string]types.AttributeValue) error {
		in := &dynamodb.UpdateItemInput{
			TableName: aws.String(name), Key: key("a"),
			UpdateExpression:          aws.String(upd),
			ExpressionAttributeNames:  names,
			ExpressionAttributeValues: vals,
		}
		if cond != "" {
			in.ConditionExpression = aws.String(cond)
		}
		_, err := c.UpdateItem(ctxT(t), in)
		return err
	}
	vOf := func() string { return attrN(getItem(t, c, name, "a", true), "v") }
	names := map[string]string{"#v": "v"}

	// Each request's own values are applied and checked.
	for i, want := range []string{"3", "6", "10"} {
		if err := update("SET #v = #v + :d", "#v >= :min", names, map[string]types.AttributeValue{":d": n(i + 2), ":min": n(0)}); err != nil {
			t.Fatalf("add %d: %v", i+2, err)
		}
		if got := vOf(); got != want {
			t.Fatalf("after adding %d: v = %s, want %s", i+2, got, want)
		}
	}
	var ccf *types.ConditionalCheckFailedException
	if err := update("SET #v = #v + :d", "#v >= :min", names, map[string]types.AttributeValue{":d": n(1), ":min": n(100)}); !errors.As(err, &ccf) {
		t.Fatalf("a condition that no longer holds: %v, want ConditionalCheckFailedException", err)
	}

	// A value of another type under the same expression is refused.
	err := update("SET #v = #v + :d", "#v >= :min", names, map[string]types.AttributeValue{":d": s("x"), ":min": n(0)})
	if apiCode(err) != "ValidationException" || !strings.Contains(err.Error(), "Incorrect operand type") {
		t.Fatalf("adding a string: %v, want a ValidationException on the operand type", err)
	}

	// A condition seen with an update that used the same value is still
	// counted as using it alongside an update that does not...
	vals := map[string]types.AttributeValue{":x": n(7)}
	if err := update("SET #v = :x", "#v <> :x", names, vals); err != nil {
		t.Fatalf("set and condition on :x: %v", err)
	}
	if err := update("SET #v = #v", "#v = :x", names, vals); err != nil {
		t.Fatalf("the same condition, its value used by it alone: %v", err)
	}
	// ... and a value nobody uses, or one that is missing, is reported,
	// also when the condition was first seen beside an update using it.
	both := map[string]types.AttributeValue{":x": n(7), ":y": n(7)}
	if err := update("SET #v = :y", "#v = :x", names, both); err != nil {
		t.Fatalf("set :y under a condition on :x: %v", err)
	}
	err = update("SET #v = #v", "#v = :x", names, both)
	if apiCode(err) != "ValidationException" || !strings.Contains(err.Error(), "unused in expressions") {
		t.Fatalf("a value only an earlier update used: %v, want a ValidationException", err)
	}
	err = update("SET #v = #v", "#v = :x", names, map[string]types.AttributeValue{":x": n(7), ":y": n(1)})
	if apiCode(err) != "ValidationException" || !strings.Contains(err.Error(), "unused in expressions") {
		t.Fatalf("an unused value: %v, want a ValidationException", err)
	}
	err = update("SET #v = #v", "#v = :x", names, map[string]types.AttributeValue{":y": n(7)})
	if apiCode(err) != "ValidationException" || !strings.Contains(err.Error(), "not defined") {
		t.Fatalf("a missing value: %v, want a ValidationException", err)
	}
	// Another name for the same placeholder is another attribute.
	if err := update("SET #v = :x", "", map[string]string{"#v": "w"}, vals); err != nil {
		t.Fatalf("set w: %v", err)
	}
	if item := getItem(t, c, name, "a", true); attrN(item, "w") != "7" || attrN(item, "v") != "7" {
		t.Fatalf("after setting w: %v, want v = w = 7", item)
	}

	// BETWEEN compares its bounds on every request.
	between := "#v BETWEEN :lo AND :hi"
	if err := update("SET #v = #v", between, names, map[string]types.AttributeValue{":lo": n(1), ":hi": n(10)}); err != nil {
		t.Fatalf("between 1 and 10: %v", err)
	}
	err = update("SET #v = #v", between, names, map[string]types.AttributeValue{":lo": n(10), ":hi": n(1)})
	if apiCode(err) != "ValidationException" || !strings.Contains(err.Error(), "upper bound to be greater") {
		t.Fatalf("between 10 and 1: %v, want a ValidationException on the bounds", err)
	}
}

// attribute_type(path, :t) checks that :t names a type (S, N, ... BOOL):
// DynamoDB refuses another with a ValidationException every time. Once the
// expression had been parsed with a valid type name, the cache let an
// invalid one through as a failed condition.
func TestParseCacheChecksAttributeTypeNames(t *testing.T) {
	t.Parallel()
	c := client(shimServer(t))
	name := uniqueName("parsecache-type")
	createTasks(t, c, name, "")
	put(t, c, name, task("a", "todo", 1))
	try := func(typ string) error {
		_, err := c.UpdateItem(ctxT(t), &dynamodb.UpdateItemInput{
			TableName: aws.String(name), Key: key("a"),
			UpdateExpression:          aws.String("SET v = :one"),
			ConditionExpression:       aws.String("attribute_type(v, :t)"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":one": n(1), ":t": s(typ)},
		})
		return err
	}
	if err := try("XYZ"); apiCode(err) != "ValidationException" {
		t.Fatalf("attribute_type(v, XYZ): %v, want a ValidationException", err)
	}
	if err := try("N"); err != nil {
		t.Fatalf("attribute_type(v, N): %v", err)
	}
	if err := try("XYZ"); apiCode(err) != "ValidationException" {
		t.Fatalf("attribute_type(v, XYZ) after a parse with N: %v, want a ValidationException", err)
	}
}
