package localstack

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	stypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

// repairedLine starts each line the server logs for an index it repaired.
const repairedLine = "shim: repaired index "

// indexMatchesTable fails the test unless the by-status GSI of table holds
// exactly one entry per item that has a status, equal to the item (the
// projection is ALL).
func indexMatchesTable(t *testing.T, c *dynamodb.Client, table string) {
	t.Helper()
	scan := func(index string) map[string]string {
		in := &dynamodb.ScanInput{TableName: aws.String(table)}
		if index != "" {
			in.IndexName = aws.String(index)
		} else {
			in.ConsistentRead = aws.Bool(true)
		}
		got := map[string]string{}
		for p := dynamodb.NewScanPaginator(c, in); p.HasMorePages(); {
			out, err := p.NextPage(ctxT(t))
			if err != nil {
				t.Fatalf("Scan %s %q: %v", table, index, err)
			}
			for _, it := range out.Items {
				if index == "" && attrS(it, "status") == "" {
					continue // not in the sparse index
				}
				pk := attrS(it, "pk")
				if _, dup := got[pk]; dup {
					t.Errorf("index %q of %s lists %s twice", index, table, pk)
				}
				got[pk] = fmt.Sprintf("status=%s v=%s attrs=%d", attrS(it, "status"), attrN(it, "v"), len(it))
			}
		}
		return got
	}
	items, entries := scan(""), scan("by-status")
	for _, pk := range slices.Sorted(maps.Keys(items)) {
		if e, ok := entries[pk]; !ok {
			t.Errorf("%s: item {%s} has no index entry", pk, items[pk])
		} else if e != items[pk] {
			t.Errorf("%s: item {%s}, index entry {%s}", pk, items[pk], e)
		}
	}
	for _, pk := range slices.Sorted(maps.Keys(entries)) {
		if _, ok := items[pk]; !ok {
			t.Errorf("%s: index entry {%s} for no item", pk, entries[pk])
		}
	}
}

// A kill -9 of a server keeping data on disk loses the index updates that
// an index lag still held in memory; the next start on that directory
// rebuilds the table's secondary indexes from its items before it
// answers: entries missing, stale (an earlier version of the item, or of
// its key) and left over (a deleted item) are all put right.
func TestIndexRepairedAfterKill(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "db")
	d := start(t, Options{Path: path, IndexLag: -1})
	c := client(d.Endpoint)
	prefix := uniqueName("repair") + "-"
	table := prefix + "tasks"
	createTasks(t, c, table, "")
	// A first version of every item reaches the index at once.
	for i := range 8 {
		put(t, c, table, task("k"+strconv.Itoa(i), "open", 1))
	}
	indexMatchesTable(t, c, table)
	// Then the index lags by an hour: what follows is queued in memory.
	if err := SetIndexLag(ctxT(t), d.Endpoint, prefix, time.Hour); err != nil {
		t.Fatal(err)
	}
	put(t, c, table, task("k0", "done", 2))  // the entry moves to another key
	put(t, c, table, task("k1", "open", 2))  // the entry keeps its key, with a new value
	put(t, c, table, task("new", "open", 1)) // a new entry
	if _, err := c.DeleteItem(ctxT(t), &dynamodb.DeleteItemInput{TableName: aws.String(table), Key: key("k2")}); err != nil {
		t.Fatal(err) // the entry goes
	}
	_, err := c.UpdateItem(ctxT(t), &dynamodb.UpdateItemInput{ // the item leaves the sparse index
		TableName: aws.String(table), Key: key("k3"),
		UpdateExpression:         aws.String("REMOVE #s"),
		ExpressionAttributeNames: map[string]string{"#s": "status"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := byStatus(t, c, table, "open"); !slices.Equal(got, []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"}) {
		t.Fatalf("within the lag the index lists %v under open, want the first versions", got)
	}
	if err := d.cmd.Process.Kill(); err != nil { // SIGKILL: the queue is lost
		t.Fatal(err)
	}
	<-d.Done()

	log := &tail{max: 64 << 10}
	d2 := start(t, Options{Path: path, IndexLag: -1, Log: log})
	c2 := client(d2.Endpoint)
	indexMatchesTable(t, c2, table)
	if got := byStatus(t, c2, table, "open"); !slices.Equal(got, []string{"k1", "k4", "k5", "k6", "k7", "new"}) {
		t.Fatalf("after the restart the index lists %v under open", got)
	}
	if got := byStatus(t, c2, table, "done"); !slices.Equal(got, []string{"k0"}) {
		t.Fatalf("after the restart the index lists %v under done, want [k0]", got)
	}
	want := repairedLine + "by-status of table " + table + ": 2 missing, 1 stale, 3 extra entries"
	if !strings.Contains(log.String(), want) {
		t.Errorf("the server's log lacks %q:\n%s", want, log.String())
	}

	// The repair is done once: a graceful stop and a start find nothing to do.
	if err := d2.Stop(); err != nil {
		t.Fatal(err)
	}
	log3 := &tail{max: 64 << 10}
	d3 := start(t, Options{Path: path, IndexLag: -1, Log: log3})
	indexMatchesTable(t, client(d3.Endpoint), table)
	if strings.Contains(log3.String(), repairedLine) {
		t.Errorf("a start after a graceful stop repaired indexes:\n%s", log3.String())
	}
}

// Without a lag a write's index entries are stored in the LevelDB batch that
// stores its item (and its stream record): a kill -9 in the middle of
// writes leaves the index matching the table, with nothing for the next
// start to repair. Each write moves its item to another index key, so an
// index update cut in half would show.
func TestIndexEntriesSurviveKillWithTheirItems(t *testing.T) {
	t.Parallel()
	for _, view := range []stypes.StreamViewType{"", stypes.StreamViewTypeNewAndOldImages} {
		name := "stream " + string(view)
		if view == "" {
			name = "no stream"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "db")
			d := start(t, Options{Path: path, IndexLag: -1})
			c := dynamodb.New(dynamodb.Options{ // no retries: the server will be gone
				BaseEndpoint: aws.String(d.Endpoint),
				Region:       "us-east-1",
				Credentials:  credentials.NewStaticCredentialsProvider("local", "local", ""),
				Retryer:      aws.NopRetryer{},
			})
			table := uniqueName("atomic")
			createTasks(t, c, table, view)

			const writers = 6
			var wg sync.WaitGroup
			var mu sync.Mutex
			total := 0
			enough := make(chan struct{})
			for w := range writers {
				wg.Go(func() {
					pk := "w" + strconv.Itoa(w)
					for v := 1; ; v++ {
						var err error
						if v%5 == 0 {
							_, err = c.DeleteItem(ctxT(t), &dynamodb.DeleteItemInput{TableName: aws.String(table), Key: key(pk)})
						} else {
							_, err = c.PutItem(ctxT(t), &dynamodb.PutItemInput{TableName: aws.String(table), Item: task(pk, "s"+strconv.Itoa(v), v)})
						}
						if err != nil {
							return // the server is gone
						}
						mu.Lock()
						if total++; total == 200 {
							close(enough)
						}
						mu.Unlock()
					}
				})
			}
			killMidWrites(t, d, enough, &wg)

			log := &tail{max: 64 << 10}
			d2 := start(t, Options{Path: path, IndexLag: -1, Log: log})
			if strings.Contains(log.String(), repairedLine) {
				t.Errorf("the start after the kill had indexes to repair:\n%s", log.String())
			}
			indexMatchesTable(t, client(d2.Endpoint), table)
		})
	}
}
