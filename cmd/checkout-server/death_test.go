package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testenv"
)

// dynaliteChild is the pid of the dynalite (node server.js) that the server
// process pid runs, read from /proc (Linux), or 0.
func dynaliteChild(t *testing.T, pid int) int {
	t.Helper()
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, c := range strings.Fields(string(b)) {
			cmdline, _ := os.ReadFile("/proc/" + c + "/cmdline")
			if strings.Contains(string(cmdline), "server.js") {
				n, _ := strconv.Atoi(c)
				return n
			}
		}
	}
	return 0
}

// The built command with CHECKOUT_DATA_DIR: its dynalite is killed (SIGKILL)
// while it serves. The server does not exit. Until the database is back,
// every answer is 503 unavailable with Retry-After, or 200, never a 500,
// and /healthz is 503 {"ok":false} or 200. It restarts dynalite by itself,
// with the data on disk intact, and serves again.
func TestSurvivesDynaliteDeath(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("finds the dynalite child through /proc")
	}
	bin := testenv.Binary(t, "github.com/checkout-dev/checkout/cmd/checkout-server")
	addr := testenv.FreeAddr(t)
	key := "ck_admin-key-for-the-death-test"
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "CHECKOUT_ADDR="+addr, "DYNAMODB_ENDPOINT=", "CHECKOUT_ADMIN_KEY="+key,
		"CHECKOUT_SWEEP_INTERVAL=100ms", "CHECKOUT_DATA_DIR="+filepath.Join(t.TempDir(), "data"))
	var logs testenv.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
		}
	}()

	base := "http://" + addr
	hc := &http.Client{Timeout: 20 * time.Second}
	do := func(method, path, body string) (int, http.Header, map[string]any) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := hc.Do(req)
		if err != nil {
			return 0, nil, nil
		}
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, resp.Header, m
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if st, _, _ := do("GET", "/healthz", ""); st == 200 {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("the server exited before serving: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server did not start:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st, _, b := do("POST", "/api/tasks", `{"task_id":"kept","title":"on disk"}`); st != 201 {
		t.Fatalf("create: %d %v", st, b)
	}
	old := dynaliteChild(t, cmd.Process.Pid)
	if old == 0 {
		t.Fatalf("no dynalite child of %d", cmd.Process.Pid)
	}
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	deadline = time.Now().Add(time.Minute)
	var seen []int
	for {
		select {
		case err := <-exited:
			t.Fatalf("the server exited when its dynalite died: %v\n%s", err, logs.String())
		default:
		}
		st, h, b := do("GET", "/api/tasks/kept", "")
		seen = append(seen, st)
		switch st {
		case 200:
		case 503:
			if b["code"] != "unavailable" || h.Get("Retry-After") == "" {
				t.Fatalf("503 without the contract's body or Retry-After: %v %v", h, b)
			}
		default:
			t.Fatalf("GET while dynalite is down: %d %v\n%s", st, b, logs.String())
		}
		hst, _, hb := do("GET", "/healthz", "")
		if !(hst == 200 && hb["ok"] == true) && !(hst == 503 && hb["ok"] == false) {
			t.Fatalf("healthz: %d %v", hst, hb)
		}
		if st == 200 {
			if n := dynaliteChild(t, cmd.Process.Pid); n != 0 && n != old {
				if b["title"] != "on disk" {
					t.Fatalf("the task came back as %v", b)
				}
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no recovery; answers %v\n%s", seen, logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("answers while dynalite was restarted: %v", seen)
	if st, _, b := do("POST", "/api/tasks/kept/checkout", ""); st != 200 {
		t.Fatalf("checkout after recovery: %d %v", st, b)
	}
}
