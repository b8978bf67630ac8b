package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
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

func TestConfigFrom(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"CHECKOUT_ADDR": "127.0.0.1:4000", "DYNAMODB_ENDPOINT": "http://127.0.0.1:8000",
		"CHECKOUT_TABLE_PREFIX": "dev-", "CHECKOUT_ADMIN_KEY": "ck_admin",
		"CHECKOUT_SWEEP_INTERVAL": "2s", "CHECKOUT_AUTO_CREATE_TASKS": "true",
		"CHECKOUT_DATA_DIR": "/var/lib/checkout",
	}
	cfg, err := configFrom(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Addr != "127.0.0.1:4000" || cfg.DynamoEndpoint != "http://127.0.0.1:8000" || cfg.TablePrefix != "dev-" ||
		cfg.AdminKey != "ck_admin" || cfg.SweepInterval != 2*time.Second || !cfg.AutoCreateTasks ||
		cfg.DataDir != "/var/lib/checkout" {
		t.Fatalf("%+v", cfg)
	}
	for k, v := range map[string]string{
		"CHECKOUT_SWEEP_INTERVAL": "soon", "CHECKOUT_AUTO_CREATE_TASKS": "maybe",
	} {
		bad := map[string]string{k: v}
		if _, err := configFrom(func(k string) string { return bad[k] }); err == nil || !strings.Contains(err.Error(), k) {
			t.Fatalf("%s=%s: %v", k, v, err)
		}
	}
	if _, err := configFrom(func(k string) string { return map[string]string{"CHECKOUT_SWEEP_INTERVAL": "-1s"}[k] }); err == nil {
		t.Fatal("negative interval accepted")
	}
}

// The built command starts its own dynalite, serves, and on SIGINT stops
// both and exits 0.
func TestServeAndShutDown(t *testing.T) {
	bin := testenv.Binary(t, "github.com/checkout-dev/checkout/cmd/checkout-server")
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "CHECKOUT_ADDR=127.0.0.1:0", "DYNAMODB_ENDPOINT=", "CHECKOUT_ADMIN_KEY=",
		"CHECKOUT_DATA_DIR="+filepath.Join(t.TempDir(), "data"))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()

	lines := make(chan map[string]any, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) != nil {
				t.Errorf("log line is not JSON: %q", sc.Text())
				continue
			}
			lines <- m
		}
	}()
	var url, dynamo, key string
	timeout := time.After(2 * time.Minute)
	for url == "" {
		select {
		case m, ok := <-lines:
			if !ok {
				t.Fatal("the server exited before listening")
			}
			switch m["msg"] {
			case "dynalite started":
				dynamo = m["endpoint"].(string)
			case "checkout server listening":
				url = m["url"].(string)
				key, _ = m["admin_key"].(string)
			}
		case <-timeout:
			t.Fatal("the server did not start")
		}
	}
	if dynamo == "" || !strings.HasPrefix(key, "ck_") {
		t.Fatalf("dynalite %q, generated admin key %q", dynamo, key)
	}
	req, _ := http.NewRequest("GET", url+"/api/agents", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /api/agents with the logged admin key: %d", resp.StatusCode)
	}

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for range lines {
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v", err)
	}
	addr := strings.TrimPrefix(dynamo, "http://")
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatalf("dynalite still listening on %s after shutdown", addr)
	}
	if c, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "http://"), time.Second); err == nil {
		c.Close()
		t.Fatal("server still listening after shutdown")
	}
}

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
