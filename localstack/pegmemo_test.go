package localstack

import (
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// nested is a condition of depth terms, each ANDed to the ones before it
// in parentheses as the AWS SDK's expression builder nests them:
// (((#v = :v) AND (#v = :v)) AND (#v = :v)) ..., with last as the last
// term.
func nested(depth int, last string) string {
	c := "#v = :v"
	for i := 1; i < depth; i++ {
		term := "(#v = :v)"
		if i == depth-1 {
			term = "(" + last + ")"
		}
		c = "(" + c + ") AND " + term
	}
	return c
}

// Deeply nested conditions are evaluated as DynamoDB evaluates them, true
// and false, and a malformed one is still a ValidationException. (Without
// the shim's memoized parsers, the 24-level conditions here would take
// dynalite hours to parse: its parse time doubles with each level.)
func TestNestedConditions(t *testing.T) {
	t.Parallel()
	c := client(shimServer(t))
	name := uniqueName("nested")
	createTasks(t, c, name, "")
	if _, err := c.PutItem(ctxT(t), &dynamodb.PutItemInput{TableName: aws.String(name), Item: task("a", "todo", 1)}); err != nil {
		t.Fatal(err)
	}
	update := func(cond string) error {
		_, err := c.UpdateItem(ctxT(t), &dynamodb.UpdateItemInput{
			TableName: aws.String(name), Key: key("a"),
			UpdateExpression:          aws.String("SET #s = :s"),
			ConditionExpression:       aws.String(cond),
			ExpressionAttributeNames:  map[string]string{"#v": "v", "#s": "status"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":v": n(1), ":s": s("done"), ":w": n(2)},
		})
		return err
	}
	if err := update(nested(24, "NOT (#v = :w)")); err != nil {
		t.Fatalf("a condition that holds: %v", err)
	}
	var ccf *types.ConditionalCheckFailedException
	if err := update(nested(24, "#v = :w")); !errors.As(err, &ccf) {
		t.Fatalf("a condition that fails: %v, want ConditionalCheckFailedException", err)
	}
	var api smithy.APIError
	err := update(nested(24, "#v = ") + " AND")
	if !errors.As(err, &api) || api.ErrorCode() != "ValidationException" || !strings.Contains(api.ErrorMessage(), "Syntax error") {
		t.Fatalf("a malformed condition: %v, want a ValidationException naming a syntax error", err)
	}
}
