package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/checkout-dev/checkout/errcode"
	"github.com/checkout-dev/checkout/lease"
)

// Parsing of requests. The rules on what a request may hold are lease's
// (lease/validate.go): the helpers here parse a value, then check it with
// the rule, so that a value that does not parse and one that breaks the
// rule are answered alike.

// decode reads a JSON object into v strictly: unknown fields, wrong types,
// anything but an object and trailing data are 400 invalid_json; a body over
// MaxBodyBytes is 413. An empty body is the empty object. Field names match
// exactly, case included, at every depth (encoding/json alone would take
// "TIMEOUT" for "timeout"): anything else is an unknown field.
func decode(r *http.Request, v any) error {
	data, err := io.ReadAll(r.Body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return err
		}
		return errorf(errcode.InvalidJSON, "the request body could not be read")
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil
	}
	if data[0] != '{' {
		return errorf(errcode.InvalidJSON, "the request body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err, reflect.TypeOf(v))
	}
	if _, err := dec.Token(); err != io.EOF {
		return errorf(errcode.InvalidJSON, "the request body has data after the JSON object")
	}
	return exactFields(data, reflect.TypeOf(v))
}

// exactFields checks that every object key in data names a field of t (or
// of what t holds, at any depth) exactly as its json tag spells it. data has
// already been decoded into t without error, so it is valid JSON of the
// right shape; only the spelling of names is left to check.
func exactFields(data []byte, t reflect.Type) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Implements(unmarshalerType) || reflect.PointerTo(t).Implements(unmarshalerType) {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		var obj map[string]json.RawMessage
		if json.Unmarshal(data, &obj) != nil || obj == nil { // null
			return nil
		}
		fields := jsonFields(t)
		names := make([]string, 0, len(obj))
		for name := range obj {
			names = append(names, name)
		}
		sort.Strings(names) // the same answer every time when several are wrong
		for _, name := range names {
			ft, ok := fields[name]
			if !ok {
				return unknownField(name)
			}
			if err := exactFields(obj[name], ft); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 { // []byte is a base64 string
			return nil
		}
		var elems []json.RawMessage
		if json.Unmarshal(data, &elems) != nil {
			return nil
		}
		for _, e := range elems {
			if err := exactFields(e, t.Elem()); err != nil {
				return err
			}
		}
	case reflect.Map:
		var obj map[string]json.RawMessage
		if json.Unmarshal(data, &obj) != nil {
			return nil
		}
		for _, e := range obj {
			if err := exactFields(e, t.Elem()); err != nil {
				return err
			}
		}
	}
	return nil
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// jsonFields maps the JSON names of struct t's fields, with those of its
// embedded structs promoted as encoding/json does, to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		ft := f.Type
		if f.Anonymous && name == "" {
			et := ft
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				for n, typ := range jsonFields(et) {
					if _, shadowed := out[n]; !shadowed {
						out[n] = typ
					}
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = ft
	}
	return out
}

func unknownField(name string) error {
	if len(name) > 64 || !utf8.ValidString(name) || strings.ContainsRune(name, utf8.RuneError) {
		return errorf(errcode.InvalidJSON, "the request body has an unknown field")
	}
	return errorf(errcode.InvalidJSON, "unknown field %q", name)
}

// jsonError is the answer to a body that t cannot hold. A value of the
// wrong type is named by its path as the API spells it.
func jsonError(err error, t reflect.Type) error {
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &typeErr):
		if typeErr.Field == "" {
			return errorf(errcode.InvalidJSON, "the request body has a value of the wrong type")
		}
		path, ft := jsonPath(t, strings.Split(typeErr.Field, "."))
		want := typeName(typeErr.Type)
		if ft != nil && ft.Kind() == reflect.Slice && typeErr.Type.Kind() != reflect.Slice {
			want = typeName(ft) // an element of the wrong type: say what the array holds
		}
		return errorf(errcode.InvalidJSON, "field %s must be %s", strings.Join(path, "."), want)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name, _ := strconv.Unquote(strings.TrimPrefix(err.Error(), "json: unknown field "))
		return unknownField(name)
	}
	return errorf(errcode.InvalidJSON, "the request body is not valid JSON")
}

