package mcpserver

// How a tool call's arguments are read before its handler sees them: a
// null is an argument left out, and arguments of the wrong kind are
// refused in plain words (naming the argument and what it must be), not
// with the schema validator's or encoding/json's Go-flavoured errors.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/checkout-dev/checkout/internal/jsonnum"
)

// normalize removes the top-level arguments whose value is null: many
// model clients send null for an argument they leave out, and every tool
// takes null as "not given". It also writes a whole number given for an
// integer argument as a fraction or an exponent (5.0, 1e3: JSON Schema
// counts them integers, and clients that keep every number as a float
// send them) as the integer it is. Arguments that are no JSON object are
// returned as they are, for the checks to refuse.
func normalize(in *jsonschema.Schema, raw json.RawMessage) json.RawMessage {
	var args map[string]json.RawMessage
	if json.Unmarshal(raw, &args) != nil || args == nil {
		return raw
	}
	changed := false
	for k, v := range args {
		if string(bytes.TrimSpace(v)) == "null" {
			delete(args, k)
			changed = true
			continue
		}
		if p, ok := in.Properties[k]; ok && typeOf(p) == "integer" {
			if n, ok := jsonnum.Whole(v); ok {
				args[k] = json.RawMessage(strconv.FormatInt(n, 10))
				changed = true
			}
		}
	}
	if !changed {
		return raw
	}
	b, err := json.Marshal(args) // RawMessages are kept byte for byte
	if err != nil {
		return raw
	}
	return b
}

// checkArgs says in plain words what is wrong with raw, a tool's
// arguments with their nulls dropped, against in, its input schema: ""
// when nothing is.
func checkArgs(tool string, in *jsonschema.Schema, raw json.RawMessage) string {
	var args map[string]json.RawMessage
	if json.Unmarshal(raw, &args) != nil || args == nil {
		return "the arguments must be a JSON object, such as {\"task_id\": \"task-1\"}"
	}
	names := make([]string, 0, len(args))
	for k := range args {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		p, ok := in.Properties[k]
		if !ok {
			known := make([]string, 0, len(in.Properties))
			for n := range in.Properties {
				known = append(known, n)
			}
			sort.Strings(known)
			if len(known) == 0 {
				return fmt.Sprintf("unknown argument %q: %s takes no arguments", k, tool)
			}
			return fmt.Sprintf("unknown argument %q: %s takes %s", k, tool, strings.Join(known, ", "))
		}
		if !fits(p, args[k]) {
			return fmt.Sprintf("%s must be %s, not %s", k, kindText(p), valueText(args[k]))
		}
	}
	for _, k := range in.Required {
		if _, ok := args[k]; !ok {
			return fmt.Sprintf("%s is required", k)
		}
	}
	return ""
}

// typeOf is the one type other than null that s allows ("" for any).
func typeOf(s *jsonschema.Schema) string {
	if s.Type != "" {
		return s.Type
	}
	for _, t := range s.Types {
		if t != "null" {
			return t
		}
	}
	return ""
}

// fits says whether v, a JSON value, is of the kind s asks for. An integer
// must be written as one (digits, no fraction or exponent) and fit in 64
// bits, as the tools read it.
func fits(s *jsonschema.Schema, v json.RawMessage) bool {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return false
	}
	switch typeOf(s) {
	case "string":
		return v[0] == '"'
	case "boolean":
		return string(v) == "true" || string(v) == "false"
	case "integer":
		var n int64
		return json.Unmarshal(v, &n) == nil
	case "number":
		var f float64
		return json.Unmarshal(v, &f) == nil
	case "object":
		return v[0] == '{'
	case "array":
		var items []json.RawMessage
		if v[0] != '[' || json.Unmarshal(v, &items) != nil {
			return false
		}
		if s.Items == nil {
			return true
		}
		return !slices.ContainsFunc(items, func(item json.RawMessage) bool { return !fits(s.Items, item) })
	}
	return true
}

// kindText is what s asks for, in words: "a string", "a list of strings".
func kindText(s *jsonschema.Schema) string {
	switch typeOf(s) {
	case "string":
		return "a string"
	case "boolean":
		return "true or false"
	case "integer":
		return "a whole number such as 5"
	case "number":
		return "a number"
	case "object":
		return "a JSON object"
	case "array":
		if s.Items != nil {
			if t := typeOf(s.Items); t == "string" || t == "integer" || t == "object" {
				return "a list of " + map[string]string{"string": "strings", "integer": "whole numbers", "object": "JSON objects"}[t]
			}
		}
		return "a list"
	}
	return "a JSON value"
}

// valueText names v, a JSON value given where another was asked for: the
// value itself when short, else its kind.
func valueText(v json.RawMessage) string {
	v = bytes.TrimSpace(v)
	if len(v) > 0 && len(v) <= 40 {
		return string(v)
	}
	switch {
	case len(v) == 0:
		return "nothing"
	case v[0] == '"':
		return "a long string"
	case v[0] == '{':
		return "a JSON object"
	case v[0] == '[':
		return "a list"
	}
	return "a long number"
}
