// Package jsonnum reads JSON numbers the way JSON Schema counts them: a
// number is an integer when its value is whole, however it is written
// (5, 5.0, 5e0 and 0.5e1 are one integer). Clients that keep every number
// as a float (JavaScript's JSON, many model clients) send 5.0 for 5, and
// encoding/json refuses that for an int field.
package jsonnum

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strconv"
	"strings"
)

// Whole is lit, a JSON number written with a fraction or an exponent, as
// the integer it is, when its value is whole and a float64 holds it
// exactly (|n| <= 2^53). ok is false for anything else, an integer
// literal included (it needs no rewriting).
func Whole(lit []byte) (n int64, ok bool) {
	lit = bytes.TrimSpace(lit)
	if !bytes.ContainsAny(lit, ".eE") {
		return 0, false
	}
	var f float64
	if json.Unmarshal(lit, &f) != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, false
	}
	return int64(f), true
}

// Rewrite answers err, from decoding data with encoding/json, when it is
// a whole number written as a fraction or an exponent that an integer
// field refused: data with that one literal written as the integer it
// is, to be decoded again. ok is false for any other error.
func Rewrite(data []byte, err error) (fixed []byte, ok bool) {
	var typeErr *json.UnmarshalTypeError
	if !errors.As(err, &typeErr) || !isInt(typeErr.Type.Kind()) {
		return nil, false
	}
	lit, found := strings.CutPrefix(typeErr.Value, "number ")
	end := int(typeErr.Offset)
	start := end - len(lit)
	if !found || start < 0 || end > len(data) || string(data[start:end]) != lit {
		return nil, false
	}
	n, ok := Whole([]byte(lit))
	if !ok {
		return nil, false
	}
	fixed = make([]byte, 0, len(data)+len(lit))
	fixed = append(fixed, data[:start]...)
	fixed = strconv.AppendInt(fixed, n, 10)
	return append(fixed, data[end:]...), true
}

func isInt(k reflect.Kind) bool {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}
