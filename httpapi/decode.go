package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/checkout-dev/checkout/errcode"
	"github.com/checkout-dev/checkout/internal/jsonnum"
	"github.com/checkout-dev/checkout/lease"
)

// Parsing of requests. The rules on what a request may hold are lease's
// (lease/validate.go): the helpers here parse a value, then check it with
// the rule, so that a value that does not parse and one that breaks the
// rule are answered alike.

// decode reads a JSON object into v strictly: wrong types, anything but an
// object and trailing data are 400 invalid_json; a body over MaxBodyBytes is
// 413. An empty body is the empty object. Then exactFields checks its keys.
// v points to a zero value, which a body decoded again starts from.
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
	// A whole number written 5.0 or 5e0 for an integer field is that
	// integer, as JSON Schema (and so the OpenAPI document) counts it:
	// each such literal is rewritten and the body decoded again.
	for rewrites := 0; ; rewrites++ {
		reflect.ValueOf(v).Elem().SetZero()
		dec := json.NewDecoder(bytes.NewReader(data))
		err := dec.Decode(v)
		if err == nil {
			if _, err := dec.Token(); err != io.EOF {
				return errorf(errcode.InvalidJSON, "the request body has data after the JSON object")
			}
			break
		}
		fixed, ok := jsonnum.Rewrite(data, err)
		if !ok || rewrites == maxNumberRewrites {
			return jsonError(err, reflect.TypeOf(v), data)
		}
		data = fixed
	}
	return exactFields(data, reflect.TypeOf(v), "")
}

// maxNumberRewrites bounds the integers of one body written as fractions
// that decode rewrites: a batch of 25 tasks has at most 50 integer fields.
const maxNumberRewrites = 64

