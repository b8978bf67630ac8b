package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testenv"
)

// serve starts the built server with env added to this environment and
// returns once it listens, with its URL; the server is killed at the end of
// the test.
func serve(t *testing.T, env ...string) string {
	t.Helper()
	bin := testenv.Binary(t, "github.com/checkout-dev/checkout/cmd/checkout-server")
	cmd := exec.Command(bin)
	cmd.Env = append(append(os.Environ(), "CHECKOUT_ADDR=127.0.0.1:0", "DYNAMODB_ENDPOINT="), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == "checkout server listening" {
				url <- m["url"].(string)
			}
		}
		close(url)
	}()
	select {
	case u, ok := <-url:
		if !ok {
			t.Fatal("the server exited before listening")
		}
		return u
	case <-time.After(2 * time.Minute):
		t.Fatal("the server did not start")
	}
	return ""
}

// refused runs the built server with env and wants it to exit 1 at once,
// with one log line that says each of want.
func refused(t *testing.T, env []string, want ...string) {
	t.Helper()
	bin := testenv.Binary(t, "github.com/checkout-dev/checkout/cmd/checkout-server")
	cmd := exec.Command(bin)
	cmd.Env = append(append(os.Environ(), "CHECKOUT_ADDR=127.0.0.1:0", "DYNAMODB_ENDPOINT="), env...)
	began := time.Now()
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("%v: %v, want exit status 1; output %s", env, err, out)
	}
	text := strings.TrimSpace(string(out))
	if strings.Contains(text, "\n") || strings.Contains(text, "dynalite started") {
		t.Errorf("%v: output %s; want one line and nothing started", env, out)
	}
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("%v: output %s; want it to say %q", env, out, w)
		}
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("%v: refused after %v", env, took)
	}
}

// A CHECKOUT_DATA_DIR that cannot be used stops the server at once, in one
// line naming the variable, the directory and what is wrong (it was a
// stack trace of dynalite's that said none of it, or a two-minute wait).
func TestUnusableDataDirStopsTheServer(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	refused(t, []string{"CHECKOUT_DATA_DIR=" + file}, "CHECKOUT_DATA_DIR "+file+" is not a directory")
	refused(t, []string{"CHECKOUT_DATA_DIR=" + file + "/db"}, "CHECKOUT_DATA_DIR "+file+"/db cannot be created")

	// A second `make run` on the same directory.
	dir := filepath.Join(t.TempDir(), "data")
	serve(t, "CHECKOUT_DATA_DIR="+dir)
	refused(t, []string{"CHECKOUT_DATA_DIR=" + dir}, "CHECKOUT_DATA_DIR "+dir+" is in use by another process")
}
