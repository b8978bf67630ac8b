package httpapi

import (
	"testing"

	"github.com/checkout-dev/checkout/lease"
)

// An integer field takes a whole number however JSON writes it (5.0, 5e0,
// 0.5E1), as JSON Schema, and so the OpenAPI document, counts integers:
// clients that keep every number as a float send 5.0 for 5. A number that
// is not whole, or too large for a float64 to hold exactly, is still 400.
func TestWholeNumbersAreIntegers(t *testing.T) {
	t.Parallel()

	t.Run("create", func(t *testing.T) {
		hs := newHarness(t)
		hs.do("POST", "/api/tasks", "ck_agent", `{"task_id":"t1","priority":7.0,"max_attempts":0.3e1}`).expect(t, 201, "")
		p := hs.svc.last.(lease.CreateTaskParams)
		if p.Priority == nil || *p.Priority != 7 || p.MaxAttempts == nil || *p.MaxAttempts != 3 {
			t.Fatalf("create params %+v", p)
		}
	})

	t.Run("batch", func(t *testing.T) {
		hs := newHarness(t)
		hs.do("POST", "/api/tasks/batch", "ck_agent", `{"tasks":[{"task_id":"a","priority":1E0},{"task_id":"b","max_attempts":100.000,"priority":-0.0}]}`).expect(t, 200, "")
		ps := hs.svc.last.([]lease.CreateTaskParams)
		if *ps[0].Priority != 1 || *ps[1].MaxAttempts != 100 || *ps[1].Priority != 0 {
			t.Fatalf("batch params %+v %+v", ps[0], ps[1])
		}
	})

	t.Run("patch", func(t *testing.T) {
		hs := newHarness(t)
		hs.do("PATCH", "/api/tasks/t1", "ck_agent", `{"priority":9.0,"max_attempts":5e0}`).expect(t, 200, "")
		u := hs.svc.last.(lease.UpdateTaskParams)
		if u.Priority == nil || *u.Priority != 9 || u.MaxAttempts == nil || *u.MaxAttempts != 5 {
			t.Fatalf("patch params %+v", u)
		}
	})

	t.Run("fence", func(t *testing.T) {
		hs := newHarness(t)
		hs.do("POST", "/api/tasks/t1/release", "ck_agent", `{"fence":12.0}`).expect(t, 200, "")
		if p := hs.svc.last.(lease.ReleaseParams); p.Fence != 12 {
			t.Fatalf("release params %+v", p)
		}
	})

	for _, c := range []badRequest{
		{"POST", "/api/tasks", "ck_agent", `{"priority":5.5}`, 400, "invalid_json", "field priority must be an integer"},
		{"POST", "/api/tasks", "ck_agent", `{"max_attempts":1e400}`, 400, "invalid_json", "field max_attempts must be an integer"},
		{"POST", "/api/tasks", "ck_agent", `{"max_attempts":1e16}`, 400, "invalid_json", "field max_attempts must be an integer"},
		{"POST", "/api/tasks/batch", "ck_agent", `{"tasks":[{"priority":5.0},{"priority":0.25}]}`, 400, "invalid_json", "priority must be an integer"},
		{"POST", "/api/tasks/t1/renew", "ck_agent", `{"fence":"12.0"}`, 400, "invalid_json", "field fence must be an integer"},
		{"POST", "/api/tasks", "ck_agent", `{"priority":5.0} 1`, 400, "invalid_json", "after the JSON object"},
	} {
		t.Run(c.body, func(t *testing.T) {
			t.Parallel()
			c.run(t)
		})
	}
}
