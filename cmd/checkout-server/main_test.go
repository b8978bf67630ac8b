package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease/schema"
)

func TestConfigFrom(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"CHECKOUT_ADDR": "127.0.0.1:4000", "DYNAMODB_ENDPOINT": "http://127.0.0.1:8000",
		"CHECKOUT_TABLE_PREFIX": "dev-", "CHECKOUT_ADMIN_KEY": "ck_admin_0123456789",
		"CHECKOUT_SWEEP_INTERVAL": "2s", "CHECKOUT_AUTO_CREATE_TASKS": "true",
		"CHECKOUT_DATA_DIR":     "/var/lib/checkout",
		"CHECKOUT_LEASE_SHARDS": "32", "CHECKOUT_STATUS_SHARDS": "20", "CHECKOUT_CLAIM_SHARDS": "8", "CHECKOUT_FEED_SHARDS": "64",
	}
	cfg, err := configFrom(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Addr != "127.0.0.1:4000" || cfg.DynamoEndpoint != "http://127.0.0.1:8000" || cfg.TablePrefix != "dev-" ||
		cfg.AdminKey != "ck_admin_0123456789" || cfg.SweepInterval != 2*time.Second || !cfg.AutoCreateTasks ||
		cfg.DataDir != "/var/lib/checkout" || cfg.Shards != (schema.ShardCounts{Lease: 32, Status: 20, Claim: 8, Feed: 64}) {
		t.Fatalf("%+v", cfg)
	}
	if cfg, err := configFrom(func(string) string { return "" }); err != nil || cfg.Shards != schema.DefaultShards() {
		t.Fatalf("no shard variables: %+v, %v; want the defaults", cfg.Shards, err)
	}
	for k, v := range map[string]string{
		"CHECKOUT_SWEEP_INTERVAL": "soon", "CHECKOUT_AUTO_CREATE_TASKS": "maybe",
		"CHECKOUT_LEASE_SHARDS": "0", "CHECKOUT_STATUS_SHARDS": "21", "CHECKOUT_CLAIM_SHARDS": "17", "CHECKOUT_FEED_SHARDS": "lots",
	} {
		t.Run(k+"="+v+" is refused, naming the variable", func(t *testing.T) {
			bad := map[string]string{k: v}
			if _, err := configFrom(func(k string) string { return bad[k] }); err == nil || !strings.Contains(err.Error(), k) {
				t.Fatalf("%s=%s: %v", k, v, err)
			}
		})
	}
	// An admin key the store would refuse, or that cannot be sent as a
	// bearer token, is refused at start, naming the variable and not the
	// secret (it used to stop the server after dynalite had started, as
	// "admin agent: lease: api key must be at least 16 characters").
	for _, key := range []string{"short", "fifteen-chars-x", "has a space in it, long", "tab\tinside-0123456789", "naïve-key-0123456789"} {
		_, err := configFrom(func(k string) string { return map[string]string{"CHECKOUT_ADMIN_KEY": key}[k] })
		if err == nil || !strings.HasPrefix(err.Error(), "CHECKOUT_ADMIN_KEY: ") || strings.Contains(err.Error(), key) {
			t.Errorf("admin key %q: %v; want refused, naming the variable but not the key", key, err)
		}
	}
	if _, err := configFrom(func(k string) string { return map[string]string{"CHECKOUT_ADMIN_KEY": "sixteen-chars-ok"}[k] }); err != nil {
		t.Errorf("a 16-character key: %v", err)
	}
	if _, err := configFrom(func(k string) string { return map[string]string{"CHECKOUT_SWEEP_INTERVAL": "-1s"}[k] }); err == nil {
		t.Fatal("negative interval accepted")
	}
}

// A shard count out of bounds stops the built server at start, with exit
// status 1 and a log line that names the variable, before it starts
// dynalite or serves.
func TestBadShardCountStopsTheServer(t *testing.T) {
	bin := testenv.Binary(t, "github.com/checkout-dev/checkout/cmd/checkout-server")
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "CHECKOUT_ADDR=127.0.0.1:0", "DYNAMODB_ENDPOINT=", "CHECKOUT_CLAIM_SHARDS=64")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("%v, want exit status 1; output %s", err, out)
	}
	if !strings.Contains(string(out), "CHECKOUT_CLAIM_SHARDS") || strings.Contains(string(out), "dynalite started") {
		t.Fatalf("output %s: want the refusal, naming the variable, and nothing started", out)
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

// A second SIGINT or SIGTERM stops the server at once, while the first
// waits for the requests in flight (a create still sending its body): it
// used to be swallowed, so an impatient Ctrl-C did nothing until the last
// request was answered.
func TestSecondSignalStopsAtOnce(t *testing.T) {
	bin := testenv.Binary(t, "github.com/checkout-dev/checkout/cmd/checkout-server")
	key := "ck_second-signal-test-key"
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "CHECKOUT_ADDR=127.0.0.1:0", "DYNAMODB_ENDPOINT=", "CHECKOUT_DATA_DIR=", "CHECKOUT_ADMIN_KEY="+key)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	exited := make(chan struct{})
	urls := make(chan string, 1)
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == "checkout server listening" {
				urls <- m["url"].(string)
			}
		}
		_ = cmd.Wait()
	}()
	var url string
	select {
	case url = <-urls:
	case <-exited:
		t.Fatal("the server exited before listening")
	case <-time.After(time.Minute):
		t.Fatal("the server did not start")
	}

	// A request in flight: a create whose body is still on its way (the
	// handler has begun and is reading it). A claim that waits would not
	// do: a stop answers waiting claims at once.
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "POST /api/tasks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{", key); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // for the server to read the headers
	dynalite := dynaliteChild(t, cmd.Process.Pid)

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		t.Fatal("the server stopped at the first signal with a request in flight; want it to wait for the request")
	case <-time.After(time.Second):
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Fatal("a second SIGTERM did not stop the server")
	}
	if runtime.GOOS == "linux" {
		if dynalite == 0 {
			t.Fatal("no dynalite child found")
		}
		for deadline := time.Now().Add(5 * time.Second); syscall.Kill(dynalite, 0) == nil; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("dynalite (pid %d) outlived the server", dynalite)
			}
		}
	}
}
