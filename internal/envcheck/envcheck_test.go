package envcheck

import (
	"reflect"
	"testing"
)

func TestSlips(t *testing.T) {
	t.Parallel()
	own := []string{"CHECKOUT_ADMIN_KEY", "CHECKOUT_ADDR", "CHECKOUT_DATA_DIR"}
	env := []string{
		"PATH=/bin",
		"CHECKOUT_ADMN_KEY=secret-secret-secret", // a letter left out
		"CHECKOUT_ADDR=127.0.0.1:3100",           // a setting
		"CHECKOUT_URL=http://x",                  // another program's setting
		"CHECKOUT_DAAT_DIR=/tmp/d",               // two letters swapped
		"checkout_addr=:1",                       // the case
		"CHECKOUT_LIN_SEED=7",                    // some other tool's, far from any
		"CHECKOUT_ADMIN_KEYS=x",                  // a letter added
		"CHECKOUT_DATA=x",                        // four letters short: not taken for it
		"CHECKOUT_RUN_ID=x",                      // the CLI's, never reported
	}
	want := []Slip{
		{"CHECKOUT_ADMN_KEY", "CHECKOUT_ADMIN_KEY"},
		{"CHECKOUT_DAAT_DIR", "CHECKOUT_DATA_DIR"},
		{"checkout_addr", "CHECKOUT_ADDR"},
		{"CHECKOUT_ADMIN_KEYS", "CHECKOUT_ADMIN_KEY"},
	}
	if got := Slips(env, own); !reflect.DeepEqual(got, want) {
		t.Errorf("Slips = %v, want %v", got, want)
	}
}

func TestDistance(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"A", "", 1}, {"", "AB", 2}, {"AB", "BA", 1}, {"KITTEN", "SITTING", 3}, {"ADDR", "ADDR", 0}, {"ADMN", "ADMIN", 1},
	} {
		if got := distance(c.a, c.b); got != c.want {
			t.Errorf("distance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}
