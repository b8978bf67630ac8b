// Package openapitest checks HTTP answers against httpapi/openapi/openapi.yaml, so that
// handler tests and end-to-end tests prove the document describes what the
// server does.
package openapitest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	gopath "path"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/checkout-dev/checkout/errcode"
	"github.com/checkout-dev/checkout/httpapi/openapi"
)

var (
	loadOnce sync.Once
	doc      *openapi3.T
	router   routers.Router
	loadErr  error
)

// Load parses and validates the document once per process.
func Load() (*openapi3.T, error) {
	loadOnce.Do(func() {
		loader := openapi3.NewLoader()
		d, err := loader.LoadFromData(openapi.YAML)
		if err != nil {
			loadErr = fmt.Errorf("load openapi.yaml: %w", err)
			return
		}
		if err := d.Validate(context.Background()); err != nil {
			loadErr = fmt.Errorf("openapi.yaml is not valid: %w", err)
			return
		}
		// Route on paths alone, whatever host the answers came from.
		routed := *d
		routed.Servers = nil
		r, err := legacy.NewRouter(&routed)
		if err != nil {
			loadErr = fmt.Errorf("route openapi.yaml: %w", err)
			return
		}
		doc, router = d, r
	})
	return doc, loadErr
}

// ValidateFunc checks one answer: the method and path (with any query) of
// the request, and the status, header and body of the response.
type ValidateFunc func(method, path string, status int, header http.Header, body []byte) error

// Validator returns a ValidateFunc for the document; it fails t at once if
// the document does not load.
//
// An answer is valid when its operation exists and documents its status and
// the body matches that status's schema. Answers to paths or methods the
// document does not have must be 404 not_found or 405 method_not_allowed
// error bodies.
func Validator(t testing.TB) ValidateFunc {
	t.Helper()
	if _, err := Load(); err != nil {
		t.Fatal(err)
	}
	return Validate
}

// Validate is the ValidateFunc of the document; the document must load.
func Validate(method, path string, status int, header http.Header, body []byte) error {
	d, err := Load()
	if err != nil {
		return err
	}
	u, err := url.Parse("http://localhost" + path)
	if err != nil {
		return fmt.Errorf("bad path %q: %w", path, err)
	}
	// Route on the escaped path, as the server's ServeMux matches segments.
	u.Path, u.RawPath = u.EscapedPath(), ""
	req := &http.Request{Method: method, URL: u, Header: http.Header{}}
	if !served(u.Path) {
		return unrouted(d, false, method, path, status, header, body)
	}
	route, params, err := router.FindRoute(req)
	if err != nil {
		return unrouted(d, otherMethod(u), method, path, status, header, body)
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request:    req,
			PathParams: params,
			Route:      route,
		},
		Status:  status,
		Header:  header,
		Body:    io.NopCloser(bytes.NewReader(body)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		return fmt.Errorf("%s %s -> %d %s: %w", method, path, status, trim(body), err)
	}
	return nil
}

// served reports whether the server routes p at all: it answers paths
// that are not in clean form, or that end in a slash, with 404.
func served(p string) bool {
	if p == "/" || !strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") {
		return false
	}
	return gopath.Clean(p) == p
}

// otherMethod reports whether the path is in the document with some method.
func otherMethod(u *url.URL) bool {
	for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
		if _, _, err := router.FindRoute(&http.Request{Method: m, URL: u, Header: http.Header{}}); err == nil {
			return true
		}
	}
	return false
}

// unrouted checks the answer to a method and path the document lacks: 405
// method_not_allowed when the path is known, else 404 not_found.
func unrouted(d *openapi3.T, knownPath bool, method, path string, status int, header http.Header, body []byte) error {
	want, code := http.StatusNotFound, errcode.NotFound
	if knownPath {
		want, code = http.StatusMethodNotAllowed, errcode.MethodNotAllowed
	}
	if status != want {
		return fmt.Errorf("%s %s is not in the document but answered %d, want %d", method, path, status, want)
	}
	schema := d.Components.Schemas["Error"]
	if schema == nil || schema.Value == nil {
		return fmt.Errorf("the document has no Error schema")
	}
	if ct := header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return fmt.Errorf("%s %s -> %d: content type %q", method, path, status, ct)
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("%s %s -> %d: body is not JSON: %w", method, path, status, err)
	}
	if err := schema.Value.VisitJSON(v, openapi3.EnableJSONSchema2020(), openapi3.MultiErrors()); err != nil {
		return fmt.Errorf("%s %s -> %d %s: %w", method, path, status, trim(body), err)
	}
	if m, _ := v.(map[string]any); m["code"] != code {
		return fmt.Errorf("%s %s -> %d: code %v, want %s", method, path, status, m["code"], code)
	}
	return nil
}

func trim(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}

// Operations lists every method and path of the document, as "METHOD /path".
func Operations() ([]string, error) {
	d, err := Load()
	if err != nil {
		return nil, err
	}
	var out []string
	for p, item := range d.Paths.Map() {
		for m := range item.Operations() {
			out = append(out, m+" "+p)
		}
	}
	return out, nil
}
