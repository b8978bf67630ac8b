package notify

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/checkout-dev/checkout/lease"
)

type fakeBridge struct {
	got []*eventbridge.PutEventsInput
	out *eventbridge.PutEventsOutput
	err error
}

func (f *fakeBridge) PutEvents(ctx context.Context, in *eventbridge.PutEventsInput, _ ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	f.got = append(f.got, in)
	if f.out == nil {
		return &eventbridge.PutEventsOutput{}, f.err
	}
	return f.out, f.err
}

var at = time.Date(2026, 3, 20, 14, 35, 0, 123_000_000, time.UTC)

func TestNotifyPutsOneEvent(t *testing.T) {
	t.Parallel()
	held := 1800*time.Second + 900*time.Millisecond
	wait := at.Add(10 * time.Second)
	tests := []struct {
		name   string
		notice lease.Notice
		bus    string
		detail string
	}{
		{
			name: "task available after a timeout",
			bus:  "checkout-bus",
			notice: lease.Notice{ID: "task-d4e5:31:TaskAvailable", Kind: lease.NoticeTaskAvailable, Event: lease.Event{
				Type: lease.EventTimeout, TaskID: "task-d4e5", AgentID: "agent-a1b2", RunID: "run-7f3c",
				Fence: 12, At: at, Held: &held, By: lease.BySystem,
			}},
			detail: `{"id":"task-d4e5:31:TaskAvailable","event":{"type":"timeout","task_id":"task-d4e5","agent_id":"agent-a1b2","run_id":"run-7f3c","fence":12,"at":"2026-03-20T14:35:00.123Z","held_seconds":1800,"by":"system","reason":""}}`,
		},
		{
			name: "task available after a failed release, waiting",
			bus:  "checkout-bus",
			notice: lease.Notice{ID: "task-d4e5:33:TaskAvailable", Kind: lease.NoticeTaskAvailable, Event: lease.Event{
				Type: lease.EventRelease, TaskID: "task-d4e5", AgentID: "agent-a1b2", RunID: "run-7f3c",
				Fence: 13, At: at, Held: &held, By: "agent-a1b2", Outcome: lease.OutcomeFailed, Error: "boom",
			}, NotBefore: &wait},
			detail: `{"id":"task-d4e5:33:TaskAvailable","event":{"type":"release","task_id":"task-d4e5","agent_id":"agent-a1b2","run_id":"run-7f3c","fence":13,"at":"2026-03-20T14:35:00.123Z","held_seconds":1800,"by":"agent-a1b2","reason":"","outcome":"failed","error":"boom"},"not_before":"2026-03-20T14:35:10.123Z"}`,
		},
		{
			name: "lease ended by completion, default bus",
			notice: lease.Notice{ID: "t1:2:LeaseEnded", Kind: lease.NoticeLeaseEnded, Event: lease.Event{
				Type: lease.EventComplete, TaskID: "t1", AgentID: "a1", RunID: "r1", Fence: 1, At: at, By: "a1", Reason: "done",
			}},
			detail: `{"id":"t1:2:LeaseEnded","event":{"type":"complete","task_id":"t1","agent_id":"a1","run_id":"r1","fence":1,"at":"2026-03-20T14:35:00.123Z","held_seconds":0,"by":"a1","reason":"done"}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeBridge{}
			if err := NewEventBridge(f, tt.bus).Notify(context.Background(), tt.notice); err != nil {
				t.Fatal(err)
			}
			if len(f.got) != 1 || len(f.got[0].Entries) != 1 {
				t.Fatalf("calls %d", len(f.got))
			}
			e := f.got[0].Entries[0]
			if aws.ToString(e.Source) != "checkout" || aws.ToString(e.DetailType) != tt.notice.Kind {
				t.Fatalf("source %q detail-type %q", aws.ToString(e.Source), aws.ToString(e.DetailType))
			}
			if tt.bus == "" && e.EventBusName != nil || tt.bus != "" && aws.ToString(e.EventBusName) != tt.bus {
				t.Fatalf("bus %v", e.EventBusName)
			}
			if aws.ToString(e.Detail) != tt.detail {
				t.Fatalf("detail\n got %s\nwant %s", aws.ToString(e.Detail), tt.detail)
			}
			if !json.Valid([]byte(aws.ToString(e.Detail))) || e.Time == nil || !e.Time.Equal(at) {
				t.Fatalf("time %v", e.Time)
			}
		})
	}
}

func TestNotifyFailures(t *testing.T) {
	t.Parallel()
	n := lease.Notice{Kind: lease.NoticeLeaseEnded, Event: lease.Event{Type: lease.EventRelease, TaskID: "t1", At: at}}

	f := &fakeBridge{err: errors.New("throttled")}
	if err := NewEventBridge(f, "b").Notify(context.Background(), n); err == nil || !strings.Contains(err.Error(), "throttled") {
		t.Fatalf("call error not reported: %v", err)
	}

	f = &fakeBridge{out: &eventbridge.PutEventsOutput{FailedEntryCount: 1, Entries: []types.PutEventsResultEntry{
		{ErrorCode: aws.String("AccessDeniedException"), ErrorMessage: aws.String("not allowed")},
	}}}
	if err := NewEventBridge(f, "b").Notify(context.Background(), n); err == nil || !strings.Contains(err.Error(), "AccessDeniedException") {
		t.Fatalf("refused entry not reported: %v", err)
	}
}
