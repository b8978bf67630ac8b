package localstack

import (
	"context"
	"crypto/rand"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	stypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/aws/smithy-go"
)

// The shim's tests share one server (each test has its own tables) and
// always start it here: they test this package's dynalite, not whatever
// DYNAMODB_ENDPOINT names.
var shared struct {
	once sync.Once
	d    *Dynalite
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.d != nil {
		_ = shared.d.Stop()
	}
	os.Exit(code)
}

func shimServer(t *testing.T) string {
	t.Helper()
	shared.once.Do(func() {
		// No default lag, whatever the environment says: tests set their own.
		shared.d, shared.err = Start(context.Background(), Options{IndexLag: -1})
	})
	if shared.err != nil {
		t.Fatalf("Start: %v", shared.err)
	}
	return shared.d.Endpoint
}

func streamsClient(endpoint string) *dynamodbstreams.Client {
	return dynamodbstreams.New(dynamodbstreams.Options{
		BaseEndpoint: aws.String(endpoint),
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("local", "local", ""),
	})
}

func uniqueName(kind string) string { return "shim-" + kind + "-" + rand.Text()[:10] }

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func n(v int) types.AttributeValue    { return &types.AttributeValueMemberN{Value: strconv.Itoa(v)} }

// task is an item of the test tables: key pk, a GSI on status, a counter v.
func task(pk, status string, v int) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": s(pk), "status": s(status), "v": n(v)}
}

func key(pk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": s(pk)}
}

// createTasks creates a table keyed by pk with a GSI "by-status" (all
// attributes), and a stream when view is not empty.
// streamTable creates the test table with a stream of the given view and
// returns the stream's ARN.
func streamTable(t *testing.T, c *dynamodb.Client, name string, view stypes.StreamViewType) string {
	t.Helper()
	createTasks(t, c, name, view)
	arn, err := StreamARN(ctxT(t), c, name)
	if err != nil {
		t.Fatal(err)
	}
	return arn
}

func createTasks(t *testing.T, c *dynamodb.Client, name string, view stypes.StreamViewType) {
	t.Helper()
	in := &dynamodb.CreateTableInput{
		TableName:   aws.String(name),
		BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String("status"), AttributeType: types.ScalarAttributeTypeS},
		},
		KeySchema: []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{{
			IndexName:  aws.String("by-status"),
			KeySchema:  []types.KeySchemaElement{{AttributeName: aws.String("status"), KeyType: types.KeyTypeHash}},
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeAll},
		}},
	}
	if view != "" {
		in.StreamSpecification = &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewType(view)}
	}
	// Right after DeleteTable the name may still be taken for a moment.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := c.CreateTable(ctxT(t), in)
		var inUse *types.ResourceInUseException
		if err == nil {
			break
		}
		if !errors.As(err, &inUse) || time.Now().After(deadline) {
			t.Fatalf("CreateTable %s: %v", name, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	w := dynamodb.NewTableExistsWaiter(c, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 10*time.Millisecond, 100*time.Millisecond
	})
	if err := w.Wait(ctxT(t), &dynamodb.DescribeTableInput{TableName: aws.String(name)}, 10*time.Second); err != nil {
		t.Fatalf("table %s not ACTIVE: %v", name, err)
	}
}

func put(t *testing.T, c *dynamodb.Client, table string, item map[string]types.AttributeValue) {
	t.Helper()
	if _, err := c.PutItem(ctxT(t), &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
		t.Fatalf("PutItem %s: %v", table, err)
	}
}

func getItem(t *testing.T, c *dynamodb.Client, table, pk string, consistent bool) map[string]types.AttributeValue {
	t.Helper()
	out, err := c.GetItem(ctxT(t), &dynamodb.GetItemInput{TableName: aws.String(table), Key: key(pk), ConsistentRead: aws.Bool(consistent)})
	if err != nil {
		t.Fatalf("GetItem %s %s: %v", table, pk, err)
	}
	return out.Item
}

func attrN(item map[string]types.AttributeValue, name string) string {
	if v, ok := item[name].(*types.AttributeValueMemberN); ok {
		return v.Value
	}
	return ""
}

