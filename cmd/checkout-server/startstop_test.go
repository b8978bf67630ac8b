package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
)

// A Ctrl-C (SIGINT or SIGTERM) that comes while the server is still
// starting (installing or starting dynalite, making the tables) stops it,
// as one after it has started does: it is not a failure. It used to end
// with exit status 1 and an ERROR line, "dynalite at ... not ready:
// context canceled", which reads as if dynalite had failed to start.
func TestSignalDuringStartUpIsNoFailure(t *testing.T) {
	env := map[string]string{"CHECKOUT_ADDR": "127.0.0.1:0", "CHECKOUT_ADMIN_KEY": "ck_signal-during-start-up"}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the signal came as the server was starting
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	if err := run(ctx, func(k string) string { return env[k] }, log); err != nil {
		t.Fatalf("run stopped by a signal during start-up: %v (main exits 1 with it); want nil, exit 0\n%s", err, logs.String())
	}
	if strings.Contains(logs.String(), `"level":"ERROR"`) {
		t.Errorf("a stop during start-up is logged as an error:\n%s", logs.String())
	}
}
