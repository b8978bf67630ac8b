package localstack

import (
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
