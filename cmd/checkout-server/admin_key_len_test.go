package main

import (
	"strings"
	"testing"

	"github.com/checkout-dev/checkout/auth"
)

// A CHECKOUT_ADMIN_KEY longer than auth.MaxKeyLen is stored by EnsureAgent
// but can never be sent as a bearer token (BearerKey, the key cache and the
// store refuse longer keys unread): the server would start with an admin
// nobody can authenticate as. It is refused at start, as a short one is.
func TestAdminKeyLongerThanABearerTokenIsRefused(t *testing.T) {
	long := "ck_" + strings.Repeat("a", auth.MaxKeyLen)
	_, err := configFrom(func(k string) string { return map[string]string{"CHECKOUT_ADMIN_KEY": long}[k] })
	if err == nil || !strings.HasPrefix(err.Error(), "CHECKOUT_ADMIN_KEY: ") || strings.Contains(err.Error(), long) {
		t.Errorf("admin key of %d characters: %v; want refused, naming the variable but not the key", len(long), err)
	}
	ok := strings.Repeat("k", auth.MaxKeyLen)
	if _, err := configFrom(func(k string) string { return map[string]string{"CHECKOUT_ADMIN_KEY": ok}[k] }); err != nil {
		t.Errorf("admin key of %d characters: %v; want accepted", len(ok), err)
	}
}
