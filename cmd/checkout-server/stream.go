package main

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/lease/stream"
	"github.com/checkout-dev/checkout/localserver"
	"github.com/checkout-dev/checkout/localstack"
)

// stoppedServerStream applies, in a stopped server's stead, the changes
// of the tasks table's stream that the server over data directory dir
// (its dynalite d, client c) left unapplied, from its checkpoint, for a
// command that must see them applied first (recount, bodies). Locally
// the stream keeps its records while the server is stopped, a day old or
// more, and the server applies them when it starts again: one a command
// does not apply may read what the command has changed meanwhile (a
// failed release's error `bodies` deleted). Its Poll applies all the
// stream holds; call it again to apply what came since.
//
// As the server applies them when it runs: the consequences (its notices
// go out from their own checkpoint when it starts again), an event
// archived late keyed in the feed at when it is archived, ahead of the
// cursors that passed its own time meanwhile.
func stoppedServerStream(ctx context.Context, d *localstack.Dynalite, c *dynamodb.Client, names schema.Names, getenv func(string) string, dir string) (*stream.Poller, error) {
	shards, err := schema.ShardsFromEnv(getenv)
	if err != nil {
		return nil, err
	}
	arn, err := tasksStream(ctx, c, names, dir)
	if err != nil {
		return nil, err
	}
	return &stream.Poller{
		Streams:   stream.NewLocalClient(d.Endpoint),
		StreamARN: arn,
		Handle:    stream.ConsequencesHandler(lease.New(lease.Config{DB: c, Tables: names, Shards: shards, FeedLate: true})),
		Saved:     localserver.ConsequencesCheckpoints(c, names),
		ReadOn:    true,
	}, nil
}

// unpublishedErrors are the keys of the failed releases' errors that the
// notices the stopped server over d (client c) left unpublished read: it
// publishes them, from its own checkpoint, when it starts again, and a
// command has no notifier to publish them in its stead. It reads the
// stream from that checkpoint and writes nothing, the checkpoint
// included.
func unpublishedErrors(ctx context.Context, d *localstack.Dynalite, c *dynamodb.Client, names schema.Names, dir string) ([]string, error) {
	arn, err := tasksStream(ctx, c, names, dir)
	if err != nil {
		return nil, err
	}
	var read errorsRead
	poller := &stream.Poller{
		Streams:   stream.NewLocalClient(d.Endpoint),
		StreamARN: arn,
		Handle:    stream.NoticesHandler(&read),
		Saved:     unsaved{localserver.NoticesCheckpoints(c, names)},
		ReadOn:    true,
	}
	if _, err := poller.Poll(ctx); err != nil {
		return nil, fmt.Errorf("read the notices the server left unpublished: %w", err)
	}
	return read, nil
}

// errorsRead keeps the keys of the errors the notices of the changes it
// is given read, and publishes nothing.
type errorsRead []string

func (r *errorsRead) PublishNotices(_ context.Context, changes []lease.Change) error {
	keys, err := lease.ErrorsRead(changes)
	*r = append(*r, keys...)
	return err
}

// unsaved are checkpoints that are loaded and never saved.
type unsaved struct{ stream.Checkpoints }

func (unsaved) Save(context.Context, string, string) error { return nil }

// tasksStream is the ARN of the tasks table's stream in data directory
// dir.
func tasksStream(ctx context.Context, c *dynamodb.Client, names schema.Names, dir string) (string, error) {
	arn, err := localstack.StreamARN(ctx, c, names.Table(schema.TasksTable))
	if err != nil {
		return "", fmt.Errorf("the tasks table's stream (is %s a server's data directory?): %w", dir, err)
	}
	return arn, nil
}
