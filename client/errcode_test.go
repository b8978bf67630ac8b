package client

import (
	"errors"
	"testing"

	"github.com/checkout-dev/checkout/errcode"
)

// Every code of the API is known to the client, and an answer with a code
// that has a sentinel matches it; every 404 matches ErrNotFound and no
// other code's sentinel.
func TestEveryCodeHasItsSentinel(t *testing.T) {
	for _, c := range errcode.All {
		s, ok := codeSentinels[c.Code]
		if !ok {
			t.Errorf("code %s (%d) is not in codeSentinels", c.Code, c.Status)
			continue
		}
		err := decodeError(c.Status, []byte(`{"error":"x","code":"`+c.Code+`"}`))
		if s != nil && !errors.Is(err, s) {
			t.Errorf("an answer %d %s does not match %v", c.Status, c.Code, s)
		}
		if c.Status == 404 && !errors.Is(err, ErrNotFound) {
			t.Errorf("an answer 404 %s does not match ErrNotFound", c.Code)
		}
		for other, os := range codeSentinels {
			if os == nil || errors.Is(os, s) || errors.Is(os, ErrNotFound) || errors.Is(os, ErrInvalid) {
				continue // its own, or one that many codes share
			}
			if errors.Is(err, os) {
				t.Errorf("an answer %d %s matches the sentinel of %s", c.Status, c.Code, other)
			}
		}
	}
	for code := range codeSentinels {
		if _, ok := errcode.Lookup(code); !ok {
			t.Errorf("codeSentinels names %q, which is not a code of the API", code)
		}
	}
}
