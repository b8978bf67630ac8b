package setup

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"

	"github.com/checkout-dev/checkout/deploy"
	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// usage records, per function, every DynamoDB call its store makes: the
// action, the table and the index. check holds the record to the grants of
// deploy.Grants, which the stack turns into each function's IAM policy, so a
// call that AWS would deny fails here first.
type usage struct {
	prefix string
	mu     sync.Mutex
	calls  map[string]map[string]bool // function -> "action table [index]"
}

// client is a DynamoDB client whose calls are recorded against fn.
func (u *usage) client(fn string) *dynamodb.Client {
	return lease.NewLocalClient(testenv.Endpoint(), func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
			return st.Initialize.Add(middleware.InitializeMiddlewareFunc("recordAccess",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					u.record(fn, middleware.GetOperationName(ctx), in.Parameters)
					return next.HandleInitialize(ctx, in)
				}), middleware.After)
		})
	})
}

func (u *usage) record(fn, action string, params any) {
	var tables []string
	index := ""
	switch p := params.(type) {
	case *dynamodb.GetItemInput:
		tables = []string{aws.ToString(p.TableName)}
	case *dynamodb.PutItemInput:
		tables = []string{aws.ToString(p.TableName)}
	case *dynamodb.UpdateItemInput:
		tables = []string{aws.ToString(p.TableName)}
	case *dynamodb.DeleteItemInput:
		tables = []string{aws.ToString(p.TableName)}
	case *dynamodb.DescribeTableInput:
		tables = []string{aws.ToString(p.TableName)}
	case *dynamodb.QueryInput:
		tables, index = []string{aws.ToString(p.TableName)}, aws.ToString(p.IndexName)
	case *dynamodb.BatchGetItemInput:
		for t := range p.RequestItems {
			tables = append(tables, t)
		}
	case *dynamodb.BatchWriteItemInput:
		for t := range p.RequestItems {
			tables = append(tables, t)
		}
	default:
		tables = []string{fmt.Sprintf("<%T>", params)}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.calls == nil {
		u.calls = map[string]map[string]bool{}
	}
	if u.calls[fn] == nil {
		u.calls[fn] = map[string]bool{}
	}
	for _, t := range tables {
		u.calls[fn][strings.TrimSpace(action+" "+strings.TrimPrefix(t, u.prefix)+" "+index)] = true
	}
}

// allowed reports whether fn's grants cover one recorded call.
func allowed(fn, call string) bool {
	f := strings.Fields(call)
	action, table := f[0], f[1]
	for _, g := range deploy.Grants[fn] {
		if g.Table != table {
			continue
		}
		if action == "Query" && len(f) == 3 {
			return slices.Contains(g.QueryIndexes, f[2])
		}
		return slices.Contains(g.Actions, action)
	}
	return false
}

func (u *usage) check(t *testing.T) {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, fn := range []string{deploy.Health, deploy.Agents, deploy.Tasks, deploy.Checkouts, deploy.Claim, deploy.Inbox, deploy.Authorizer, deploy.Sweeper, deploy.Stream, deploy.Notices} {
		if len(u.calls[fn]) == 0 {
			t.Errorf("function %s made no DynamoDB call: the script does not exercise it", fn)
		}
	}
	for fn, calls := range u.calls {
		var list []string
		for c := range calls {
			list = append(list, c)
		}
		sort.Strings(list)
		t.Logf("%s: %s", fn, strings.Join(list, ", "))
		for _, c := range list {
			if !allowed(fn, c) {
				t.Errorf("function %s calls %q, which deploy.Grants does not grant it: AWS would deny it", fn, c)
			}
		}
	}
}

// The checker itself: a call outside the grants is refused.
func TestAccessCheckRefusesUngrantedCalls(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		fn, call string
		ok       bool
	}{
		{deploy.Authorizer, "GetItem agents", true},
		{deploy.Authorizer, "PutItem agents", false},
		{deploy.Inbox, "Query inbox", true},
		{deploy.Inbox, "Query " + schema.TasksTable + " by_status", false},
		{deploy.Tasks, "Query " + schema.TasksTable + " by_status", true},
		{deploy.Tasks, "Scan " + schema.TasksTable, false},
		{deploy.Stream, "BatchWriteItem events", true},
		{deploy.Sweeper, "BatchWriteItem events", false},
		{deploy.Health, "DescribeTable " + schema.TasksTable, true},
		{deploy.Health, "GetItem " + schema.TasksTable, false},
		{deploy.Checkouts, "GetItem " + schema.TasksTableV1, true},
		{deploy.Stream, "GetItem " + schema.TasksTableV1, false},
		// Webhook deliveries that failed for good are the notices
		// function's: the stream function publishes nothing.
		{deploy.Notices, "PutItem " + schema.WebhookDeadLettersTable, true},
		{deploy.Stream, "PutItem " + schema.WebhookDeadLettersTable, false},
		{deploy.Notices, "BatchWriteItem events", false},
		// The checkouts routes query no index: the sweeper, agent removal
		// and GET /api/checkouts query the lease and heartbeat indexes,
		// the claim function the claim index.
		{deploy.Checkouts, "Query " + schema.TasksTable + " " + schema.TasksByClaim, false},
		{deploy.Checkouts, "Query " + schema.TasksTable + " " + schema.TasksByLeaseExpiry, false},
		{deploy.Checkouts, "Query " + schema.HeartbeatsTable + " " + schema.HeartbeatsByExpiry, false},
		{deploy.Inbox, "GetItem " + schema.TasksTableV1, false},
		// A claim grants and waits; it creates no task and watches none.
		{deploy.Claim, "Query " + schema.TasksTable + " " + schema.TasksByClaim, true},
		{deploy.Claim, "GetItem " + schema.TasksTableV1, true},
		{deploy.Claim, "PutItem " + schema.TasksTable, false},
		{deploy.Claim, "UpdateItem " + schema.InboxTable, false},
	} {
		verb := " may call "
		if !c.ok {
			verb = " may not call "
		}
		t.Run(c.fn+verb+c.call, func(t *testing.T) {
			if got := allowed(c.fn, c.call); got != c.ok {
				t.Errorf("allowed(%s, %q) = %v, want %v", c.fn, c.call, got, c.ok)
			}
		})
	}
}
