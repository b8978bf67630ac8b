package httpapi

import (
	"fmt"
	"reflect"
	"sort"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

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

// Every object the handlers write has exactly the properties of its schema
// in the document, so that a field added to one and not the other (a new
// task field, say) fails here by name, not only in the answers that
// happen to carry it.
func TestWireTypesMatchSchemas(t *testing.T) {
	doc, err := openapitest.Load()
	if err != nil {
		t.Fatal(err)
	}
	schema := func(name string) *openapi3.Schema {
		ref := doc.Components.Schemas[name]
		if ref == nil || ref.Value == nil {
			t.Fatalf("no schema %s", name)
		}
		return ref.Value
	}
	cases := []struct {
		typ    reflect.Type
		schema *openapi3.Schema
		name   string
	}{
		{reflect.TypeFor[taskJSON](), schema("Task"), "Task"},
		{reflect.TypeFor[checkoutJSON](), schema("Checkout"), "Checkout"},
		{reflect.TypeFor[conflictHolderJSON](), schema("ConflictHolder"), "ConflictHolder"},
		{reflect.TypeFor[claimJSON](), schema("Claim"), "Claim"},
		{reflect.TypeFor[blockerJSON](), schema("Blocker"), "Blocker"},
		{reflect.TypeFor[EventJSON](), schema("Event"), "Event"},
		{reflect.TypeFor[errorBody](), schema("Error"), "Error"},
		{reflect.TypeFor[messageJSON](), schema("Message"), "Message"},
		{reflect.TypeFor[agentJSON](), schema("Agent"), "Agent"},
		{reflect.TypeFor[registrationJSON](), schema("Registration"), "Registration"},
		{reflect.TypeFor[QueueJSON](), schema("Queue"), "Queue"},
		{reflect.TypeFor[QueueCountsJSON](), schema("Queue").Properties["counts"].Value, "Queue.counts"},
	}
	for _, c := range cases {
		var inGo, inDoc []string
		for name := range jsonFields(c.typ) {
			inGo = append(inGo, name)
		}
		for name := range c.schema.Properties {
			inDoc = append(inDoc, name)
		}
		sort.Strings(inGo)
		sort.Strings(inDoc)
		if fmt.Sprint(inGo) != fmt.Sprint(inDoc) {
			t.Errorf("%s writes %v, the schema %s has %v", c.typ.Name(), inGo, c.name, inDoc)
		}
	}
}
