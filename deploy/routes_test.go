package deploy

import "testing"

func TestExpand(t *testing.T) {
	for _, c := range []struct {
		path   string
		values []string
		want   string
	}{
		{TaskCheckoutPath, []string{"task-d4e5"}, "/api/tasks/task-d4e5/checkout"},
		{TaskCheckoutPath, []string{"a/b c"}, "/api/tasks/a%2Fb%20c/checkout"},
		{"/api/inbox/{message_id}", []string{"1.2.t"}, "/api/inbox/1.2.t"},
		{"/healthz", nil, "/healthz"},
	} {
		if got := Expand(c.path, c.values...); got != c.want {
			t.Errorf("Expand(%q, %q) = %q, want %q", c.path, c.values, got, c.want)
		}
	}
}

// Every route of the JSON API has an operation, and no two share one.
func TestEveryRouteHasItsOwnOperation(t *testing.T) {
	seen := map[string]string{}
	for _, r := range Routes {
		if r.Dashboard() {
			if r.Op != "" {
				t.Errorf("%s serves the dashboard's files but has operation %q", r.Key(), r.Op)
			}
			continue
		}
		if r.Op == "" {
			t.Errorf("%s has no operation", r.Key())
		}
		if other, ok := seen[r.Op]; ok {
			t.Errorf("%s and %s share the operation %q", r.Key(), other, r.Op)
		}
		seen[r.Op] = r.Key()
		if got, ok := ByKey(r.Key()); !ok || got != r {
			t.Errorf("ByKey(%q) = %+v, %v", r.Key(), got, ok)
		}
	}
}
