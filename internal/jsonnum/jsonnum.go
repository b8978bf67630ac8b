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
	"math/big"
	"reflect"
	"strconv"
	"strings"
)

// Whole is lit, a JSON number written with a fraction or an exponent, as
// the integer it is, when its value, read exactly (not as the float64 it
// rounds to: 5e-400 is not 0, nor 4.99999999999999999999 5), is whole and
// a float64 holds it exactly (|n| <= 2^53). ok is false for anything
// else, an integer literal included (it needs no rewriting).
func Whole(lit []byte) (n int64, ok bool) {
	lit = bytes.TrimSpace(lit)
	if !bytes.ContainsAny(lit, ".eE") || !json.Valid(lit) || lit[0] == '"' {
		return 0, false
	}
	if i := bytes.IndexAny(lit, "eE"); i >= 0 {
		// A whole number of at most 16 digits written with exponent e
		// needs about |e| digits or zeros besides: an exponent longer
		// than the literal makes none (and big.Rat would build the
		// number whole).
		exp, err := strconv.Atoi(string(lit[i+1:]))
		if limit := len(lit) + 20; err != nil || exp > limit || exp < -limit {
			return 0, false
		}
	}
	r, parsed := new(big.Rat).SetString(string(lit))
	if !parsed || !r.IsInt() || r.Num().CmpAbs(big.NewInt(1<<53)) > 0 {
		return 0, false
	}
	return r.Num().Int64(), true
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
