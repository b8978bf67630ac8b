package openapitest

import (
	"net/http"
	"testing"
)

func TestValidateCatchesDrift(t *testing.T) {
	v := Validator(t)
	js := http.Header{"Content-Type": {"application/json"}}
	good := `{"task_id":"t1","locked":false,"checkout":null}`
	if err := v("GET", "/api/tasks/t1/checkout", 200, js, []byte(good)); err != nil {
		t.Fatalf("valid answer refused: %v", err)
	}
	bad := []struct {
		method, path string
		status       int
		body         string
	}{
		{"GET", "/api/tasks/t1/checkout", 200, `{"task_id":"t1","locked":false}`},                                                                                                                      // missing field
		{"GET", "/api/tasks/t1/checkout", 200, `{"task_id":"t1","locked":false,"checkout":null,"x":1}`},                                                                                                // extra field
		{"GET", "/api/tasks/t1/checkout", 418, `{"error":"x","code":"internal"}`},                                                                                                                      // undocumented status
		{"GET", "/api/tasks/t1", 404, `{"error":"x","code":"not_checked_out"}`},                                                                                                                        // code not of this route
		{"GET", "/api/tasks/t1", 200, `{"task_id":"t1","title":"","status":"todo","created_at":"2026-03-20T14:35:00Z","started_at":null,"completed_at":null,"duration_seconds":null,"checkout":null}`}, // no milliseconds
		{"GET", "/nope", 200, `{}`},                                    // unknown path answered
		{"PUT", "/api/tasks", 404, `{"error":"x","code":"not_found"}`}, // known path: must be 405
		{"GET", "/nope", 404, `{"error":"x"}`},                         // not an error body
	}
	for _, b := range bad {
		if err := v(b.method, b.path, b.status, js, []byte(b.body)); err == nil {
			t.Errorf("%s %s %d %s: accepted", b.method, b.path, b.status, b.body)
		}
	}
}
