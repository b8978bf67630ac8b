package localstack

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// DynamoDB evaluates every operand of an update on the item as it was: in
// SET a = if_not_exists(b, :z) ADD b :one, a gets b's value before the
// ADD. dynalite's resolved operand was b's own value object, which the ADD
// then incremented in place, so a got b's new value.
func TestSetOperandsAreReadBeforeTheUpdate(t *testing.T) {
	t.Parallel()
	d := start(t, Options{IndexLag: -1})
	c := client(d.Endpoint)
	table := uniqueName("setcopy")
	createTasks(t, c, table, "")
	put(t, c, table, map[string]types.AttributeValue{"pk": s("k"), "b": n(7)})
	for expr, vals := range map[string]map[string]types.AttributeValue{
		"SET #a = #b ADD #b :one":                    {":one": n(1)},
		"SET #a = if_not_exists(#b, :z) ADD #b :one": {":one": n(1), ":z": n(0)},
	} {
		out, err := c.UpdateItem(ctxT(t), &dynamodb.UpdateItemInput{
			TableName: aws.String(table), Key: map[string]types.AttributeValue{"pk": s("k")},
			UpdateExpression:          aws.String(expr),
			ExpressionAttributeNames:  map[string]string{"#a": "a", "#b": "b"},
			ExpressionAttributeValues: vals,
			ReturnValues:              types.ReturnValueAllNew,
		})
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		a, b := out.Attributes["a"].(*types.AttributeValueMemberN).Value, out.Attributes["b"].(*types.AttributeValueMemberN).Value
		if a != "7" || b != "8" {
			t.Fatalf("%s: a = %s, b = %s; want a = 7 (b before the update), b = 8", expr, a, b)
		}
		// The next expression starts from b as this one left it.
		put(t, c, table, map[string]types.AttributeValue{"pk": s("k"), "b": n(7)})
	}
}