// jsonPath follows encoding/json's path of a field (which names the
// embedded structs it passes through by their Go names) through t, and
// returns it with only the JSON names, and the type of the field it ends
// at (nil when the path leaves t).
func jsonPath(t reflect.Type, segs []string) ([]string, reflect.Type) {
	var out []string
	for _, seg := range segs {
		t = elemType(t)
		if t == nil || t.Kind() != reflect.Struct {
			out, t = append(out, seg), nil
			continue
		}
		if f, ok := t.FieldByName(seg); ok && f.Anonymous && f.Tag.Get("json") == "" {
			t = f.Type // an embedded struct: its fields are the outer object's
			continue
		}
		out = append(out, seg)
		t = jsonFields(t)[seg]
	}
	if t != nil {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
	}
	return out, t
}

// elemType is what a value of t holds fields of: t itself for a struct,
// the element of a pointer, slice, array or map.
func elemType(t reflect.Type) reflect.Type {
	for t != nil {
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
			t = t.Elem()
		default:
			return t
		}
	}
	return nil
}

// typeName says what a JSON value for t is.
func typeName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		switch typeName(t.Elem()) {
		case "a string":
			return "an array of strings"
		case "an integer":
			return "an array of integers"
		case "an object":
			return "an array of objects"
		}
		return "an array"
	}
	return "of another type"
}

// optionalID parses an optional id field; absent or null is "".
func optionalID(field string, id *string) (string, error) {
	if id == nil {
		return "", nil
	}
	return *id, lease.CheckID(field, *id)
}

// pathID is a path parameter that must be an id.
func pathID(r *http.Request, name string) (string, error) {
	id := r.PathValue(name)
	return id, lease.CheckID(name, id)
}

// duration parses an optional Go duration and checks it against rng;
// absent or null is def. A value that does not parse fails as one out of
// range does.
func duration(v *string, def time.Duration, rng lease.DurationRange) (time.Duration, error) {
	if v == nil {
		return def, nil
	}
	d, err := time.ParseDuration(*v)
	if err != nil {
		return 0, rng.Invalid()
	}
	return d, rng.Check(d)
}

// limit parses a listing's page size.
func limit(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, lease.InvalidLimit()
	}
	return n, lease.CheckLimit(n)
}

// invalid is a validation error of field, answered 400 with code as lease's
// rules answer theirs; inside a batch, lease.InBatch names the task.
func invalid(field, code, format string, args ...any) error {
	return &lease.ValidationError{Field: field, Code: code, Message: fmt.Sprintf(format, args...)}
}

// retryDelayRange is what a task's retry_delay may be: 0s to 1h.
var retryDelayRange = lease.DurationRange{Field: "retry_delay", Min: 0, Max: lease.MaxRetryWait}

// nullableTime is a time field where null means something: Given reports
// that the field was in the body at all, Value is nil for null.
type nullableTime struct {
	Given bool
	Value *string
}

func (n *nullableTime) UnmarshalJSON(b []byte) error {
	n.Given = true
	if string(bytes.TrimSpace(b)) == "null" {
		n.Value = nil
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return &json.UnmarshalTypeError{Value: "value", Type: reflect.TypeFor[string]()}
	}
	n.Value = &s
	return nil
}

// graphFields are the work graph's fields of a task as create, batch and
// PATCH take them. Null is an absent field, except not_before on PATCH,
// where null clears the time.
type graphFields struct {
	BlockedBy   *[]string    `json:"blocked_by"`
	MaxAttempts *int         `json:"max_attempts"`
	RetryDelay  *string      `json:"retry_delay"`
	NotBefore   nullableTime `json:"not_before"`
}

