package main

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// CHECKOUT_WEBHOOK_URL and its companions: the notifier, and clear
// refusals of bad settings.
func TestWebhooksFrom(t *testing.T) {
	t.Parallel()
	quiet := slog.New(slog.DiscardHandler)
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	data := t.TempDir()
	if n, err := webhooksFrom(env(nil), data, quiet); n != nil || err != nil {
		t.Fatalf("without a URL: %v %v", n, err)
	}
	n, err := webhooksFrom(env(map[string]string{"CHECKOUT_WEBHOOK_URL": "http://127.0.0.1:9/a, https://example.com/b", "CHECKOUT_WEBHOOK_SECRET": "s"}), data, quiet)
	if err != nil || n == nil {
		t.Fatalf("two URLs: %v", err)
	}
	// The dead letters' file is tried at start, and not left behind.
	if _, err := os.Stat(filepath.Join(data, "webhook-dead-letters.jsonl")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the dead letters' file after the check: %v", err)
	}
	file := filepath.Join(data, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []map[string]string{
		{"CHECKOUT_WEBHOOK_URL": "ftp://x", "CHECKOUT_WEBHOOK_SECRET": "s"},
		{"CHECKOUT_WEBHOOK_URL": "http://x"},
		{"CHECKOUT_WEBHOOK_URL": "http://x", "CHECKOUT_WEBHOOK_SECRET": "s", "CHECKOUT_WEBHOOK_RETRY_FOR": "forever"},
		// Dead letters that cannot be written are refused at start (they
		// used to be found out when a delivery failed for good).
		{"CHECKOUT_WEBHOOK_URL": "http://x", "CHECKOUT_WEBHOOK_SECRET": "s", "CHECKOUT_WEBHOOK_DEAD_LETTERS": filepath.Join(file, "dead.jsonl")},
		{"CHECKOUT_WEBHOOK_URL": "http://x", "CHECKOUT_WEBHOOK_SECRET": "s", "CHECKOUT_WEBHOOK_DEAD_LETTERS": data},
	} {
		want := "CHECKOUT_WEBHOOK"
		if p := bad["CHECKOUT_WEBHOOK_DEAD_LETTERS"]; p != "" {
			want = "CHECKOUT_WEBHOOK_DEAD_LETTERS " + p + " cannot be written"
		}
		if _, err := webhooksFrom(env(bad), "", quiet); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: %v", bad, err)
		}
	}
}
