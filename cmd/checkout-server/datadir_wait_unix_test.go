//go:build unix

package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A Ctrl-C that comes while the server waits for a data directory another
// process holds (it gives a holder on its way out 2 s to let go) stops it
// at once, as one during the rest of the start-up does: no failure, and no
// wait for the 2 s to end. It used to be heard only once the wait was
// over, and the server then exited 1, "in use by another process".
func TestSignalDuringTheDataDirWaitStopsAtOnce(t *testing.T) {
	dir := t.TempDir()
	// Held as another server holds it: an exclusive flock on its lock file,
	// naming its pid.
	f, err := os.OpenFile(filepath.Join(dir, ".checkout-server.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(strconv.Itoa(os.Getpid()) + "\n"); err != nil {
		t.Fatal(err)
	}

	env := map[string]string{"CHECKOUT_ADDR": "127.0.0.1:0", "CHECKOUT_ADMIN_KEY": "ck_signal-during-dir-wait", "CHECKOUT_DATA_DIR": dir}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const signalAfter = 200 * time.Millisecond
	time.AfterFunc(signalAfter, cancel) // the signal comes during the wait
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	began := time.Now()
	err = run(ctx, func(k string) string { return env[k] }, log)
	took := time.Since(began)
	if err != nil {
		t.Fatalf("run stopped by a signal during the data directory's wait: %v after %v; want nil, exit 0\n%s", err, took, logs.String())
	}
	if took > signalAfter+time.Second {
		t.Errorf("run returned %v after it began, %v after the signal; want at once", took, took-signalAfter)
	}
	if strings.Contains(logs.String(), "dynalite started") {
		t.Errorf("dynalite started on a directory another process holds:\n%s", logs.String())
	}
}
