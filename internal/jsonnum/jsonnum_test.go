package jsonnum

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestWhole(t *testing.T) {
	t.Parallel()
	for lit, want := range map[string]int64{"5.0": 5, "5e0": 5, "0.5E1": 5, "-3.000": -3, "-0.0": 0, "1e3": 1000, "9007199254740992.0": 1 << 53,
		"50e-1": 5, "5.000000000000000000000000": 5, "0.0000000000000000000005e22": 5,
		"0." + strings.Repeat("0", 450) + "5e451": 5, "5" + strings.Repeat("0", 450) + "e-450": 5} {
		if n, ok := Whole([]byte(lit)); !ok || n != want {
			t.Errorf("Whole(%s) = %d, %v; want %d", lit, n, ok, want)
		}
	}
	// Not whole, however close a float64 would round them: 5e-400 is not
	// 0, nor 4.99999999999999999999 5 (they used to be read so).
	for _, lit := range []string{"5", "-7", "5.5", "1e-1", "1e400", "9007199254740994.0", `"5.0"`, "null", "5.0.0",
		"5e-400", "1e-400", "4.99999999999999999999", "5.00000000000000000001", "1.00000000000000000001", "1e99999999999", "1e-99999999999"} {
		if n, ok := Whole([]byte(lit)); ok {
			t.Errorf("Whole(%s) = %d, true; want not ok", lit, n)
		}
	}
}

// Rewrite fixes one literal at a time, only the one an integer field
// refused, and nothing else.
func TestRewrite(t *testing.T) {
	t.Parallel()
	type body struct {
		N     int             `json:"n"`
		U     uint            `json:"u"`
		F     float64         `json:"f"`
		Inner struct{ M int } `json:"inner"`
		Meta  map[string]any  `json:"meta"`
	}
	data := []byte(`{"f": 2.0, "meta": {"x": 4.0}, "n": 1.0e1, "inner": {"M": 3.0}}`)
	var v body
	for range 5 {
		err := json.Unmarshal(data, &v)
		if err == nil {
			break
		}
		fixed, ok := Rewrite(data, err)
		if !ok {
			t.Fatalf("Rewrite refused %s: %v", data, err)
		}
		data = fixed
	}
	if want := `{"f": 2.0, "meta": {"x": 4.0}, "n": 10, "inner": {"M": 3}}`; string(data) != want {
		t.Fatalf("rewritten to %s, want %s", data, want)
	}
	if v.N != 10 || v.Inner.M != 3 {
		t.Fatalf("decoded %+v", v)
	}

	for _, bad := range []string{`{"n": 5.5}`, `{"u": -1.0}`, `{"n": "5.0"}`, `{"n": 1e300}`} {
		var v body
		err := json.Unmarshal([]byte(bad), &v)
		if fixed, ok := Rewrite([]byte(bad), err); ok {
			// -1.0 for a uint is rewritten once, to -1, which is then refused.
			if err = json.Unmarshal(fixed, &v); err == nil {
				t.Errorf("%s decoded as %+v", bad, v)
			}
			if _, ok := Rewrite(fixed, err); ok {
				t.Errorf("%s rewritten twice", bad)
			}
		}
	}
	if _, ok := Rewrite(nil, errors.New("other")); ok {
		t.Error("Rewrite took an error that is not a type error")
	}
}
