package httpapi

import (
	"sort"
	"testing"

	"github.com/checkout-dev/checkout/httpapi/openapitest"
)

// Every route served is in the document, and every operation of the
// document is served.
func TestOpenAPICoversRoutes(t *testing.T) {
	openapitest.Validator(t)
	ops, err := openapitest.Operations()
	if err != nil {
		t.Fatal(err)
	}
	inDoc := map[string]bool{}
	for _, op := range ops {
		inDoc[op] = true
	}
	served := map[string]bool{}
	for _, r := range Routes() {
		key := r.Method + " " + r.Path
		served[key] = true
		if !inDoc[key] {
			t.Errorf("%s is served but not in httpapi/openapi/openapi.yaml", key)
		}
	}
	sort.Strings(ops)
	for _, op := range ops {
		if !served[op] {
			t.Errorf("%s is in httpapi/openapi/openapi.yaml but not served", op)
		}
	}
	doc, err := openapitest.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range Routes() {
		item := doc.Paths.Value(r.Path)
		if item == nil {
			continue // reported above
		}
		if op := item.GetOperation(r.Method); op != nil && op.OperationID != r.Op {
			t.Errorf("%s is operation %q in deploy.Routes, %q in openapi.yaml", r.Key(), r.Op, op.OperationID)
		}
	}
	if len(served) != len(Routes()) {
		t.Errorf("Routes() has duplicates")
	}
}
