package main

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
)

// A listen address another process holds is refused at once, with the
// bind's own error and nothing started: the server used to start
// dynalite, make the tables, and only then fail to listen, so that the log
// showed dynalite started and stopped before the error that mattered.
func TestAddressInUseIsRefusedBeforeDynaliteStarts(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	env := map[string]string{"CHECKOUT_ADDR": taken.Addr().String(), "CHECKOUT_ADMIN_KEY": "ck_address-in-use-test"}
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	err = run(context.Background(), func(k string) string { return env[k] }, log)
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("run on an address in use: %v; want the bind's error, address already in use\n%s", err, logs.String())
	}
	if !strings.Contains(err.Error(), taken.Addr().String()) {
		t.Errorf("run on an address in use: %v; want it to name %s", err, taken.Addr())
	}
	if strings.Contains(logs.String(), "dynalite") {
		t.Errorf("dynalite was started and stopped before the address was found in use:\n%s", logs.String())
	}
}
