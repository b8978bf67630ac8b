package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
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
		return jsonError(err)
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

func jsonError(err error) error {
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			return errorf(errcode.InvalidJSON, "the request body has a value of the wrong type")
		}
		return errorf(errcode.InvalidJSON, "field %s must be %s", field, typeName(typeErr.Type.Kind().String()))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name, _ := strconv.Unquote(strings.TrimPrefix(err.Error(), "json: unknown field "))
		return unknownField(name)
	}
	return errorf(errcode.InvalidJSON, "the request body is not valid JSON")
}

func typeName(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "int64", "int", "int32":
		return "an integer"
	case "slice":
		return "an array"
	case "ptr":
		return "a string"
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
