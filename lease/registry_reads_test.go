package lease_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/localstack"
)

// registryQueues is how many queues of 128-character names the registry
// read tests put in the queue registry: three pages of about 130 KB.
const registryQueues = 3000

// fillRegistry writes n queue names of 128 characters into the queue
// registry as its writers store them (registry.go), in pages of
// lease.RegistryPage, with no task in any of them, and returns the units
// of one consistent read of the whole registry.
func (e *env) fillRegistry(t *testing.T, n int) float64 {
	t.Helper()
	table := e.names.Table(schema.HeartbeatsTable)
	pages := (n + lease.RegistryPage - 1) / lease.RegistryPage
	for p := range pages {
		var names []string
		for i := p * lease.RegistryPage; i < min(n, (p+1)*lease.RegistryPage); i++ {
			names = append(names, fmt.Sprintf("%s-%05d", strings.Repeat("q", 122), i))
		}
		item := map[string]types.AttributeValue{
			"agent_id": &types.AttributeValueMemberS{Value: registryPageID(p)},
			"queues":   &types.AttributeValueMemberSS{Value: names},
		}
		if p == 0 {
			item["pages"] = &types.AttributeValueMemberN{Value: fmt.Sprint(pages)}
		}
		if _, err := e.db.PutItem(ctx(t), &dynamodb.PutItemInput{TableName: &table, Item: item}); err != nil {
			t.Fatalf("write registry page %d: %v", p, err)
		}
	}
	m := testenv.NewMeter(t, e.names.Prefix)
	for p := range pages {
		if _, err := e.db.GetItem(ctx(t), &dynamodb.GetItemInput{TableName: &table, ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{"agent_id": &types.AttributeValueMemberS{Value: registryPageID(p)}}}); err != nil {
			t.Fatalf("read registry page %d: %v", p, err)
		}
	}
	return registryUnits(m.Take())
}

func registryPageID(p int) string {
	if p == 0 {
		return "#queues"
	}
	return fmt.Sprintf("#queues#%d", p)
}

// registryUnits is the read units c billed on the queue registry's pages.
func registryUnits(c localstack.Capacity) float64 {
	var u float64
	for k, v := range c.Partitions {
		if k.Table == schema.HeartbeatsTable && k.Index == "" && strings.HasPrefix(k.Key, "#queues") {
			u += v.Read
		}
	}
	return u
}

// A page of every queue's todo tasks read the whole queue registry (three
// pages of 130 KB at 3,000 queues of long names, ~100 read units) for
// each of its up to four reads of the queues, and the next page read it
// again: ~400 read units a page, some 1,300 at 10,000 queues, before it
// read a single task. A page reads the registry at most once, and a
// page within a second of the last read none: listings use this
// process's copy while it is younger than that bound.
func TestATodoPageReadsTheQueueRegistryOnce(t *testing.T) {
	e := newEnv(t)
	c := ctx(t)
	one := e.fillRegistry(t, registryQueues)
	m := testenv.NewMeter(t, e.names.Prefix)
	e.count.Take()
	// A read of the registry is one GetItem of its first page (and one
	// BatchGetItem of the others); nothing else of a todo page over empty
	// queues gets an item. Counted as the store sends them (an SDK retry
	// of a slow read, which the meter bills twice, is one read), and the
	// read units are the figures the comment above gives.
	p := lease.ListTasksParams{Status: lease.StatusTodo, Limit: 10}
	for i, want := range []int{1, 0} {
		page := must[lease.TaskPage](t)(e.store.ListTasks(c, p))
		reads, units := e.count.Take()["GetItem"], registryUnits(m.Take())
		t.Logf("todo page %d at %d queues: %d reads of the registry, %g read units (one read: %g)", i, registryQueues, reads, units, one)
		if reads > want {
			t.Errorf("todo page %d read the queue registry %d times (%g read units; one read: %g), want at most %d", i, reads, units, one, want)
		}
		if len(page.Tasks) != 0 || page.NextCursor == "" {
			t.Fatalf("todo page %d: %d tasks, cursor %q; want none and a cursor past 256 empty queues", i, len(page.Tasks), page.NextCursor)
		}
		p = lease.ListTasksParams{Cursor: page.NextCursor}
	}
	e.clock.Advance(lease.ListedQueuesFor)
	must[lease.TaskPage](t)(e.store.ListTasks(c, p))
	if reads, units := e.count.Take()["GetItem"], registryUnits(m.Take()); reads != 1 {
		t.Errorf("a todo page once the copy is %v old read the queue registry %d times (%g read units), want once (%g)", lease.ListedQueuesFor, reads, units, one)
	}
}

