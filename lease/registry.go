package lease

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// The queue registry.
//
// The registry names every queue that has had a task, so that what lists
// every queue (a todo listing without a queue, GET /api/queues) needs no
// Scan. Names are only ever added. It lives in the heartbeats table under
// keys no agent id can take, in pages of at most RegistryPage names:
// "#queues" (page 0, which also holds "pages", how many pages there are;
// absent, one), then "#queues#1", "#queues#2", and so on. One item would
// stop growing at DynamoDB's 400 KB item limit, about 3,000 queues with
// long names, and every task created in a new queue after that would fail.
// A page of 1,000 names of 128 characters is about 130 KB.
//
// A writer reads the registry (page 0 with one GetItem, the others with a
// BatchGetItem, all consistent) and ADDs the names it lacks to the last
// page, on condition that the page still has room for them
// (size(queues)). A full page makes it raise pages on page 0, on condition
// that nobody has raised it that far yet, and add to the new page. Two
// writers adding one name at once may put it on two pages: readers take
// the union.
//
// Listings (a todo listing of every queue, GET /api/queues) read a copy
// of the registry this process keeps instead (listedQueues): it reads the
// registry again once its copy is listedQueuesFor old, and adds the queues
// this process puts in the registry at once. Names are only ever added, so
// the copy can miss only a queue another process created within that bound,
// as an index a listing reads may miss a task just created. A read of the
// registry costs a read unit per 4 KB of it (about 32 a page of 1,000 long
// names), so without the copy a listing's page cost that much again for
// every read of the queues it made. What adds to the registry reads it
// itself, consistently: never the copy.

// RegistryPage is how many queue names one page of the queue registry
// holds at most.
const RegistryPage = 1000

// registryBatch is how many names one ADD carries at most.
const registryBatch = 100

