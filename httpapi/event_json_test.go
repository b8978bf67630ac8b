package httpapi_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/httpapi"
	"github.com/checkout-dev/checkout/lease"
)

// A release event's outcome and error are keys of its JSON, null when the
// release gave none, and readable from Go; other events carry neither, and
// the form reads back as it was written.
func TestEventJSONOutcomeAndError(t *testing.T) {
	at := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	cases := []struct {
		name  string
		event lease.Event
		keys  map[string]any // the keys' JSON values; nil: absent
		want  httpapi.ReleaseText
	}{
		{"a plain release", lease.Event{Type: lease.EventRelease, TaskID: "t", AgentID: "a", Fence: 3, At: at},
			map[string]any{"outcome": nil, "error": nil}, httpapi.ReleaseText{Set: true}},
		{"a failed release", lease.Event{Type: lease.EventRelease, TaskID: "t", AgentID: "a", Fence: 3, At: at, Outcome: lease.OutcomeFailed, Error: "boom"},
			map[string]any{"outcome": "failed", "error": "boom"}, httpapi.ReleaseText{Text: "failed", Set: true}},
		{"a completion", lease.Event{Type: lease.EventComplete, TaskID: "t", AgentID: "a", Fence: 3, At: at}, nil, httpapi.ReleaseText{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := httpapi.ToEventJSON(tc.event)
			if j.Outcome != tc.want || j.Error.Set != tc.want.Set {
				t.Fatalf("Outcome = %+v, Error = %+v, want %+v", j.Outcome, j.Error, tc.want)
			}
			b, err := json.Marshal(j)
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"outcome", "error"} {
				v, ok := m[k]
				want, wantOK := tc.keys[k]
				if ok != wantOK || v != want {
					t.Errorf("%s: key %q = %v (present %v), want %v (present %v)", b, k, v, ok, want, wantOK)
				}
			}
			var back httpapi.EventJSON
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, j) {
				t.Errorf("read back %+v, want %+v", back, j)
			}
		})
	}
}