// graph is checked graphFields.
type graph struct {
	blockedBy    *[]string
	maxAttempts  *int
	retryDelay   *time.Duration
	setNotBefore bool // not_before given, as a time or as null
	notBefore    *time.Time
}

// parse checks g, the fields of the task self ("" when the body names no
// id), in the order blocked_by, max_attempts, retry_delay, not_before. The
// ranges are the store's, answered here as well so that a bad value is
// refused before anything is read: a blocker's id as any id (invalid_id),
// more than MaxBlockers or the task itself as invalid_dependency,
// max_attempts 1 to MaxMaxAttempts, retry_delay 0s to 1h (invalid_timeout,
// as every duration), not_before an RFC 3339 time.
func (g graphFields) parse(self string) (graph, error) {
	out := graph{blockedBy: g.BlockedBy, maxAttempts: g.MaxAttempts}
	if g.BlockedBy != nil {
		ids := *g.BlockedBy
		if len(ids) > lease.MaxBlockers {
			return out, invalid("blocked_by", errcode.InvalidDependency, "blocked_by names %d tasks; a task may be blocked by at most %d", len(ids), lease.MaxBlockers)
		}
		for _, id := range ids {
			if !lease.ValidID(id) {
				return out, invalid("blocked_by", errcode.InvalidID, "blocked_by must hold task ids, each matching ^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
			}
			if self != "" && id == self {
				return out, invalid("blocked_by", errcode.InvalidDependency, "blocked_by must not name the task itself (%s)", self)
			}
		}
	}
	if n := g.MaxAttempts; n != nil && (*n < 1 || *n > lease.MaxMaxAttempts) {
		return out, invalid("max_attempts", errcode.InvalidRequest, "max_attempts must be an integer from 1 to %d", lease.MaxMaxAttempts)
	}
	if g.RetryDelay != nil {
		d, err := duration(g.RetryDelay, 0, retryDelayRange)
		if err != nil {
			return out, err
		}
		out.retryDelay = &d
	}
	if g.NotBefore.Given {
		out.setNotBefore = true
		if v := g.NotBefore.Value; v != nil {
			t, err := time.Parse(time.RFC3339Nano, *v)
			if err != nil {
				return out, invalid("not_before", errcode.InvalidRequest, "not_before must be an RFC 3339 time such as 2026-03-20T14:35:00Z, or null")
			}
			t = t.UTC()
			out.notBefore = &t
		}
	}
	return out, nil
}

// releaseOutcome checks a release's outcome and error: outcome done or
// failed when given, an error only with outcome failed and of at most
// MaxErrorLen bytes.
func releaseOutcome(outcome *lease.ReleaseOutcome, text string) (lease.ReleaseOutcome, error) {
	var o lease.ReleaseOutcome
	if outcome != nil {
		if *outcome != lease.OutcomeDone && *outcome != lease.OutcomeFailed {
			return "", invalid("outcome", errcode.InvalidRequest, "outcome must be done or failed")
		}
		o = *outcome
	}
	if len(text) > lease.MaxErrorLen {
		return "", invalid("error", errcode.InvalidRequest, "error must be at most %d bytes", lease.MaxErrorLen)
	}
	if text != "" && o != lease.OutcomeFailed {
		return "", invalid("error", errcode.InvalidRequest, "error is given only with outcome failed")
	}
	return o, nil
}

// checkExpectedStatuses refuses, besides what lease's rule refuses, the
// statuses of the work graph: a checkout may expect todo, in_progress, done
// and cancelled only (a blocked task is answered blocked, a failed one is
// reopened with PATCH).
func checkExpectedStatuses(ss []lease.Status) error {
	if err := lease.CheckExpectedStatuses(ss); err != nil {
		return err
	}
	for _, s := range ss {
		if s == lease.StatusBlocked || s == lease.StatusFailed {
			return invalid("expected_statuses", errcode.InvalidRequest, "expected_statuses may hold only todo, in_progress, done and cancelled")
		}
	}
	return nil
}
