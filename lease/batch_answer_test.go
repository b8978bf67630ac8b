package lease_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/checkout-dev/checkout/httpapi"
	"github.com/checkout-dev/checkout/lease"
)

// A batch sent again answers each task that exists with the task, and
// answered each with every task it blocks: 25 tasks with the largest
// escaped text, each blocking 1,000 tasks of the longest ids, made an
// answer of 5.6 MB in API Gateway's envelope, and with leases and errors
// on them past the 6 MB a Lambda can return. An "exists" result lists at
// most MaxBatchBlocks of its task's blocks, sorted, and says when there
// are more (GET shows them all), so the answer stays under 5 MB.
func TestABatchOfExistingTasksIsAnsweredUnderLambdasLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	escaped := func(n int) string { return strings.Repeat("<", n) } // \u003c: 6 bytes a byte in JSON
	var batch []lease.CreateTaskParams
	var ids []string
	for i := range lease.MaxBatch {
		id := fmt.Sprintf("%02d-%s", i, strings.Repeat("t", 125))
		ids = append(ids, id)
		batch = append(batch, lease.CreateTaskParams{TaskID: id, Title: escaped(lease.MaxTitleLen), Description: escaped(lease.MaxDescriptionLen),
			Metadata: []byte(`{"k":"` + escaped(lease.MaxMetadataLen-8) + `"}`)})
	}
	must[[]lease.BatchResult](t)(e.store.CreateTasks(c, batch))
	deps := func(id string) []string {
		out := make([]string, lease.MaxDependents)
		for i := range out {
			out[i] = fmt.Sprintf("%s-%04d-%s", id[:2], i, strings.Repeat("d", 120))
		}
		return out
	}
	giveDependents(t, e, ids, deps)

	h := httpapi.New(e.store, httpapi.Options{})
	var body strings.Builder
	body.WriteString(`{"tasks":[`)
	for i, id := range ids {
		if i > 0 {
			body.WriteString(",")
		}
		fmt.Fprintf(&body, `{"task_id":%q}`, id)
	}
	body.WriteString("]}")
	req := httptest.NewRequest(http.MethodPost, "/api/tasks/batch", strings.NewReader(body.String()))
	req = req.WithContext(httpapi.ContextWithPrincipal(req.Context(), lease.Principal{AgentID: "a", Name: "a"}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("batch sent again: %d %s", rec.Code, rec.Body.String()[:min(rec.Body.Len(), 500)])
	}
	if size := lambdaBodySize(t, rec.Body.Bytes()); size > 5<<20 {
		t.Fatalf("the answer of 25 existing tasks takes %d bytes in the Lambda's answer, over 5 MB", size)
	}

	results := must[[]lease.BatchResult](t)(e.store.CreateTasks(c, batch))
	for i, r := range results {
		want := deps(ids[i])[:lease.MaxBatchBlocks]
		if r.Outcome != lease.BatchExists || !slices.Equal(r.Task.Blocks, want) || !r.MoreBlocks {
			t.Fatalf("%s: %s, blocks %d (more: %v), want exists with the first %d of its blocks and more",
				r.TaskID, r.Outcome, len(r.Task.Blocks), r.MoreBlocks, lease.MaxBatchBlocks)
		}
	}
	if got := e.get(t, ids[0]); len(got.Blocks) != lease.MaxDependents {
		t.Fatalf("GET shows %d blocks, want %d", len(got.Blocks), lease.MaxDependents)
	}
}

// lambdaBodySize is the size of the Lambda answer that carries body: the
// JSON body escaped again as a string in API Gateway's envelope.
func lambdaBodySize(t *testing.T, body []byte) int {
	t.Helper()
	envelope := must[[]byte](t)(json.Marshal(map[string]any{"statusCode": 200, "headers": map[string]string{"Content-Type": "application/json"}, "body": string(body)}))
	return len(envelope)
}
