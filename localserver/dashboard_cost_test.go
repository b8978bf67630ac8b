package localserver

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/localstack"
)

// The requests and read units of one refresh of each dashboard view, over
// a fleet of 5,000 tasks (todo, blocked, in progress, done, cancelled and
// failed, in four queues) with 200 live checkouts: the requests are those
// ui/static makes at a refresh (e2e/browser/dashboard.test.mjs holds the
// page to them). README "The dashboard" gives the figures.
func TestDashboardRefreshCost(t *testing.T) {
	t.Parallel()
	prefix := testenv.Prefix()
	srv, err := Start(context.Background(), Config{
		Addr: "127.0.0.1:0", DynamoEndpoint: testenv.Endpoint(), TablePrefix: prefix,
		SweepInterval: -1, StreamPollInterval: 1 << 62, FeedSettle: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	base, admin := srv.URL(), srv.AdminKey()
	f := seedFleet(t, base, admin)
	if err := srv.Drain(testenv.Context(t)); err != nil {
		t.Fatal(err)
	}
	meter := testenv.NewMeter(t, prefix)

	// refresh reads path as the page does, following next_cursor up to
	// max pages (pages() in api.js), and returns the tasks of every page.
	type cost struct {
		requests int
		units    float64
	}
	var spent cost
	read := func(path, field string, max int) []map[string]any {
		t.Helper()
		var out []map[string]any
		next := path
		for i := 0; i < max; i++ {
			code, m := call(t, "GET", base+next, admin, "")
			spent.requests++
			if code != 200 {
				t.Fatalf("GET %s: %d %v", next, code, m)
			}
			items, _ := m[field].([]any)
			for _, x := range items {
				out = append(out, x.(map[string]any))
			}
			c, _ := m["next_cursor"].(string)
			if c == "" || field == "events" && len(items) == 0 {
				break // the fleet feed always has a next cursor
			}
			sep := "?"
			if strings.Contains(path, "?") {
				sep = "&"
			}
			next = path + sep + "cursor=" + url.QueryEscape(c)
		}
		return out
	}
	// The task list follows a cursor alone (listPages in tasks.js).
	readTasks := func(q url.Values, max int) []map[string]any {
		t.Helper()
		var out []map[string]any
		path := "/api/tasks?" + q.Encode()
		for i := 0; i < max; i++ {
			code, m := call(t, "GET", base+path, admin, "")
			spent.requests++
			if code != 200 {
				t.Fatalf("GET %s: %d %v", path, code, m)
			}
			for _, x := range m["tasks"].([]any) {
				out = append(out, x.(map[string]any))
			}
			c, _ := m["next_cursor"].(string)
			if c == "" {
				break
			}
			path = "/api/tasks?" + url.Values{"limit": {q.Get("limit")}, "cursor": {c}}.Encode()
		}
		return out
	}
	measure := func(view string, refresh func()) cost {
		t.Helper()
		meter.Take()
		spent = cost{}
		refresh()
		spent.units = readUnits(meter.Take())
		t.Logf("%-28s %3d requests %8.1f read units", view, spent.requests, spent.units)
		return spent
	}

	measure("checkouts", func() {
		if n := len(read("/api/checkouts", "checkouts", 20)); n != f.leases {
			t.Errorf("checkouts: %d leases, want %d", n, f.leases)
		}
		read("/api/tasks?status=in_progress&limit=1000", "tasks", 5)
	})
	var feed string
	full := measure("tasks: whole listing", func() {
		since := time.Now().Add(-time.Second).UTC().Format(time.RFC3339Nano)
		_, m := call(t, "GET", base+"/api/events?limit=1000&since="+url.QueryEscape(since), admin, "")
		spent.requests++
		feed = m["next_cursor"].(string)
		if n := len(readTasks(url.Values{"limit": {"500"}}, 10)); n != f.tasks {
			t.Errorf("tasks: %d listed, want %d", n, f.tasks)
		}
	})
	// Between two reads of the whole listing: the feed from its cursor
	// on, the queue counts, and one by one the tasks the feed names (five
	// checkouts) and the tasks on screen (20: a 1440 x 900 window shows
	// fewer).
	for i := range 5 {
		if code, m := call(t, "POST", base+"/api/tasks/"+fmt.Sprintf("task-%04d", 2000+i)+"/checkout", admin, `{"timeout":"1h"}`); code != 200 {
			t.Fatalf("checkout: %d %v", code, m)
		}
	}
	if err := srv.Drain(testenv.Context(t)); err != nil {
		t.Fatal(err)
	}
	between := measure("tasks: between", func() {
		changed := map[string]bool{}
		for range 5 { // feedSince in tasks.js
			_, m := call(t, "GET", base+"/api/events?limit=1000&cursor="+url.QueryEscape(feed), admin, "")
			spent.requests++
			events, _ := m["events"].([]any)
			for _, e := range events {
				changed[e.(map[string]any)["task_id"].(string)] = true
			}
			if feed = m["next_cursor"].(string); len(events) == 0 || m["caught_up"] == true {
				break
			}
		}
		if len(changed) != 5 {
			t.Errorf("the feed names %d tasks, want the 5 checked out", len(changed))
		}
		for i := range 20 {
			changed[fmt.Sprintf("task-%04d", 3000+i)] = true
		}
		read("/api/queues", "queues", 20)
		for id := range changed {
			read("/api/tasks/"+id, "task_id", 1)
		}
	})
	// The whole listing once in ten refreshes (every 30 s), at most one
	// read unit a task; a refresh in between at most a fiftieth of that.
	if full.units > float64(f.tasks)*1.2 {
		t.Errorf("the whole listing: %.1f read units, want at most %.0f", full.units, float64(f.tasks)*1.2)
	}
	if between.requests != 27 || between.units > full.units/50 {
		t.Errorf("a refresh between two reads of the whole listing: %d requests, %.1f read units; want 27 and at most %.1f",
			between.requests, between.units, full.units/50)
	}
	t.Logf("tasks: ten refreshes (30 s) %.1f read units, %.1f a refresh", full.units+9*between.units, (full.units+9*between.units)/10)
	measure("tasks: queue names (30 s)", func() { read("/api/queues", "queues", 20) })
	measure("agents", func() {
		read("/api/agents", "agents", 20)
		read("/api/checkouts", "checkouts", 20)
	})
	measure("queues", func() { read("/api/queues", "queues", 20) })
	measure("events", func() {
		since := time.Now().Add(-15 * time.Minute).UTC().Format(time.RFC3339Nano)
		read("/api/events?since="+url.QueryEscape(since)+"&limit=1000", "events", 5)
	})
	measure("task page", func() {
		read("/api/tasks/"+f.someTask, "task_id", 1)
		read("/api/tasks/"+f.someTask+"/events?limit=1000", "events", 10)
	})
}

// readUnits is every read unit of c: the tables' and their indexes'.
func readUnits(c localstack.Capacity) float64 {
	sum := 0.0
	for _, u := range c.Tables {
		sum += u.Read
	}
	for _, u := range c.Indexes {
		sum += u.Read
	}
	return sum
}

// fleet is what seedFleet made.
type fleet struct {
	tasks, leases int
	someTask      string // a task with a trail
}

// seedFleet makes 5,000 tasks in four queues, of priorities 0 to 9:
// 200 in progress (a live lease each, held by ten agents), 1,000 done,
// 300 cancelled, 100 failed, 100 blocked and the rest to do.
func seedFleet(t *testing.T, base, admin string) fleet {
	t.Helper()
	const n = 5000
	queues := []string{"default", "build", "docs", "research"}
	id := func(i int) string { return fmt.Sprintf("task-%04d", i) }
	// What each task becomes, by its index.
	const (
		leased    = 200
		done      = leased + 1000
		cancelled = done + 300
		failed    = cancelled + 100
		ended     = failed + 100 // the last 100 tasks are blocked
	)
	keys := make([]string, 10)
	for i := range keys {
		code, m := call(t, "POST", base+"/api/agents", admin, fmt.Sprintf(`{"name":"agent %d"}`, i))
		if code != 201 {
			t.Fatalf("register: %d %v", code, m)
		}
		keys[i] = m["api_key"].(string)
	}
	// The blocked tasks come last, each waiting on a task to do.
	create := func(from, to int) {
		parallel(t, base, (to-from)/25, func(b int) string {
			var body []string
			for i := from + b*25; i < from+b*25+25; i++ {
				extra := ""
				switch {
				case i >= failed && i < ended:
					extra = `,"max_attempts":1`
				case i >= n-100:
					extra = fmt.Sprintf(`,"blocked_by":[%q]`, id(2000+i%100))
				}
				body = append(body, fmt.Sprintf(`{"task_id":%q,"title":"Task number %d","queue":%q,"priority":%d%s}`,
					id(i), i, queues[i%len(queues)], i%10, extra))
			}
			return "POST /api/tasks/batch " + `{"tasks":[` + strings.Join(body, ",") + `]}`
		}, admin)
	}
	create(0, n-100)
	create(n-100, n)
	parallel(t, base, ended, func(i int) string {
		switch {
		case i < done:
			return "POST /api/tasks/" + id(i) + "/checkout " + `{"timeout":"1h","reason":"seeded"}`
		case i < cancelled:
			return "PATCH /api/tasks/" + id(i) + ` {"status":"cancelled"}`
		default:
			return "POST /api/tasks/" + id(i) + "/checkout " + `{"timeout":"1h"}`
		}
	}, keys...)
	parallel(t, base, ended, func(i int) string {
		switch {
		case i >= leased && i < done:
			return "POST /api/tasks/" + id(i) + "/complete {}"
		case i >= cancelled:
			return "POST /api/tasks/" + id(i) + "/release " + `{"outcome":"failed","error":"seeded"}`
		}
		return ""
	}, keys...)
	return fleet{tasks: n, leases: leased, someTask: id(leased)}
}

// parallel sends the requests req(0..n-1) returns ("METHOD /path body";
// "" for none) to base, four at a time, the i-th with keys[i%len(keys)]
// (so that a task's holder is the one that ends its lease), and fails on
// an answer over 299.
func parallel(t *testing.T, base string, n int, req func(int) string, keys ...string) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	next := make(chan int)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				r := req(i)
				if r == "" {
					continue
				}
				method, rest, _ := strings.Cut(r, " ")
				path, body, _ := strings.Cut(rest, " ")
				code, m := call(t, method, base+path, keys[i%len(keys)], body)
				if code > 299 {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("%s %s: %d %v", method, path, code, m))
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	sort.Strings(failures)
	if len(failures) > 0 {
		t.Fatalf("%d requests failed, the first: %s", len(failures), failures[0])
	}
}