// A walk of GET /api/queues read the whole registry for each page of 100
// queues: at 3,000 queues of long names 30 pages of ~100 read units, and
// at 10,000 about 100 pages of ~325 (O(n²)). A walk within the bound reads
// it once.
func TestAQueuesWalkReadsTheQueueRegistryOnce(t *testing.T) {
	e := newEnv(t)
	c := ctx(t)
	one := e.fillRegistry(t, registryQueues)
	m := testenv.NewMeter(t, e.names.Prefix)
	e.count.Take()
	// A read of the registry is one GetItem of its first page (and one
	// BatchGetItem of the others); a queue page reads its queues' counters
	// with a BatchGetItem, and gets no other item. Counted as the store
	// sends them (an SDK retry of a slow read, which the meter bills
	// twice, is one read), as TestATodoPageReadsTheQueueRegistryOnce
	// counts them; the read units are logged beside.
	listed, pages := 0, 0
	for p := (lease.ListQueuesParams{}); ; pages++ {
		page := must[lease.QueuePage](t)(e.store.ListQueuePage(c, p))
		listed += len(page.Queues)
		if page.NextCursor == "" {
			break
		}
		p.Cursor = page.NextCursor
	}
	reads, units := e.count.Take()["GetItem"], registryUnits(m.Take())
	t.Logf("a walk of %d queue pages at %d queues: %d reads of the registry, %g read units (one read: %g)", pages+1, registryQueues, reads, units, one)
	if listed != registryQueues {
		t.Fatalf("the walk listed %d queues, want %d", listed, registryQueues)
	}
	if reads > 1 {
		t.Errorf("a walk of %d queue pages read the queue registry %d times (%g read units; one read: %g), want at most once", pages+1, reads, units, one)
	}
}

// The listings' copy of the registry holds the queues this process adds
// at once, and another process's once it is older than the bound.
func TestListingsFindNewQueues(t *testing.T) {
	e := newEnv(t)
	c := ctx(t)
	e.create(t, lease.CreateTaskParams{TaskID: "a", Queue: "a"})
	queues := func() string {
		t.Helper()
		var names []string
		for _, q := range must[[]lease.QueueStats](t)(e.store.ListQueues(c)) {
			names = append(names, q.Queue)
		}
		return fmt.Sprint(names)
	}
	if got := queues(); got != "[a]" {
		t.Fatalf("queues %s, want [a]", got)
	}
	e.create(t, lease.CreateTaskParams{TaskID: "b", Queue: "b"})
	if got := queues(); got != "[a b]" {
		t.Errorf("queues after this process created in b: %s, want [a b] at once", got)
	}
	must[lease.Task](t)(e.process().CreateTask(c, lease.CreateTaskParams{TaskID: "c", Queue: "c"}))
	e.clock.Advance(lease.ListedQueuesFor)
	if got := queues(); got != "[a b c]" {
		t.Errorf("queues %v after another process created in c: %s, want [a b c]", lease.ListedQueuesFor, got)
	}
	e.caughtUp(t)
	var ids []string
	for _, task := range must[lease.TaskPage](t)(e.store.ListTasks(c, lease.ListTasksParams{Status: lease.StatusTodo})).Tasks {
		ids = append(ids, task.TaskID)
	}
	if fmt.Sprint(ids) != "[a b c]" {
		t.Errorf("todo tasks %v, want [a b c]", ids)
	}
}