// registryDB is what reading and adding to the registry takes.
type registryDB interface {
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	BatchGetItem(context.Context, *dynamodb.BatchGetItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
	UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

// registry is the queue registry as read: every name, sorted, and how
// many pages hold them.
type registry struct {
	names []string
	pages int
}

// has reports whether q is in the registry.
func (r registry) has(q string) bool {
	_, ok := slices.BinarySearch(r.names, q)
	return ok
}

// listedQueuesFor is how old a listing's copy of the registry may be.
const listedQueuesFor = time.Second

// listedQueues is this process's copy of the registry for listings.
type listedQueues struct {
	mu    sync.Mutex
	names []string  // sorted; never changed in place
	at    time.Time // when the read it holds began; zero: none yet
}

// get returns the copy, read again with read once it is listedQueuesFor
// old by clock (or from later than clock: the clock went back).
// Concurrent listings wait for one read.
func (l *listedQueues) get(clock func() time.Time, read func() (registry, error)) ([]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := clock()
	if age := now.Sub(l.at); l.at.IsZero() || age < 0 || age >= listedQueuesFor {
		r, err := read()
		if err != nil {
			return nil, err
		}
		l.names, l.at = r.names, now
	}
	return slices.Clip(l.names), nil
}

// add puts names, which this process has put in the registry, in the copy.
func (l *listedQueues) add(names []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.at.IsZero() {
		return
	}
	all := slices.Concat(l.names, names)
	slices.Sort(all)
	l.names = slices.Compact(all)
}

// registryKey is the key of the registry's page p.
func registryKey(p int) map[string]types.AttributeValue {
	if p == 0 {
		return agentKey(queueRegistryID)
	}
	return agentKey(queueRegistryID + "#" + strconv.Itoa(p))
}

// readRegistry reads every page of the registry of table (the heartbeats
// table), consistently.
func readRegistry(ctx context.Context, db registryDB, table string) (registry, error) {
	out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, Key: registryKey(0), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return registry{}, fmt.Errorf("read queue registry: %w", err)
	}
	r := registry{pages: max(1, int(numberAttr(out.Item, "pages")))}
	r.names = append(r.names, setAttr(out.Item, "queues")...)
	if r.pages > 1 {
		keys := make([]map[string]types.AttributeValue, 0, r.pages-1)
		for p := 1; p < r.pages; p++ {
			keys = append(keys, registryKey(p))
		}
		items, err := batchGetItems(ctx, db, table, keys, "", nil)
		if err != nil {
			return registry{}, fmt.Errorf("read queue registry: %w", err)
		}
		for _, item := range items {
			r.names = append(r.names, setAttr(item, "queues")...)
		}
	}
	slices.Sort(r.names)
	r.names = slices.Compact(r.names)
	return r, nil
}

func setAttr(item map[string]types.AttributeValue, name string) []string {
	if ss, ok := item[name].(*types.AttributeValueMemberSS); ok {
		return ss.Value
	}
	return nil
}

// addToRegistry adds to the registry of table the queues it lacks, with
// pages of at most page names (RegistryPage; lower in tests).
func addToRegistry(ctx context.Context, db registryDB, table string, page int, queues []string) error {
	if len(queues) == 0 {
		return nil
	}
	r, err := readRegistry(ctx, db, table)
	if err != nil {
		return err
	}
	var missing []string
	for _, q := range queues {
		if !r.has(q) && !slices.Contains(missing, q) {
			missing = append(missing, q)
		}
	}
	return r.add(ctx, db, table, page, missing)
}

// add ADDs names, which r lacks, to the last page of the registry r was
// read from, starting a page whenever the last one is full.
func (r registry) add(ctx context.Context, db registryDB, table string, page int, names []string) error {
	last := r.pages - 1
	for len(names) > 0 {
		n := min(len(names), registryBatch, page)
		room := expression.AttributeNotExists(expression.Name("queues")).
			Or(expression.Size(expression.Name("queues")).LessThanEqual(expression.Value(page - n)))
		expr, err := expression.NewBuilder().
			WithUpdate(expression.Add(expression.Name("queues"), expression.Value(&types.AttributeValueMemberSS{Value: names[:n]}))).
			WithCondition(room).Build()
		if err != nil {
			return err
		}
		_, err = db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: &table, Key: registryKey(last),
			UpdateExpression:          expr.Update(),
			ConditionExpression:       expr.Condition(),
			ExpressionAttributeNames:  expr.Names(),
			ExpressionAttributeValues: expr.Values(),
		})
		if _, full := conditionFailed(err); full {
			if last, err = nextPage(ctx, db, table, last); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("register queues: %w", err)
		}
		names = names[n:]
	}
	return nil
}

// nextPage is the page to add to after page full was found full: the
// registry's last page, once pages on page 0 counts one past full.
func nextPage(ctx context.Context, db registryDB, table string, full int) (int, error) {
	want := full + 2 // pages, with a page after full
	expr, err := expression.NewBuilder().
		WithUpdate(expression.Set(expression.Name("pages"), expression.Value(want))).
		WithCondition(expression.AttributeNotExists(expression.Name("pages")).
			Or(expression.Name("pages").LessThan(expression.Value(want)))).Build()
	if err != nil {
		return 0, err
	}
	_, err = db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &table, Key: registryKey(0),
		UpdateExpression:                    expr.Update(),
		ConditionExpression:                 expr.Condition(),
		ExpressionAttributeNames:            expr.Names(),
		ExpressionAttributeValues:           expr.Values(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	item, raced := conditionFailed(err)
	if err != nil && !raced {
		return 0, fmt.Errorf("register queues: start a page: %w", err)
	}
	if !raced {
		return full + 1, nil
	}
	// Another writer has started it, or more: add to the last there is.
	if item == nil {
		out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, Key: registryKey(0), ConsistentRead: aws.Bool(true)})
		if err != nil {
			return 0, fmt.Errorf("register queues: %w", err)
		}
		item = out.Item
	}
	return max(full+1, int(numberAttr(item, "pages"))-1), nil
}
