package main

import (
	"log/slog"
	"strings"
	"testing"
)

// CHECKOUT_WEBHOOK_URL and its companions: the notifier, and clear
// refusals of bad settings.
func TestWebhooksFrom(t *testing.T) {
	t.Parallel()
	quiet := slog.New(slog.DiscardHandler)
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	if n, err := webhooksFrom(env(nil), "/data", quiet); n != nil || err != nil {
		t.Fatalf("without a URL: %v %v", n, err)
	}
	n, err := webhooksFrom(env(map[string]string{"CHECKOUT_WEBHOOK_URL": "http://127.0.0.1:9/a, https://example.com/b", "CHECKOUT_WEBHOOK_SECRET": "s"}), "/data", quiet)
	if err != nil || n == nil {
		t.Fatalf("two URLs: %v", err)
	}
	for _, bad := range []map[string]string{
		{"CHECKOUT_WEBHOOK_URL": "ftp://x", "CHECKOUT_WEBHOOK_SECRET": "s"},
		{"CHECKOUT_WEBHOOK_URL": "http://x"},
		{"CHECKOUT_WEBHOOK_URL": "http://x", "CHECKOUT_WEBHOOK_SECRET": "s", "CHECKOUT_WEBHOOK_RETRY_FOR": "forever"},
	} {
		if _, err := webhooksFrom(env(bad), "", quiet); err == nil || !strings.Contains(err.Error(), "CHECKOUT_WEBHOOK") {
			t.Errorf("%v: %v", bad, err)
		}
	}
}
