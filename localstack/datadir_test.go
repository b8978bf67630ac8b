package localstack

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// startFails starts dynalite on path and wants it refused at once, in one
// line naming the directory and saying what is wrong (it used to be a
// stack trace of dynalite's, "Iterator is not open", or a two-minute wait).
func startFails(t *testing.T, path string, want ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	began := time.Now()
	d, err := Start(ctx, Options{Path: path})
	if err == nil {
		_ = d.Stop()
		t.Fatalf("Start on %s: started", path)
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") || !strings.Contains(msg, "data directory "+path) {
		t.Errorf("Start on %s: %q; want one line naming the directory", path, msg)
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("Start on %s: %q; want it to say %q", path, msg, w)
		}
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("Start on %s took %v to fail", path, took)
	}
}

func TestStartRefusesAFileAsDataDir(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	startFails(t, file, "is not a directory")
	// Under a file, the directory cannot be made.
	startFails(t, filepath.Join(file, "db"), "cannot be created", "not a directory")
	// Nor in /proc (it used to wait two minutes for a dynalite that could
	// not open it).
	if _, err := os.Stat("/proc"); err == nil {
		startFails(t, "/proc/nope", "cannot be created")
	}
}

func TestStartRefusesAnUnwritableDataDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if os.Geteuid() == 0 {
		// root writes through modes; /sys refuses new files even to it.
		dir = "/sys"
	} else if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	if f, err := os.CreateTemp(dir, "probe-*"); err == nil {
		_ = f.Close()
		_ = os.Remove(f.Name())
		t.Skipf("%s is writable here", dir)
	}
	startFails(t, dir, "is not writable")
}

// A second dynalite (what a second server on the same CHECKOUT_DATA_DIR
// starts) is refused, naming the process that holds the directory; the
// first one is untouched. Once it stops, the directory is free again.
func TestStartRefusesADataDirInUse(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "db")
	first := start(t, Options{Path: path})
	createTable(t, first.Endpoint, "kept")
	startFails(t, path, "is in use by another process", "pid "+strconv.Itoa(first.Pid()))
	if got := listTables(t, first.Endpoint); len(got) != 1 {
		t.Fatalf("the first dynalite after the refusal: tables %v", got)
	}
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	second := start(t, Options{Path: path})
	if got := listTables(t, second.Endpoint); len(got) != 1 {
		t.Fatalf("after the first stopped: tables %v", got)
	}
}

// A missing data directory is created, parents and all.
func TestStartCreatesTheDataDir(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "a", "b")
	start(t, Options{Path: path})
	if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
		t.Fatalf("%s: %v", path, err)
	}
}
