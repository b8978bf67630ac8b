package httpapi

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/checkout-dev/checkout/errcode"
	"github.com/checkout-dev/checkout/httpapi/openapitest"
)

// The OpenAPI document and errcode.All list the same codes, and every
// response of the document that names codes answers each with the status
// errcode gives it.
func TestErrorCodesMatchOpenAPI(t *testing.T) {
	doc, err := openapitest.Load()
	if err != nil {
		t.Fatal(err)
	}
	inDoc := map[string]bool{}
	for _, v := range codeEnum(doc.Components.Schemas["Error"]) {
		inDoc[v] = true
	}
	if len(inDoc) == 0 {
		t.Fatal("the Error schema of openapi.yaml has no code enum")
	}
	// where records, for each code, the responses that name it.
	where := map[string][]string{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			for status, resp := range op.Responses.Map() {
				if resp.Value == nil {
					continue
				}
				for _, mt := range resp.Value.Content {
					for _, code := range codeEnum(mt.Schema) {
						where[code] = append(where[code], fmt.Sprintf("%s %s %s", status, method, path))
					}
				}
			}
		}
	}
	listed := map[string]bool{}
	for _, c := range errcode.All {
		listed[c.Code] = true
		if !inDoc[c.Code] {
			t.Errorf("code %s is in errcode.All but not in the Error schema of openapi.yaml", c.Code)
		}
		if c.Status < 400 || c.Status > 599 || http.StatusText(c.Status) == "" {
			t.Errorf("code %s has status %d", c.Code, c.Status)
		}
		if c.Meaning == "" || c.Kind == 0 {
			t.Errorf("code %s has no meaning or kind", c.Code)
		}
		for _, w := range where[c.Code] {
			st, err := strconv.Atoi(w[:3])
			if err == nil && st != c.Status {
				t.Errorf("openapi.yaml answers %s with %s, errcode.All with %d", c.Code, w, c.Status)
			}
		}
	}
	var extra []string
	for code := range inDoc {
		if !listed[code] {
			extra = append(extra, code)
		}
	}
	for code, ws := range where {
		if !listed[code] && !inDoc[code] {
			extra = append(extra, code+" ("+ws[0]+")")
		}
	}
	sort.Strings(extra)
	for _, code := range extra {
		t.Errorf("code %s is in openapi.yaml but not in errcode.All", code)
	}
}

// codeEnum is the enum of a schema's code property, looking into allOf.
func codeEnum(ref *openapi3.SchemaRef) []string {
	if ref == nil || ref.Value == nil {
		return nil
	}
	var out []string
	if p := ref.Value.Properties["code"]; p != nil && p.Value != nil {
		for _, v := range p.Value.Enum {
			if s, ok := v.(string); ok {
				out = append(out, s)
			}
		}
	}
	for _, sub := range ref.Value.AllOf {
		if sub.Ref == "#/components/schemas/Error" {
			continue // the enum of every code, not this response's
		}
		out = append(out, codeEnum(sub)...)
	}
	return out
}