// exactFields checks the keys of every object in data that t (or what t
// holds, at any depth) gives fields to: each must name a field exactly as
// its json tag spells it (encoding/json alone would take "TIMEOUT" for
// "timeout"), else 400 invalid_json; and none may be given twice in one
// object (encoding/json would keep the last; other decoders differ), else
// 400 invalid_request. Values that decode themselves (metadata, not_before)
// have their own rules. data has already been decoded into t without
// error, so it is valid JSON of the right shape. path names data in the
// sentence: "" for the body, "tasks[1]" for a batch's second task.
func exactFields(data []byte, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Implements(unmarshalerType) || reflect.PointerTo(t).Implements(unmarshalerType) {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		var fields map[string]reflect.Type
		if t.Kind() == reflect.Struct {
			fields = jsonFields(t)
		}
		seen := map[string]bool{}
		for _, m := range members(data) {
			if seen[m.name] {
				return errorf(errcode.InvalidRequest, "%sthe key %s is given twice in one object", pathPrefix(path), quoteName(m.name))
			}
			seen[m.name] = true
			var ft reflect.Type
			if fields == nil {
				ft = t.Elem() // a map's values
			} else if ft = fields[m.name]; ft == nil {
				return errorf(errcode.InvalidJSON, "%sunknown field %s", pathPrefix(path), quoteName(m.name))
			}
			if err := exactFields(m.value, ft, joinPath(path, m.name)); err != nil {
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
		for i, e := range elems {
			if err := exactFields(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// member is a key of a JSON object and its value.
type member struct {
	name  string
	value json.RawMessage
	start int // where value starts in the object's JSON
}

// members lists the keys and values of the JSON object data in their
// order, a key given twice twice; none when data is not an object (null).
func members(data []byte) []member {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	var out []member
	for dec.More() {
		tok, err := dec.Token()
		name, ok := tok.(string)
		var value json.RawMessage
		if err != nil || !ok || dec.Decode(&value) != nil {
			return out
		}
		end := int(dec.InputOffset())
		out = append(out, member{name, value, end - len(value)})
	}
	return out
}

// memberNamed is the last member of the JSON object data named name (the
// one encoding/json decodes).
func memberNamed(data []byte, name string) (member, bool) {
	ms := members(data)
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].name == name {
			return ms[i], true
		}
	}
	return member{}, false
}

// arrayElements lists the elements of the JSON array data, each with
// where it starts in data; none when data is not an array.
func arrayElements(data []byte) []member {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return nil
	}
	var out []member
	for dec.More() {
		var value json.RawMessage
		if dec.Decode(&value) != nil {
			return out
		}
		end := int(dec.InputOffset())
		out = append(out, member{value: value, start: end - len(value)})
	}
	return out
}

// elementAt is the element of the JSON array data, of elements of type t,
// that holds offset off, and its index; when off says nothing (an error
// from a value that decodes itself comes without one), the first element
// that t cannot hold for a value at field (the error's path from there,
// as encoding/json spells it).
func elementAt(data []byte, t reflect.Type, off int, field string) (int, member, bool) {
	elems := arrayElements(data)
	if i, e, ok := spanAt(elems, off); ok {
		return i, e, true
	}
	for i, e := range elems {
		var typeErr *json.UnmarshalTypeError
		if err := json.Unmarshal(e.value, reflect.New(t).Interface()); errors.As(err, &typeErr) && typeErr.Field == field {
			return i, member{value: e.value, start: -1 << 30}, true // no offset within it either
		}
	}
	return 0, member{}, false
}

// spanAt is the element of elems that holds offset off, and its index.
func spanAt(elems []member, off int) (int, member, bool) {
	for i, e := range elems {
		if off > e.start && off <= e.start+len(e.value) {
			return i, e, true
		}
	}
	return 0, member{}, false
}

// pathPrefix starts a sentence about the value at path: "tasks[1]: ", or
// nothing for the body itself.
func pathPrefix(path string) string {
	if path == "" {
		return ""
	}
	return path + ": "
}

// joinPath is the path of field name of the object at path.
func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
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

// quoteName quotes a name from the request for a sentence: Go-quoted, so
// that bytes that are not UTF-8 show as escapes, and cut at 64 bytes.
func quoteName(name string) string {
	if len(name) > 64 {
		return strconv.Quote(name[:64]) + "..."
	}
	return strconv.Quote(name)
}

// jsonError is the answer to a body that t cannot hold. A value of the
// wrong type is named by its path as the API spells it.
func jsonError(err error, t reflect.Type, data []byte) error {
	var typeErr *json.UnmarshalTypeError
	if !errors.As(err, &typeErr) {
		return errorf(errcode.InvalidJSON, "the request body is not valid JSON")
	}
	if typeErr.Field == "" {
		return errorf(errcode.InvalidJSON, "the request body has a value of the wrong type")
	}
	path, ft, data, off := jsonPath(t, strings.Split(typeErr.Field, "."), data, int(typeErr.Offset))
	want := typeName(typeErr.Type)
	if ft != nil && ft.Kind() == reflect.Slice && typeErr.Type.Kind() != reflect.Slice {
		// An element of the wrong type: name it, or say what the array
		// holds.
		if i, _, ok := spanAt(arrayElements(data), off); ok {
			path[len(path)-1] += fmt.Sprintf("[%d]", i)
		} else {
			want = typeName(ft)
		}
	}
	return errorf(errcode.InvalidJSON, "field %s must be %s", strings.Join(path, "."), want)
}

// jsonPath follows encoding/json's path of a field (which names the
// embedded structs it passes through by their Go names, and no array
// index) through t, and returns it with only the JSON names, each array
// it passes into given the index of the element the error is in
// ("tasks[1]"), and the type of the field it ends at (nil when the path
// leaves t). data is the body decoded, off where in it the error is; it
// returns the field's own JSON and where in that the error is.
func jsonPath(t reflect.Type, segs []string, data []byte, off int) ([]string, reflect.Type, []byte, int) {
	var out []string
	for k, seg := range segs {
		for t != nil && t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) && len(out) > 0 {
			// The path goes on into an element: say which.
			if i, elem, ok := elementAt(data, t.Elem(), off, strings.Join(segs[k:], ".")); ok {
				out[len(out)-1] += fmt.Sprintf("[%d]", i)
				data, off = elem.value, off-elem.start
			}
		}
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
		if m, ok := memberNamed(data, seg); ok {
			data, off = m.value, off-m.start
		}
	}
	if t != nil {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
	}
	return out, t, data, off
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

// checkQuery refuses, with 400 invalid_request naming the parameter, a
// query string that url.ParseQuery cannot parse (a bad %-escape, a ";"),
// and one that gives a parameter twice: url.Values drops a pair it cannot
// decode and Get keeps the first of two, either of which would quietly
// change what the request asks for. Every parameter of the API takes one
// value. A parameter not in known is refused as well: a mistyped filter
// (?stauts=todo) would list everything.
func checkQuery(raw string, known []string) error {
	for pair := range strings.SplitSeq(raw, "&") {
		if _, err := url.ParseQuery(pair); err != nil {
			param := "a query parameter's name"
			name, _, _ := strings.Cut(pair, "=")
			if name, err := url.QueryUnescape(name); err == nil {
				param = "query parameter " + quoteName(name)
			}
			return errorf(errcode.InvalidRequest, "%s could not be parsed: a %% must start an escape such as %%2C, and parameters are separated by &, not ;", param)
		}
	}
	q, _ := url.ParseQuery(raw) // every pair parses, so the whole does
	for _, name := range slices.Sorted(maps.Keys(q)) {
		if !slices.Contains(known, name) {
			return errorf(errcode.InvalidRequest, "unknown query parameter %s; this route takes %s", quoteName(name), strings.Join(known, ", "))
		}
		if n := len(q[name]); n > 1 {
			return errorf(errcode.InvalidRequest, "query parameter %s is given %d times; it takes one value", quoteName(name), n)
		}
	}
	return nil
}

// ifMatch parses PATCH's If-Match: absent is 0, no condition. Else it is
// a task's version, N or "N" (a decimal without sign or leading zeros;
// versions start at 1), given once, or "*", any version (no condition);
// anything else is 400 invalid_request.
// A weak tag, W/"N", never matches under If-Match (RFC 9110 compares it
// strongly): 412 version_mismatch, without asking the store.
func ifMatch(h http.Header) (int64, error) {
	vs := h.Values("If-Match")
	if len(vs) == 0 {
		return 0, nil
	}
	malformed := errorf(errcode.InvalidRequest, `If-Match must be a task version, given once: a positive integer such as 7 or "7"`)
	if len(vs) > 1 {
		return 0, malformed
	}
	v := vs[0]
	if v == "*" {
		return 0, nil // any version of the task (RFC 9110): no condition
	}
	if tag, weak := strings.CutPrefix(v, "W/"); weak {
		if n, quoted := unquote(tag); quoted {
			if _, ok := version(n); ok {
				return 0, errorf(errcode.VersionMismatch, "If-Match %s is a weak tag, which never matches: send the version as %s", v, tag)
			}
		}
		return 0, malformed
	}
	if n, quoted := unquote(v); quoted {
		v = n
	}
	n, ok := version(v)
	if !ok {
		return 0, malformed
	}
	return n, nil
}

// unquote is s without the double quotes around it, and whether it had
// them.
func unquote(s string) (string, bool) {
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		return s[1 : len(s)-1], true
	}
	return s, false
}

// version parses a task version: a decimal from 1, without sign or
// leading zeros.
func version(s string) (int64, bool) {
	if s == "" || s[0] < '1' || s[0] > '9' {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// fence parses the fence a holder's request names: absent or null is none
// (0); a fence given must be a grant's, 1 or more.
func fence(v *int64) (int64, error) {
	if v == nil {
		return 0, nil
	}
	if *v < 1 {
		return 0, invalid("fence", errcode.InvalidRequest, "fence must be a positive integer")
	}
	return *v, nil
}

// parseTime parses an RFC 3339 date-time (section 5.6): T and Z in either
// case, a fraction after a dot, an offset under 24 hours and 60 minutes.
// time.Parse alone refuses a lower-case t or z, and takes a comma for the
// dot and offsets such as +24:00.
func parseTime(s string) (time.Time, bool) {
	if len(s) > 10 && s[10] == 't' {
		s = s[:10] + "T" + s[11:]
	}
	if z, ok := strings.CutSuffix(s, "z"); ok {
		s = z + "Z"
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || strings.Contains(s, ",") {
		return time.Time{}, false
	}
	if offset := s[len(s)-6:]; offset[0] == '+' || offset[0] == '-' { // ±hh:mm, else Z
		if offset[1:3] >= "24" || offset[4:] >= "60" {
			return time.Time{}, false
		}
	}
	return t, true
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
// more than MaxBlockers tasks (a repeat counted once) or the task itself
// as invalid_dependency, max_attempts 1 to MaxMaxAttempts, retry_delay 0s
// to 1h (invalid_timeout, as every duration), not_before an RFC 3339 time.
func (g graphFields) parse(self string) (graph, error) {
	out := graph{blockedBy: g.BlockedBy, maxAttempts: g.MaxAttempts}
	if g.BlockedBy != nil {
		named := make(map[string]bool) // the tasks named: a repeat counts once, as the store merges it
		for _, id := range *g.BlockedBy {
			if !lease.ValidID(id) {
				return out, invalid("blocked_by", errcode.InvalidID, "blocked_by must hold task ids, each matching ^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
			}
			if self != "" && id == self {
				return out, invalid("blocked_by", errcode.InvalidDependency, "blocked_by must not name the task itself (%s)", self)
			}
			named[id] = true
		}
		if len(named) > lease.MaxBlockers {
			return out, invalid("blocked_by", errcode.InvalidDependency, "blocked_by names %d tasks; a task may be blocked by at most %d", len(named), lease.MaxBlockers)
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
			t, ok := parseTime(*v)
			if !ok {
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
