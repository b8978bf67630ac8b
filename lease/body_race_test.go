package lease_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/checkout-dev/checkout/lease"
)

// A task read while PATCHes replace its description and metadata shows a
// whole body, never none: a GET shows one version's fields throughout, a
// listing the body its task names. Before, a read that found the task
// item just before a PATCH found its body deleted and showed the task
// with an empty description and metadata.
func TestReadsWhileTheBodyChangesShowAWholeBody(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	desc := func(n int) string { return fmt.Sprintf("always set %d", n) }
	meta := func(n int) json.RawMessage { return json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)) }
	e.create(t, lease.CreateTaskParams{TaskID: "tb", Queue: "bodies", Description: desc(0), Metadata: meta(0)})
	e.caughtUp(t) // the listings find tb through an index
	wctx, stop := context.WithCancel(c)
	var wg sync.WaitGroup
	wg.Go(func() {
		for n := 1; wctx.Err() == nil; n++ {
			d := desc(n)
			if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "tb", AgentID: "w", Description: &d, Metadata: meta(n)}); err != nil {
				t.Errorf("patch %d: %v", n, err)
				return
			}
		}
	})
	check := func(how string, task lease.Task) {
		t.Helper()
		var m struct{ N *int }
		if !strings.HasPrefix(task.Description, "always set ") || json.Unmarshal(task.Metadata, &m) != nil || m.N == nil {
			t.Fatalf("%s at version %d: description %q, metadata %s", how, task.Version, task.Description, task.Metadata)
		}
		if fmt.Sprintf("always set %d", *m.N) != task.Description {
			t.Fatalf("%s at version %d: description %q with metadata %s, from two versions", how, task.Version, task.Description, task.Metadata)
		}
	}
	for i := range 300 {
		if i%3 == 2 {
			page := must[lease.TaskPage](t)(e.store.ListTasks(c, lease.ListTasksParams{Queue: "bodies"}))
			if len(page.Tasks) != 1 {
				t.Fatalf("listing: %d tasks", len(page.Tasks))
			}
			check("a listing", page.Tasks[0])
			continue
		}
		check("GET", must[lease.Task](t)(e.store.GetTask(c, "tb")))
	}
	stop()
	wg.Wait()
}
