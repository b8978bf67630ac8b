package localstack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// ShimTarget is the X-Amz-Target prefix of the shim's own actions, which
// only the dynalite started by this package understands.
const ShimTarget = "DynamoDBShim."

// SetIndexLag makes the global secondary indexes of every table whose name
// starts with tablePrefix (existing tables and ones created later) trail
// their writes by lag, on the dynalite at endpoint. Zero turns the lag off
// for those tables. The longest matching prefix wins; it overrides the
// server's default (Options.IndexLag, $DYNALITE_INDEX_LAG). Writes already
// queued keep their place: index entries are applied in write order.
//
// It fails on any other DynamoDB-compatible server.
func SetIndexLag(ctx context.Context, endpoint, tablePrefix string, lag time.Duration) error {
	if lag < 0 {
		return fmt.Errorf("localstack: negative index lag %v", lag)
	}
	body, err := json.Marshal(struct {
		TablePrefix string
		LagMs       int64
	}{tablePrefix, lag.Milliseconds()})
	if err != nil {
		return err
	}
	_, err = shimCall(ctx, endpoint, "SetIndexLag", body)
	return err
}

// IndexLagPending returns how many index updates of the tables whose names
// start with tablePrefix the local DynamoDB has still to apply (0: their
// global secondary indexes show every write answered so far).
func IndexLagPending(ctx context.Context, endpoint, tablePrefix string) (int, error) {
	body, err := json.Marshal(struct{ TablePrefix string }{tablePrefix})
	if err != nil {
		return 0, err
	}
	out, err := shimCall(ctx, endpoint, "IndexLagPending", body)
	if err != nil {
		return 0, err
	}
	var ans struct{ Pending *int }
	if err := json.Unmarshal(out, &ans); err != nil || ans.Pending == nil {
		return 0, fmt.Errorf("localstack: IndexLagPending: unexpected answer %q", out)
	}
	return *ans.Pending, nil
}

// ProcessUsage returns the CPU time (user and system) the local DynamoDB's
// process has used since it started: the difference between two calls is
// what the requests between them cost the server.
func ProcessUsage(ctx context.Context, endpoint string) (time.Duration, error) {
	out, err := shimCall(ctx, endpoint, "ProcessUsage", []byte("{}"))
	if err != nil {
		return 0, err
	}
	var ans struct{ UserMicros, SystemMicros *int64 }
	if err := json.Unmarshal(out, &ans); err != nil || ans.UserMicros == nil || ans.SystemMicros == nil {
		return 0, fmt.Errorf("localstack: ProcessUsage: unexpected answer %q", out)
	}
	return time.Duration(*ans.UserMicros+*ans.SystemMicros) * time.Microsecond, nil
}

// shimCall sends one of the shim's own actions and returns its answer.
func shimCall(ctx context.Context, endpoint, action string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(endpoint, "/")+"/", bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("localstack: %s: %w", action, err)
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	req.Header.Set("X-Amz-Target", ShimTarget+action)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("localstack: %s: %w", action, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("localstack: %s: %w", action, err)
	}
	if resp.StatusCode != http.StatusOK {
		if len(out) > 4<<10 {
			out = out[:4<<10]
		}
		return nil, fmt.Errorf("localstack: %s at %s (is it this package's dynalite?): %s: %s", action, endpoint, resp.Status, out)
	}
	return out, nil
}

// ErrNoStream is returned by StreamARN for a table without an enabled stream.
var ErrNoStream = errors.New("table has no enabled stream")

// StreamARN returns the ARN of table's enabled DynamoDB stream (its
// LatestStreamArn), for the Streams API (service/dynamodbstreams) on the
// same endpoint. It works against AWS as well.
func StreamARN(ctx context.Context, db *dynamodb.Client, table string) (string, error) {
	out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		return "", err
	}
	t := out.Table
	if t.StreamSpecification == nil || !aws.ToBool(t.StreamSpecification.StreamEnabled) || t.LatestStreamArn == nil {
		return "", fmt.Errorf("localstack: %s: %w", table, ErrNoStream)
	}
	return *t.LatestStreamArn, nil
}