func attrS(item map[string]types.AttributeValue, name string) string {
	if v, ok := item[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func TestReturnValuesOnConditionCheckFailure(t *testing.T) {
	t.Parallel()
	c := client(shimServer(t))
	table := uniqueName("allold")
	createTasks(t, c, table, "")
	put(t, c, table, task("held", "open", 1))
	allOld := types.ReturnValuesOnConditionCheckFailureAllOld
	seven := map[string]types.AttributeValue{":v": n(7)}

	// holder returns the item carried by a ConditionalCheckFailedException.
	holder := func(t *testing.T, err error) map[string]types.AttributeValue {
		t.Helper()
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			t.Fatalf("err = %v, want ConditionalCheckFailedException", err)
		}
		return ccf.Item
	}
	wantHeld := func(t *testing.T, item map[string]types.AttributeValue) {
		t.Helper()
		if attrS(item, "pk") != "held" || attrS(item, "status") != "open" || attrN(item, "v") != "1" || len(item) != 3 {
			t.Fatalf("Item = %v, want the stored item {pk: held, status: open, v: 1}", item)
		}
	}

	t.Run("PutItem", func(t *testing.T) {
		_, err := c.PutItem(ctxT(t), &dynamodb.PutItemInput{
			TableName: aws.String(table), Item: task("held", "mine", 2),
			ConditionExpression:                 aws.String("attribute_not_exists(pk)"),
			ReturnValuesOnConditionCheckFailure: allOld,
		})
		wantHeld(t, holder(t, err))
	})
	t.Run("UpdateItem", func(t *testing.T) {
		_, err := c.UpdateItem(ctxT(t), &dynamodb.UpdateItemInput{
			TableName: aws.String(table), Key: key("held"),
			UpdateExpression:                    aws.String("SET v = :v"),
			ConditionExpression:                 aws.String("v = :v"),
			ExpressionAttributeValues:           seven,
			ReturnValuesOnConditionCheckFailure: allOld,
		})
		wantHeld(t, holder(t, err))
	})
	t.Run("DeleteItem", func(t *testing.T) {
		_, err := c.DeleteItem(ctxT(t), &dynamodb.DeleteItemInput{
			TableName: aws.String(table), Key: key("held"),
			ConditionExpression:                 aws.String("v = :v"),
			ExpressionAttributeValues:           seven,
			ReturnValuesOnConditionCheckFailure: allOld,
		})
		wantHeld(t, holder(t, err))
	})
	t.Run("no item", func(t *testing.T) {
		_, err := c.DeleteItem(ctxT(t), &dynamodb.DeleteItemInput{
			TableName: aws.String(table), Key: key("absent"),
			ConditionExpression:                 aws.String("attribute_exists(pk)"),
			ReturnValuesOnConditionCheckFailure: allOld,
		})
		if item := holder(t, err); item != nil {
			t.Fatalf("DeleteItem of an absent item: Item = %v, want nil", item)
		}
		_, err = c.UpdateItem(ctxT(t), &dynamodb.UpdateItemInput{
			TableName: aws.String(table), Key: key("absent"),
			UpdateExpression:                    aws.String("SET v = :v"),
			ConditionExpression:                 aws.String("attribute_exists(pk)"),
			ExpressionAttributeValues:           seven,
			ReturnValuesOnConditionCheckFailure: allOld,
		})
		if item := holder(t, err); item != nil {
			t.Fatalf("UpdateItem of an absent item: Item = %v, want nil", item)
		}
	})
	t.Run("without ALL_OLD", func(t *testing.T) {
		for _, rv := range []types.ReturnValuesOnConditionCheckFailure{"", types.ReturnValuesOnConditionCheckFailureNone} {
			_, err := c.PutItem(ctxT(t), &dynamodb.PutItemInput{
				TableName: aws.String(table), Item: task("held", "mine", 2),
				ConditionExpression:                 aws.String("attribute_not_exists(pk)"),
				ReturnValuesOnConditionCheckFailure: rv,
			})
			if item := holder(t, err); item != nil {
				t.Fatalf("ReturnValuesOnConditionCheckFailure %q: Item = %v, want nil", rv, item)
			}
		}
	})
	t.Run("other values are refused", func(t *testing.T) {
		_, err := c.PutItem(ctxT(t), &dynamodb.PutItemInput{
			TableName: aws.String(table), Item: task("held", "mine", 2),
			ConditionExpression:                 aws.String("attribute_not_exists(pk)"),
			ReturnValuesOnConditionCheckFailure: "ALL_NEW",
		})
		if apiCode(err) != "ValidationException" {
			t.Fatalf("ReturnValuesOnConditionCheckFailure ALL_NEW: err = %v, want ValidationException", err)
		}
	})
	// None of the failed writes changed anything.
	wantHeld(t, getItem(t, c, table, "held", true))
}

// byStatus returns the pks that the GSI lists under status.
func byStatus(t *testing.T, c *dynamodb.Client, table, status string) []string {
	t.Helper()
	out, err := c.Query(ctxT(t), &dynamodb.QueryInput{
		TableName:                 aws.String(table),
		IndexName:                 aws.String("by-status"),
		KeyConditionExpression:    aws.String("#s = :s"),
		ExpressionAttributeNames:  map[string]string{"#s": "status"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":s": s(status)},
	})
	if err != nil {
		t.Fatalf("Query %s by-status %s: %v", table, status, err)
	}
	var pks []string
	for _, it := range out.Items {
		pks = append(pks, attrS(it, "pk"))
	}
	slices.Sort(pks)
	return pks
}

// waitStatus polls the GSI until status lists exactly want (within a
// deadline far above any lag used here) and returns when it first did.
func waitStatus(t *testing.T, c *dynamodb.Client, table, status string, want ...string) time.Time {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := byStatus(t, c, table, status)
		if slices.Equal(got, want) {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("GSI of %s lists %v under %q, want %v", table, got, status, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestIndexLag(t *testing.T) {
	t.Parallel()
	ep := shimServer(t)
	c := client(ep)
	const lag = 400 * time.Millisecond
	prefix := uniqueName("lag") + "-"
	if err := SetIndexLag(ctxT(t), ep, prefix, lag); err != nil {
		t.Fatalf("SetIndexLag: %v", err)
	}
	lagged, plain := prefix+"tasks", uniqueName("nolag")
	createTasks(t, c, lagged, "")
	createTasks(t, c, plain, "")

	// soon reports whether a check done now still falls within the lag of a
	// write made at start; a machine too busy to check in time proves nothing.
	soon := func(start time.Time) bool { return time.Since(start) < lag*3/4 }

	t.Run("outside the prefix", func(t *testing.T) {
		put(t, c, plain, task("p1", "open", 1))
		if got := byStatus(t, c, plain, "open"); !slices.Equal(got, []string{"p1"}) {
			t.Fatalf("unlagged GSI right after the write lists %v, want [p1]", got)
		}
	})

	t.Run("a write reaches the table at once and the GSI after the lag", func(t *testing.T) {
		start := time.Now()
		put(t, c, lagged, task("t1", "open", 1))
		got := byStatus(t, c, lagged, "open")
		if soon(start) && len(got) != 0 {
			t.Fatalf("GSI lists %v right after the write, want nothing before the lag", got)
		}
		for _, consistent := range []bool{true, false} {
			if item := getItem(t, c, lagged, "t1", consistent); attrS(item, "status") != "open" {
				t.Fatalf("GetItem (consistent %v) right after the write = %v", consistent, item)
			}
		}
		out, err := c.Query(ctxT(t), &dynamodb.QueryInput{
			TableName:                 aws.String(lagged),
			KeyConditionExpression:    aws.String("pk = :pk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": s("t1")},
		})
		if err != nil || len(out.Items) != 1 {
			t.Fatalf("base-table Query right after the write = %v, %v; want the item", out, err)
		}
		if seen := waitStatus(t, c, lagged, "open", "t1"); seen.Sub(start) < lag {
			t.Fatalf("GSI saw the write %v after it, before the %v lag", seen.Sub(start), lag)
		}
	})

	t.Run("pending updates are counted until the GSI has them", func(t *testing.T) {
		start := time.Now()
		put(t, c, lagged, task("t3", "pending", 1))
		n, err := IndexLagPending(ctxT(t), ep, prefix)
		if err != nil {
			t.Fatalf("IndexLagPending: %v", err)
		}
		if soon(start) && n == 0 {
			t.Fatalf("IndexLagPending right after a lagged write = 0, want at least 1")
		}
		if n, err := IndexLagPending(ctxT(t), ep, uniqueName("other")); err != nil || n != 0 {
			t.Fatalf("IndexLagPending of a prefix of no table = %d, %v; want 0", n, err)
		}
		for deadline := time.Now().Add(10 * time.Second); ; {
			n, err := IndexLagPending(ctxT(t), ep, prefix)
			if err != nil {
				t.Fatalf("IndexLagPending: %v", err)
			}
			if n == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("IndexLagPending still %d 10 s after the write", n)
			}
			time.Sleep(10 * time.Millisecond)
		}
		// Nothing pending: the GSI has the write, with no wait.
		if got := byStatus(t, c, lagged, "pending"); !slices.Equal(got, []string{"t3"}) {
			t.Fatalf("GSI lists %v once nothing is pending, want [t3]", got)
		}
	})

	t.Run("writes to one item reach the GSI in order", func(t *testing.T) {
		statuses := []string{"a", "b", "c", "d", "e"}
		start := time.Now()
		for i, st := range statuses[:4] {
			put(t, c, lagged, task("t2", st, i))
		}
		_, err := c.UpdateItem(ctxT(t), &dynamodb.UpdateItemInput{
			TableName: aws.String(lagged), Key: key("t2"),
			UpdateExpression:          aws.String("SET #s = :s"),
			ExpressionAttributeNames:  map[string]string{"#s": "status"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":s": s("e")},
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := byStatus(t, c, lagged, "e"); soon(start) && len(got) != 0 {
			t.Fatalf("GSI lists %v under the last status right after the writes", got)
		}
		// Watch the whole index (one Scan is one snapshot) until the last
		// status shows: t2 is never listed under two at once, and the states
		// it passes through go forward.
		last := -1
		deadline := time.Now().Add(10 * time.Second)
		for last < len(statuses)-1 {
			out, err := c.Scan(ctxT(t), &dynamodb.ScanInput{TableName: aws.String(lagged), IndexName: aws.String("by-status")})
			if err != nil {
				t.Fatal(err)
			}
			var under []int
			for _, it := range out.Items {
				if attrS(it, "pk") == "t2" {
					under = append(under, slices.Index(statuses, attrS(it, "status")))
				}
			}
			if len(under) > 1 || (len(under) == 1 && under[0] < last) {
				t.Fatalf("GSI lists t2 under %v after it was under %d", under, last)
			}
			if len(under) == 1 {
				last = under[0]
			}
			if time.Now().After(deadline) {
				t.Fatalf("t2 never reached the last status in the GSI (last %d)", last)
			}
		}
		for _, st := range statuses[:4] {
			if got := byStatus(t, c, lagged, st); slices.Contains(got, "t2") {
				t.Fatalf("after the last write applied, GSI still lists t2 under %q", st)
			}
		}
	})

	t.Run("a delete leaves the GSI after the lag", func(t *testing.T) {
		start := time.Now()
		if _, err := c.DeleteItem(ctxT(t), &dynamodb.DeleteItemInput{TableName: aws.String(lagged), Key: key("t1")}); err != nil {
			t.Fatal(err)
		}
		if item := getItem(t, c, lagged, "t1", false); item != nil {
			t.Fatalf("GetItem after DeleteItem = %v", item)
		}
		if got := byStatus(t, c, lagged, "open"); soon(start) && !slices.Equal(got, []string{"t1"}) {
			t.Fatalf("GSI right after the delete lists %v, want the stale [t1]", got)
		}
		waitStatus(t, c, lagged, "open")
	})

	t.Run("a recreated table gets no queued entry of the old one", func(t *testing.T) {
		name := prefix + "again"
		createTasks(t, c, name, "")
		put(t, c, name, task("stale", "s", 1))
		if _, err := c.DeleteTable(ctxT(t), &dynamodb.DeleteTableInput{TableName: aws.String(name)}); err != nil {
			t.Fatal(err)
		}
		createTasks(t, c, name, "")
		put(t, c, name, task("fresh", "s", 1))
		// Entries apply in order, so once the fresh one shows, a stale one
		// queued before it would show too.
		waitStatus(t, c, name, "s", "fresh")
	})

	t.Run("lowering the lag keeps write order", func(t *testing.T) {
		start := time.Now()
		put(t, c, lagged, task("t3", "x", 1))
		if err := SetIndexLag(ctxT(t), ep, prefix, 0); err != nil {
			t.Fatal(err)
		}
		put(t, c, lagged, task("t3", "y", 2))
		if got := byStatus(t, c, lagged, "y"); soon(start) && len(got) != 0 {
			t.Fatalf("a write made after the lag was lowered overtook an earlier one: GSI lists %v", got)
		}
		waitStatus(t, c, lagged, "y", "t3")
		if got := byStatus(t, c, lagged, "x"); len(got) != 0 {
			t.Fatalf("GSI still lists %v under the first status", got)
		}
		put(t, c, lagged, task("t4", "z", 1))
		if got := byStatus(t, c, lagged, "z"); !slices.Equal(got, []string{"t4"}) {
			t.Fatalf("with the lag at 0 and the queue empty, GSI lists %v, want [t4]", got)
		}
	})

	t.Run("bad requests", func(t *testing.T) {
		if err := SetIndexLag(ctxT(t), ep, prefix, -time.Second); err == nil {
			t.Fatal("SetIndexLag with a negative lag succeeded")
		}
		if err := SetIndexLag(ctxT(t), ep, prefix, 2*time.Hour); err == nil {
			t.Fatal("SetIndexLag with a 2h lag succeeded")
		}
	})
}

// Start passes Options.IndexLag to the server as its default.
func TestIndexLagDefault(t *testing.T) {
	t.Parallel()
	const lag = 300 * time.Millisecond
	d := start(t, Options{IndexLag: lag})
	c := client(d.Endpoint)
	table := uniqueName("deflag")
	createTasks(t, c, table, "")
	start := time.Now()
	put(t, c, table, task("k", "open", 1))
	if got := byStatus(t, c, table, "open"); time.Since(start) < lag*3/4 && len(got) != 0 {
		t.Fatalf("GSI lists %v right after the write under a default lag", got)
	}
	if seen := waitStatus(t, c, table, "open", "k"); seen.Sub(start) < lag {
		t.Fatalf("GSI saw the write after %v, before the default lag %v", seen.Sub(start), lag)
	}
}

// A graceful stop of a server keeping data on disk applies the index
// entries still queued, so the next start's GSIs match its tables.
func TestIndexLagAppliedOnStop(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "db")
	d := start(t, Options{Path: path, IndexLag: time.Hour})
	c := client(d.Endpoint)
	table := uniqueName("stop")
	createTasks(t, c, table, "")
	put(t, c, table, task("k", "open", 1))
	if got := byStatus(t, c, table, "open"); len(got) != 0 {
		t.Fatalf("GSI lists %v within an hour's lag", got)
	}
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	d2 := start(t, Options{Path: path, IndexLag: -1})
	if got := byStatus(t, client(d2.Endpoint), table, "open"); !slices.Equal(got, []string{"k"}) {
		t.Fatalf("after a graceful stop and restart the GSI lists %v, want [k]", got)
	}
}

// readStream reads every record of a stream's shards from TRIM_HORIZON,
// until a read returns nothing (an open shard) or no next iterator (closed).
func readStream(t *testing.T, sc *dynamodbstreams.Client, arn string) []stypes.Record {
	t.Helper()
	desc, err := sc.DescribeStream(ctxT(t), &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(arn)})
	if err != nil {
		t.Fatalf("DescribeStream: %v", err)
	}
	var recs []stypes.Record
	for _, sh := range desc.StreamDescription.Shards {
		it, err := sc.GetShardIterator(ctxT(t), &dynamodbstreams.GetShardIteratorInput{
			StreamArn: aws.String(arn), ShardId: sh.ShardId, ShardIteratorType: stypes.ShardIteratorTypeTrimHorizon,
		})
		if err != nil {
			t.Fatalf("GetShardIterator: %v", err)
		}
		for next := it.ShardIterator; next != nil; {
			out, err := sc.GetRecords(ctxT(t), &dynamodbstreams.GetRecordsInput{ShardIterator: next})
			if err != nil {
				t.Fatalf("GetRecords: %v", err)
			}
			recs = append(recs, out.Records...)
			if len(out.Records) == 0 {
				break
			}
			next = out.NextShardIterator
		}
	}
	return recs
}

func seq(t *testing.T, r stypes.Record) *big.Int {
	t.Helper()
	v, ok := new(big.Int).SetString(aws.ToString(r.Dynamodb.SequenceNumber), 10)
	if !ok {
		t.Fatalf("sequence number %q is not a decimal", aws.ToString(r.Dynamodb.SequenceNumber))
	}
	return v
}

func checkIncreasing(t *testing.T, recs []stypes.Record) {
	t.Helper()
	for i := 1; i < len(recs); i++ {
		if seq(t, recs[i]).Cmp(seq(t, recs[i-1])) <= 0 {
			t.Fatalf("sequence numbers do not increase: %s then %s",
				aws.ToString(recs[i-1].Dynamodb.SequenceNumber), aws.ToString(recs[i].Dynamodb.SequenceNumber))
		}
	}
}

func imageN(img map[string]stypes.AttributeValue, name string) string {
	if v, ok := img[name].(*stypes.AttributeValueMemberN); ok {
		return v.Value
	}
	return ""
}

func imageS(img map[string]stypes.AttributeValue, name string) string {
	if v, ok := img[name].(*stypes.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func TestStreamRecordsEveryWrite(t *testing.T) {
	t.Parallel()
	ep := shimServer(t)
	c, sc := client(ep), streamsClient(ep)
	for _, view := range stypes.StreamViewType("").Values() {
		t.Run(string(view), func(t *testing.T) {
			t.Parallel()
			table := uniqueName("stream")
			createTasks(t, c, table, view)

			desc, err := c.DescribeTable(ctxT(t), &dynamodb.DescribeTableInput{TableName: aws.String(table)})
			if err != nil {
				t.Fatal(err)
			}
			spec := desc.Table.StreamSpecification
			if spec == nil || !aws.ToBool(spec.StreamEnabled) || string(spec.StreamViewType) != string(view) ||
				desc.Table.LatestStreamLabel == nil || desc.Table.LatestStreamArn == nil {
				t.Fatalf("DescribeTable: StreamSpecification %+v, LatestStreamArn %v, LatestStreamLabel %v",
					spec, desc.Table.LatestStreamArn, desc.Table.LatestStreamLabel)
			}
			arn, err := StreamARN(ctxT(t), c, table)
			if err != nil || arn != *desc.Table.LatestStreamArn {
				t.Fatalf("StreamARN = %q, %v; want %q", arn, err, *desc.Table.LatestStreamArn)
			}
			list, err := sc.ListStreams(ctxT(t), &dynamodbstreams.ListStreamsInput{TableName: aws.String(table)})
			if err != nil || len(list.Streams) != 1 || aws.ToString(list.Streams[0].StreamArn) != arn ||
				aws.ToString(list.Streams[0].StreamLabel) != *desc.Table.LatestStreamLabel {
				t.Fatalf("ListStreams(%s) = %+v, %v", table, list, err)
			}

			before := time.Now().Add(-time.Second)
			put(t, c, table, task("a", "open", 1)) // INSERT a
			update := func(v int) {
				_, err := c.UpdateItem(ctxT(t), &dynamodb.UpdateItemInput{
					TableName: aws.String(table), Key: key("a"),
					UpdateExpression:          aws.String("SET v = :v"),
					ExpressionAttributeValues: map[string]types.AttributeValue{":v": n(v)},
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			update(2)                              // MODIFY a 1 -> 2
			put(t, c, table, task("a", "open", 2)) // the same item again: no record
			update(2)                              // no change: no record
			if _, err := c.PutItem(ctxT(t), &dynamodb.PutItemInput{
				TableName: aws.String(table), Item: task("a", "x", 9), ConditionExpression: aws.String("attribute_not_exists(pk)"),
			}); err == nil {
				t.Fatal("conditional put over an existing item succeeded")
			}
			if _, err := c.BatchWriteItem(ctxT(t), &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{
				table: {
					{PutRequest: &types.PutRequest{Item: task("b", "open", 1)}},    // INSERT b
					{DeleteRequest: &types.DeleteRequest{Key: key("a")}},           // REMOVE a
					{DeleteRequest: &types.DeleteRequest{Key: key("never-there")}}, // nothing
				},
			}}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.DeleteItem(ctxT(t), &dynamodb.DeleteItemInput{TableName: aws.String(table), Key: key("b")}); err != nil {
				t.Fatal(err) // REMOVE b
			}
			after := time.Now().Add(time.Second)

			recs := readStream(t, sc, arn)
			type want struct {
				event    stypes.OperationType
				pk       string
				old, new string // v in the images; "" for no image
			}
			wants := []want{
				{stypes.OperationTypeInsert, "a", "", "1"},
				{stypes.OperationTypeModify, "a", "1", "2"},
				{stypes.OperationTypeInsert, "b", "", "1"},
				{stypes.OperationTypeRemove, "a", "2", ""},
				{stypes.OperationTypeRemove, "b", "1", ""},
			}
			if len(recs) != len(wants) {
				t.Fatalf("got %d records, want %d: %+v", len(recs), len(wants), recs)
			}
			checkIncreasing(t, recs)
			// BatchWriteItem's requests run in parallel: order is per item only.
			if imageS(recs[2].Dynamodb.Keys, "pk") == "a" {
				recs[2], recs[3] = recs[3], recs[2]
			}
			ids := map[string]bool{}
			for i, r := range recs {
				w, d := wants[i], r.Dynamodb
				if r.EventName != w.event || imageS(d.Keys, "pk") != w.pk || len(d.Keys) != 1 {
					t.Fatalf("record %d: %s keys %v, want %s of %s", i, r.EventName, d.Keys, w.event, w.pk)
				}
				if aws.ToString(r.EventSource) != "aws:dynamodb" || aws.ToString(r.EventVersion) != "1.1" ||
					aws.ToString(r.AwsRegion) != "us-east-1" || r.EventID == nil || ids[*r.EventID] {
					t.Fatalf("record %d: source %v version %v region %v id %v", i, r.EventSource, r.EventVersion, r.AwsRegion, r.EventID)
				}
				ids[*r.EventID] = true
				if d.StreamViewType != view || aws.ToInt64(d.SizeBytes) <= 0 || d.ApproximateCreationDateTime == nil ||
					d.ApproximateCreationDateTime.Before(before) || d.ApproximateCreationDateTime.After(after) {
					t.Fatalf("record %d: view %s size %v created %v", i, d.StreamViewType, d.SizeBytes, d.ApproximateCreationDateTime)
				}
				wantNew := w.new != "" && (view == stypes.StreamViewTypeNewImage || view == stypes.StreamViewTypeNewAndOldImages)
				wantOld := w.old != "" && (view == stypes.StreamViewTypeOldImage || view == stypes.StreamViewTypeNewAndOldImages)
				if (d.NewImage != nil) != wantNew || (wantNew && (imageN(d.NewImage, "v") != w.new || imageS(d.NewImage, "pk") != w.pk || len(d.NewImage) != 3)) {
					t.Fatalf("record %d (%s): NewImage %v, want v=%q", i, r.EventName, d.NewImage, w.new)
				}
				if (d.OldImage != nil) != wantOld || (wantOld && (imageN(d.OldImage, "v") != w.old || len(d.OldImage) != 3)) {
					t.Fatalf("record %d (%s): OldImage %v, want v=%q", i, r.EventName, d.OldImage, w.old)
				}
			}
		})
	}
}

func TestStreamIterators(t *testing.T) {
	t.Parallel()
	ep := shimServer(t)
	c, sc := client(ep), streamsClient(ep)
	table := uniqueName("iter")
	arn := streamTable(t, c, table, stypes.StreamViewTypeNewImage)
	for i := range 5 {
		put(t, c, table, task("i"+strconv.Itoa(i), "open", i))
	}
	desc, err := sc.DescribeStream(ctxT(t), &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(arn)})
	if err != nil {
		t.Fatal(err)
	}
	sd := desc.StreamDescription
	if sd.StreamStatus != stypes.StreamStatusEnabled || aws.ToString(sd.TableName) != table || len(sd.KeySchema) != 1 ||
		sd.StreamViewType != stypes.StreamViewTypeNewImage || len(sd.Shards) != 1 || sd.CreationRequestDateTime == nil {
		t.Fatalf("DescribeStream = %+v", sd)
	}
	shard := sd.Shards[0]
	if shard.SequenceNumberRange == nil || shard.SequenceNumberRange.StartingSequenceNumber == nil ||
		shard.SequenceNumberRange.EndingSequenceNumber != nil || shard.ParentShardId != nil {
		t.Fatalf("open shard = %+v", shard)
	}
	iter := func(typ stypes.ShardIteratorType, seq *string) *string {
		t.Helper()
		out, err := sc.GetShardIterator(ctxT(t), &dynamodbstreams.GetShardIteratorInput{
			StreamArn: aws.String(arn), ShardId: shard.ShardId, ShardIteratorType: typ, SequenceNumber: seq,
		})
		if err != nil {
			t.Fatalf("GetShardIterator %s: %v", typ, err)
		}
		return out.ShardIterator
	}
	get := func(it *string, limit int32) ([]string, *string, []stypes.Record) {
		t.Helper()
		out, err := sc.GetRecords(ctxT(t), &dynamodbstreams.GetRecordsInput{ShardIterator: it, Limit: aws.Int32(limit)})
		if err != nil {
			t.Fatalf("GetRecords: %v", err)
		}
		var pks []string
		for _, r := range out.Records {
			pks = append(pks, imageS(r.Dynamodb.Keys, "pk"))
		}
		return pks, out.NextShardIterator, out.Records
	}

	// TRIM_HORIZON, two at a time.
	var all []stypes.Record
	it := iter(stypes.ShardIteratorTypeTrimHorizon, nil)
	for _, want := range [][]string{{"i0", "i1"}, {"i2", "i3"}, {"i4"}, nil} {
		var pks []string
		var recs []stypes.Record
		pks, it, recs = get(it, 2)
		if !slices.Equal(pks, want) {
			t.Fatalf("page = %v, want %v", pks, want)
		}
		if it == nil {
			t.Fatal("GetRecords on an open shard returned no NextShardIterator")
		}
		all = append(all, recs...)
	}
	checkIncreasing(t, all)
	if start := shard.SequenceNumberRange.StartingSequenceNumber; seq(t, stypes.Record{Dynamodb: &stypes.StreamRecord{SequenceNumber: start}}).Cmp(seq(t, all[0])) >= 0 {
		t.Fatalf("StartingSequenceNumber %s is not before the first record's %s", *start, *all[0].Dynamodb.SequenceNumber)
	}
	// The iterator at the end picks up later writes.
	put(t, c, table, task("i5", "open", 5))
	if pks, _, _ := get(it, 100); !slices.Equal(pks, []string{"i5"}) {
		t.Fatalf("after a new write the drained iterator reads %v, want [i5]", pks)
	}

	latest := iter(stypes.ShardIteratorTypeLatest, nil)
	pks, next, _ := get(latest, 100)
	if len(pks) != 0 || next == nil {
		t.Fatalf("LATEST reads %v (next %v), want nothing and a next iterator", pks, next)
	}
	put(t, c, table, task("i6", "open", 6))
	if pks, _, _ := get(next, 100); !slices.Equal(pks, []string{"i6"}) {
		t.Fatalf("LATEST then a write reads %v, want [i6]", pks)
	}

	at := all[2].Dynamodb.SequenceNumber
	if pks, _, _ := get(iter(stypes.ShardIteratorTypeAtSequenceNumber, at), 2); !slices.Equal(pks, []string{"i2", "i3"}) {
		t.Fatalf("AT_SEQUENCE_NUMBER of i2 reads %v", pks)
	}
	if pks, _, _ := get(iter(stypes.ShardIteratorTypeAfterSequenceNumber, at), 2); !slices.Equal(pks, []string{"i3", "i4"}) {
		t.Fatalf("AFTER_SEQUENCE_NUMBER of i2 reads %v", pks)
	}

	t.Run("errors", func(t *testing.T) {
		var nf *stypes.ResourceNotFoundException
		_, err := sc.DescribeStream(ctxT(t), &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(arn + "x")})
		if !errors.As(err, &nf) {
			t.Fatalf("DescribeStream of an unknown stream: %v", err)
		}
		_, err = sc.GetShardIterator(ctxT(t), &dynamodbstreams.GetShardIteratorInput{
			StreamArn: aws.String(arn), ShardId: aws.String("shardId-00000000000000000000-00000000"), ShardIteratorType: stypes.ShardIteratorTypeLatest,
		})
		if !errors.As(err, &nf) {
			t.Fatalf("GetShardIterator of an unknown shard: %v", err)
		}
		_, err = sc.GetShardIterator(ctxT(t), &dynamodbstreams.GetShardIteratorInput{
			StreamArn: aws.String(arn), ShardId: shard.ShardId, ShardIteratorType: stypes.ShardIteratorTypeAtSequenceNumber, SequenceNumber: aws.String("x1"),
		})
		if apiCode(err) != "ValidationException" {
			t.Fatalf("AT_SEQUENCE_NUMBER x1: %v", err)
		}
		_, err = sc.GetRecords(ctxT(t), &dynamodbstreams.GetRecordsInput{ShardIterator: aws.String("not-an-iterator")})
		if apiCode(err) != "ValidationException" {
			t.Fatalf("GetRecords with a bad iterator: %v", err)
		}
		_, err = sc.GetRecords(ctxT(t), &dynamodbstreams.GetRecordsInput{ShardIterator: latest, Limit: aws.Int32(1001)})
		if apiCode(err) != "ValidationException" {
			t.Fatalf("GetRecords with Limit 1001: %v", err)
		}
	})
}

// The stream carries each write at once, whatever the lag of the indexes.
func TestStreamIgnoresIndexLag(t *testing.T) {
	t.Parallel()
	ep := shimServer(t)
	c, sc := client(ep), streamsClient(ep)
	table := uniqueName("laggedstream")
	if err := SetIndexLag(ctxT(t), ep, table, time.Hour); err != nil {
		t.Fatal(err)
	}
	arn := streamTable(t, c, table, stypes.StreamViewTypeNewAndOldImages)
	put(t, c, table, task("k", "open", 1))
	put(t, c, table, task("k", "done", 2))
	recs := readStream(t, sc, arn)
	if len(recs) != 2 || imageS(recs[1].Dynamodb.NewImage, "status") != "done" || imageS(recs[1].Dynamodb.OldImage, "status") != "open" {
		t.Fatalf("stream under an hour's index lag holds %+v, want both writes", recs)
	}
	if got := byStatus(t, c, table, "open"); len(got) != 0 {
		t.Fatalf("GSI lists %v within an hour's lag", got)
	}
}

func TestStreamLifecycle(t *testing.T) {
	t.Parallel()
	ep := shimServer(t)
	c, sc := client(ep), streamsClient(ep)
	table := uniqueName("life")
	createTasks(t, c, table, stypes.StreamViewTypeKeysOnly)
	first, err := StreamARN(ctxT(t), c, table)
	if err != nil {
		t.Fatal(err)
	}
	put(t, c, table, task("a", "open", 1))

	// DeleteTable closes the stream; its records stay readable.
	if _, err := c.DeleteTable(ctxT(t), &dynamodb.DeleteTableInput{TableName: aws.String(table)}); err != nil {
		t.Fatal(err)
	}
	desc, err := sc.DescribeStream(ctxT(t), &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(first)})
	if err != nil {
		t.Fatal(err)
	}
	sd := desc.StreamDescription
	if sd.StreamStatus != stypes.StreamStatusDisabled || len(sd.Shards) != 1 || sd.Shards[0].SequenceNumberRange.EndingSequenceNumber == nil {
		t.Fatalf("stream of a deleted table: %+v", sd)
	}
	it, err := sc.GetShardIterator(ctxT(t), &dynamodbstreams.GetShardIteratorInput{
		StreamArn: aws.String(first), ShardId: sd.Shards[0].ShardId, ShardIteratorType: stypes.ShardIteratorTypeTrimHorizon,
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := sc.GetRecords(ctxT(t), &dynamodbstreams.GetRecordsInput{ShardIterator: it.ShardIterator})
	if err != nil || len(out.Records) != 1 || out.Records[0].EventName != stypes.OperationTypeInsert || out.NextShardIterator != nil {
		t.Fatalf("reading the closed shard: %+v, %v; want the INSERT and no next iterator", out, err)
	}
	if out.Records[0].Dynamodb.NewImage != nil || out.Records[0].Dynamodb.OldImage != nil {
		t.Fatalf("KEYS_ONLY record has images: %+v", out.Records[0].Dynamodb)
	}

	// The same name again gets a new stream.
	createTasks(t, c, table, stypes.StreamViewTypeNewImage)
	second, err := StreamARN(ctxT(t), c, table)
	if err != nil || second == first {
		t.Fatalf("recreated table's stream = %q, %v; want a new one (old %q)", second, err, first)
	}
	put(t, c, table, task("b", "open", 1))
	if recs := readStream(t, sc, second); len(recs) != 1 || imageS(recs[0].Dynamodb.Keys, "pk") != "b" {
		t.Fatalf("new stream holds %+v, want only b's INSERT", recs)
	}
	if recs := readStream(t, sc, first); len(recs) != 1 {
		t.Fatalf("old stream now holds %d records, want 1", len(recs))
	}

	// UpdateTable turns the stream off and on again.
	setStream := func(on bool) error {
		spec := &types.StreamSpecification{StreamEnabled: aws.Bool(on)}
		if on {
			spec.StreamViewType = types.StreamViewTypeNewAndOldImages
		}
		_, err := c.UpdateTable(ctxT(t), &dynamodb.UpdateTableInput{TableName: aws.String(table), StreamSpecification: spec})
		return err
	}
	if err := setStream(true); apiCode(err) != "ValidationException" {
		t.Fatalf("enabling an enabled stream: %v, want ValidationException", err)
	}
	if err := setStream(false); err != nil {
		t.Fatalf("UpdateTable disabling the stream: %v", err)
	}
	if _, err := StreamARN(ctxT(t), c, table); !errors.Is(err, ErrNoStream) {
		t.Fatalf("StreamARN after disabling = %v, want ErrNoStream", err)
	}
	put(t, c, table, task("c", "open", 1)) // no stream: no record anywhere
	if err := setStream(true); err != nil {
		t.Fatalf("UpdateTable enabling the stream: %v", err)
	}
	third, err := StreamARN(ctxT(t), c, table)
	if err != nil || third == second {
		t.Fatalf("re-enabled stream = %q, %v; want a new one", third, err)
	}
	put(t, c, table, task("c", "open", 2))
	recs := readStream(t, sc, third)
	if len(recs) != 1 || recs[0].EventName != stypes.OperationTypeModify || imageN(recs[0].Dynamodb.OldImage, "v") != "1" {
		t.Fatalf("re-enabled stream holds %+v, want c's MODIFY from v=1", recs)
	}
	if recs := readStream(t, sc, second); len(recs) != 1 {
		t.Fatalf("disabled stream holds %d records, want 1", len(recs))
	}
	list, err := sc.ListStreams(ctxT(t), &dynamodbstreams.ListStreamsInput{TableName: aws.String(table)})
	if err != nil || len(list.Streams) != 3 {
		t.Fatalf("ListStreams = %+v, %v; want the table's 3 streams", list, err)
	}
	page, err := sc.ListStreams(ctxT(t), &dynamodbstreams.ListStreamsInput{TableName: aws.String(table), Limit: aws.Int32(2)})
	if err != nil || len(page.Streams) != 2 || page.LastEvaluatedStreamArn == nil {
		t.Fatalf("ListStreams Limit 2 = %+v, %v", page, err)
	}
	rest, err := sc.ListStreams(ctxT(t), &dynamodbstreams.ListStreamsInput{TableName: aws.String(table), ExclusiveStartStreamArn: page.LastEvaluatedStreamArn})
	if err != nil || len(rest.Streams) != 1 || rest.LastEvaluatedStreamArn != nil {
		t.Fatalf("ListStreams after %v = %+v, %v", page.LastEvaluatedStreamArn, rest, err)
	}
}

// TestStreamSurvivesKill writes from several goroutines, kills the server
// with SIGKILL in the middle, and restarts it on the same data: every
// acknowledged write has its record, each item's records are in write
// order, and the last record of each item is the item as stored (a write
// and its record persist together or not at all).
func TestStreamSurvivesKill(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "db")
	d := start(t, Options{Path: path})
	c := dynamodb.New(dynamodb.Options{ // no retries: an answer is an acknowledgement
		BaseEndpoint: aws.String(d.Endpoint),
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("local", "local", ""),
		Retryer:      aws.NopRetryer{},
	})
	table := uniqueName("kill")
	arn := streamTable(t, c, table, stypes.StreamViewTypeNewAndOldImages)

	const writers = 4
	acked := make([]int, writers)
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	enough := make(chan struct{})
	for w := range writers {
		wg.Go(func() {
			pk := "w" + strconv.Itoa(w)
			for v := 1; ; v++ {
				_, err := c.PutItem(ctxT(t), &dynamodb.PutItemInput{TableName: aws.String(table), Item: task(pk, "open", v)})
				if err != nil {
					return // the server is gone
				}
				acked[w] = v
				mu.Lock()
				if total++; total == 60 {
					close(enough)
				}
				mu.Unlock()
			}
		})
	}
	killMidWrites(t, d, enough, &wg)

	d2 := start(t, Options{Path: path})
	c2, sc2 := client(d2.Endpoint), streamsClient(d2.Endpoint)
	if again, err := StreamARN(ctxT(t), c2, table); err != nil || again != arn {
		t.Fatalf("after restart StreamARN = %q, %v; want %q", again, err, arn)
	}
	recs := readStream(t, sc2, arn)
	checkIncreasing(t, recs)
	versions := map[string][]int{}
	for _, r := range recs {
		pk := imageS(r.Dynamodb.Keys, "pk")
		v, _ := strconv.Atoi(imageN(r.Dynamodb.NewImage, "v"))
		versions[pk] = append(versions[pk], v)
	}
	for w := range writers {
		pk := "w" + strconv.Itoa(w)
		vs := versions[pk]
		for i, v := range vs {
			if v != i+1 {
				t.Fatalf("%s: records hold versions %v, want 1, 2, 3, ... in order", pk, vs)
			}
		}
		if len(vs) < acked[w] {
			t.Fatalf("%s: %d records after restart, but %d writes were acknowledged", pk, len(vs), acked[w])
		}
		if stored := attrN(getItem(t, c2, table, pk, true), "v"); stored != strconv.Itoa(len(vs)) {
			t.Fatalf("%s: stored v=%s, but the last record says %d", pk, stored, len(vs))
		}
	}

	// Sequence numbers keep increasing after the restart.
	put(t, c2, table, task("after", "open", 1))
	recs2 := readStream(t, sc2, arn)
	if len(recs2) != len(recs)+1 {
		t.Fatalf("after one more write the stream holds %d records, want %d", len(recs2), len(recs)+1)
	}
	checkIncreasing(t, recs2)
}

// A write that leaves the item as DynamoDB holds it (numbers in another
// notation, sets in another order, nested values alike) adds no record; a
// change anywhere, however deep, adds one.
func TestStreamSkipsWritesThatChangeNothing(t *testing.T) {
	t.Parallel()
	ep := shimServer(t)
	c, sc := client(ep), streamsClient(ep)
	table := uniqueName("same")
	arn := streamTable(t, c, table, stypes.StreamViewTypeNewAndOldImages)
	nv := func(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
	item := func(v, nested string, tags ...string) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{
			"pk": s("a"), "status": s("open"), "v": nv(v),
			"tags": &types.AttributeValueMemberSS{Value: tags},
			"nums": &types.AttributeValueMemberNS{Value: []string{"1", "20"}},
			"m": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
				"l": &types.AttributeValueMemberL{Value: []types.AttributeValue{nv(nested), s("s")}},
			}},
		}
	}
	put(t, c, table, item("2", "1", "x", "y"))          // INSERT
	put(t, c, table, item("2.0", "1", "y", "x"))        // the same item: no record
	put(t, c, table, item("2", "1.00", "x", "y"))       // the same item: no record
	put(t, c, table, item("2", "2", "x", "y"))          // MODIFY, deep in a list in a map
	put(t, c, table, item("2", "2", "x", "y", "z"))     // MODIFY, a set grew
	put(t, c, table, item("20e-1", "2", "z", "y", "x")) // the same item: no record
	put(t, c, table, item("2", "2", "z", "y", "w"))     // MODIFY, a set member changed
	recs := readStream(t, sc, arn)
	var got []string
	for _, r := range recs {
		got = append(got, string(r.EventName))
	}
	if want := []string{"INSERT", "MODIFY", "MODIFY", "MODIFY"}; !slices.Equal(got, want) {
		t.Fatalf("records %v, want %v", got, want)
	}
}

// killMidWrites waits until the writers have made enough progress, then
// SIGKILLs d with their writes in flight, and waits for d and the
// writers to stop.
func killMidWrites(t *testing.T, d *Dynalite, enough <-chan struct{}, wg *sync.WaitGroup) {
	t.Helper()
	select {
	case <-enough:
	case <-time.After(time.Minute):
		t.Fatal("writers made too little progress")
	}
	if err := d.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-d.Done()
	wg.Wait()
}

// ProcessUsage counts the server's CPU time: it never goes back, and work
// done between two reads shows in their difference.
func TestProcessUsage(t *testing.T) {
	ep := shimServer(t)
	c := client(ep)
	table := uniqueName("usage")
	createTasks(t, c, table, "")
	before, err := ProcessUsage(ctxT(t), ep)
	if err != nil {
		t.Fatalf("ProcessUsage: %v", err)
	}
	if before <= 0 {
		t.Fatalf("ProcessUsage of a running server = %v, want > 0", before)
	}
	for i := range 300 {
		put(t, c, table, task("u"+strconv.Itoa(i), "open", i))
	}
	after, err := ProcessUsage(ctxT(t), ep)
	if err != nil {
		t.Fatalf("ProcessUsage: %v", err)
	}
	if after <= before {
		t.Fatalf("ProcessUsage after 300 writes = %v, before them %v: want it to grow", after, before)
	}
	if _, err := ProcessUsage(ctxT(t), "http://127.0.0.1:1"); err == nil {
		t.Fatal("ProcessUsage of no server answered no error")
	}
}
