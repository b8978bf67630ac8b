// Package notify tells an orchestrator about ended leases and freed tasks by
// putting events on an Amazon EventBridge bus.
//
// Every notice becomes one event with source "checkout", detail-type
// "TaskAvailable", "LeaseEnded" or "LeaseLost" (the lease.Notice kind) and, as detail,
// the notice's stable id and the lease event in the API's JSON shape:
//
//	{"id":"task-d4e5:31:TaskAvailable",
//	 "event":{"type":"timeout","task_id":"task-d4e5","agent_id":"agent-a1b2","run_id":"run-7f3c",
//	          "fence":12,"at":"2026-03-20T14:35:00.000Z","held_seconds":1800,"by":"system","reason":""}}
//
// The notices function (and `checkout-server migrate -aws`, for the
// changes it applies) publishes notices at least once: a consumer drops a
// repeat by its id. A rule on the bus can then start work the moment a task
// becomes free.
package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/checkout-dev/checkout/httpapi"
	"github.com/checkout-dev/checkout/lease"
)

// Source is the source of every event the service puts.
const Source = "checkout"

// EnvEventBus names the bus, in the functions' environment.
const EnvEventBus = "CHECKOUT_EVENT_BUS"

// PutEventsAPI is the one EventBridge call the notifier makes;
// *eventbridge.Client satisfies it.
type PutEventsAPI interface {
	PutEvents(ctx context.Context, in *eventbridge.PutEventsInput, optFns ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error)
}

// EventBridge is a lease.Notifier that puts each notice on a bus.
type EventBridge struct {
	client PutEventsAPI
	bus    string
}

var _ lease.Notifier = (*EventBridge)(nil)

// NewEventBridge returns a notifier that puts events on the named bus ("" is
// the account's default bus).
func NewEventBridge(client PutEventsAPI, bus string) *EventBridge {
	return &EventBridge{client: client, bus: bus}
}

// Notify puts one event for n. An entry that EventBridge refuses is an
// error, as is a failed call.
func (e *EventBridge) Notify(ctx context.Context, n lease.Notice) error {
	detail, err := json.Marshal(struct {
		ID        string  `json:"id"`
		Event     any     `json:"event"`
		NotBefore *string `json:"not_before,omitempty"`
	}{n.ID, httpapi.ToEventJSON(n.Event), httpapi.Stamp(n.NotBefore)})
	if err != nil {
		return fmt.Errorf("notify %s: %w", n.Kind, err)
	}
	entry := types.PutEventsRequestEntry{
		Source:     aws.String(Source),
		DetailType: aws.String(n.Kind),
		Detail:     aws.String(string(detail)),
		Resources:  []string{},
	}
	if e.bus != "" {
		entry.EventBusName = aws.String(e.bus)
	}
	if !n.Event.At.IsZero() {
		entry.Time = aws.Time(n.Event.At)
	}
	out, err := e.client.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: []types.PutEventsRequestEntry{entry}})
	if err != nil {
		return fmt.Errorf("notify %s for task %s: %w", n.Kind, n.Event.TaskID, err)
	}
	if out != nil && out.FailedEntryCount > 0 {
		msg := "entry refused"
		if len(out.Entries) > 0 && out.Entries[0].ErrorCode != nil {
			msg = aws.ToString(out.Entries[0].ErrorCode) + ": " + aws.ToString(out.Entries[0].ErrorMessage)
		}
		return fmt.Errorf("notify %s for task %s: %w", n.Kind, n.Event.TaskID, errors.New(msg))
	}
	return nil
}
