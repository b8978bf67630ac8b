package setup

// The health function's database check: GET /healthz answers 503
// {"ok": false} while DynamoDB cannot be reached, as the local server's does.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/lease/schema"
)

// Bounds of what GET /healthz costs: at most one DescribeTable per
// healthEvery per container (a flood of health checks is answered from
// the last result), each a single attempt within healthTimeout.
const (
	healthEvery   = 5 * time.Second
	healthTimeout = 2 * time.Second
)

// DescribeTableAPI is the one DynamoDB call the health check makes.
type DescribeTableAPI interface {
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
}

// TablesAPI is what the HTTP functions read besides their store: the
// migration marker (the functions of deploy.AwaitsMigration) and the tasks
// table's description (the health function).
type TablesAPI interface {
	GetItemAPI
	DescribeTableAPI
}

// healthCheck describes today's tasks table, which every route needs: a
// call that reads no item, granted to the health function alone.
type healthCheck struct {
	db    DescribeTableAPI
	table string
	now   func() time.Time

	mu  sync.Mutex
	at  time.Time
	err error
}

func newHealthCheck(db DescribeTableAPI, e Env) *healthCheck {
	return &healthCheck{db: db, table: schema.Names{Prefix: e.TablePrefix}.Table(schema.TasksTable), now: e.clock()}
}

// check is nil when the table could be described at most healthEvery ago.
func (h *healthCheck) check(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.at.IsZero() && h.now().Sub(h.at) < healthEvery {
		return h.err
	}
	cctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	_, err := h.db.DescribeTable(cctx, &dynamodb.DescribeTableInput{TableName: &h.table}, func(o *dynamodb.Options) {
		o.RetryMaxAttempts = 1
	})
	if err != nil && ctx.Err() != nil {
		return err // the caller went away: say so, remember nothing
	}
	if err != nil {
		err = fmt.Errorf("describe %s: %w", h.table, err)
	}
	h.at, h.err = h.now(), err
	return err
}

// writeError writes the API's error body.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	body, _ := json.Marshal(struct {
		Error string `json:"error"`
		Code  string `json:"code"`
	}{msg, code})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
