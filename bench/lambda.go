package bench

import (
	"archive/zip"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
)

// Lambda is one function's package size and start-up time.
type Lambda struct {
	Name       string
	Bootstrap  int64         // linux/arm64 binary, bytes
	Zipped     int64         // the deployment zip, bytes
	Init       time.Duration // process start -> first call to /invocation/next (p50)
	FirstEvent time.Duration // process start -> first /response or /error (p50)
	Outcome    string        // "response" or "error" for the first event
	Runs       int
}

// buildFlags are those of `make build`.
var buildFlags = []string{"-tags", "lambda.norpc", "-trimpath", "-ldflags", "-s -w"}

// Functions lists the function commands under root/functions.
func Functions(root string) ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(root, "functions"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && e.Name() != "internal" {
			if _, err := os.Stat(filepath.Join(root, "functions", e.Name(), "main.go")); err == nil {
				out = append(out, e.Name())
			}
		}
	}
	return out, nil
}

func goBuild(ctx context.Context, root, goos, goarch, out, pkg string) error {
	args := append([]string{"build"}, buildFlags...)
	args = append(args, "-o", out, pkg)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s (%s/%s): %w\n%s", pkg, goos, goarch, err, b)
	}
	return nil
}

func zipSize(path string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, err := zw.CreateHeader(&zip.FileHeader{Name: "bootstrap", Method: zip.Deflate})
	if err != nil {
		return 0, err
	}
	if _, err := w.Write(data); err != nil {
		return 0, err
	}
	if err := zw.Close(); err != nil {
		return 0, err
	}
	return int64(buf.Len()), nil
}

// MeasureLambdas builds every function for linux/arm64 (size) and for the
// host (start-up), and runs each host build runs times against an emulated
// Lambda Runtime API.
func MeasureLambdas(ctx context.Context, root string, runs int) ([]Lambda, error) {
	names, err := Functions(root)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no functions under %s/functions", root)
	}
	dir, err := os.MkdirTemp("", "bench-lambda-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }() // a temporary directory
	var out []Lambda
	for _, name := range names {
		pkg := "./functions/" + name
		arm := filepath.Join(dir, name+"-arm64")
		if err := goBuild(ctx, root, "linux", "arm64", arm, pkg); err != nil {
			return nil, err
		}
		st, err := os.Stat(arm)
		if err != nil {
			return nil, err
		}
		z, err := zipSize(arm)
		if err != nil {
			return nil, err
		}
		host := filepath.Join(dir, name+"-host")
		if err := goBuild(ctx, root, runtime.GOOS, runtime.GOARCH, host, pkg); err != nil {
			return nil, err
		}
		l := Lambda{Name: name, Bootstrap: st.Size(), Zipped: z, Runs: runs}
		var inits, firsts []time.Duration
		for range runs {
			init, first, outcome, err := startOnce(ctx, host, eventFor(name))
			if err != nil {
				return nil, fmt.Errorf("start %s: %w", name, err)
			}
			inits, firsts = append(inits, init), append(firsts, first)
			l.Outcome = outcome
		}
		l.Init, l.FirstEvent = quantile(inits, 0.5), quantile(firsts, 0.5)
		out = append(out, l)
	}
	return out, nil
}

// eventFor is the first event each function gets: an HTTP API request for
// GET /healthz (route-group functions answer it, or 404 it, without a
// DynamoDB request), an authorizer request without a token, a schedule tick.
func eventFor(name string) []byte {
	switch name {
	case "authorizer":
		return []byte(`{"version":"2.0","type":"REQUEST","routeArn":"arn:aws:execute-api:us-east-1:000000000000:api/$default/GET/v1/tasks","identitySource":[],"routeKey":"GET /v1/tasks","rawPath":"/v1/tasks","headers":{},"requestContext":{"http":{"method":"GET","path":"/v1/tasks"}}}`)
	case "sweeper":
		return []byte(`{"version":"0","id":"bench","detail-type":"Scheduled Event","source":"aws.events","detail":{}}`)
	}
	return []byte(`{"version":"2.0","routeKey":"GET /healthz","rawPath":"/healthz","rawQueryString":"","headers":{"host":"bench"},"requestContext":{"http":{"method":"GET","path":"/healthz","protocol":"HTTP/1.1","sourceIp":"127.0.0.1"},"requestId":"bench","routeKey":"GET /healthz","stage":"$default"},"isBase64Encoded":false}`)
}

// startOnce starts the function binary against a one-event Runtime API and
// returns the time to its first /next call and to its first answer.
func startOnce(ctx context.Context, bin string, event []byte) (init, first time.Duration, outcome string, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, 0, "", err
	}
	var start time.Time
	var mu sync.Mutex
	nextSeen := make(chan time.Time, 1)
	answered := make(chan string, 1)
	served := false
	mux := http.NewServeMux()
	mux.HandleFunc("GET /2018-06-01/runtime/invocation/next", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		again := served
		served = true
		mu.Unlock()
		if again {
			<-r.Context().Done() // the function waits here until it is killed
			return
		}
		select {
		case nextSeen <- time.Now():
		default:
		}
		w.Header().Set("Lambda-Runtime-Aws-Request-Id", "bench-1")
		w.Header().Set("Lambda-Runtime-Deadline-Ms", fmt.Sprint(time.Now().Add(30*time.Second).UnixMilli()))
		w.Header().Set("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:us-east-1:000000000000:function:bench")
		w.Header().Set("Lambda-Runtime-Trace-Id", "Root=1-00000000-000000000000000000000000")
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(event)
	})
	answer := func(kind string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusAccepted)
			select {
			case answered <- kind:
			default:
			}
		}
	}
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/response", answer("response"))
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/error", answer("error"))
	mux.HandleFunc("POST /2018-06-01/runtime/init/error", answer("init error"))
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close() }()

	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, bin)
	cmd.Env = []string{
		"AWS_LAMBDA_RUNTIME_API=" + ln.Addr().String(),
		"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=bench", "AWS_SECRET_ACCESS_KEY=bench",
		"AWS_LAMBDA_FUNCTION_NAME=bench", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE=256", "AWS_LAMBDA_FUNCTION_VERSION=$LATEST",
		"CHECKOUT_TABLE_PREFIX=bench-", "LOG_LEVEL=ERROR",
		"_HANDLER=bootstrap", "TZ=UTC",
	}
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	start = time.Now()
	if err := cmd.Start(); err != nil {
		return 0, 0, "", err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		<-exited //nolint:errcheck // the exit status of a process killed on purpose says nothing
	}()
	select {
	case t := <-nextSeen:
		init = t.Sub(start)
	case err := <-exited:
		return 0, 0, "", fmt.Errorf("exited before asking for an event: %w: %s", err, strings.TrimSpace(stderr.String()))
	case <-cctx.Done():
		return 0, 0, "", fmt.Errorf("no /next call within 30s")
	}
	select {
	case outcome = <-answered:
		first = time.Since(start)
	case err := <-exited:
		return 0, 0, "", fmt.Errorf("exited before answering: %w: %s", err, strings.TrimSpace(stderr.String()))
	case <-cctx.Done():
		return 0, 0, "", fmt.Errorf("no answer within 30s")
	}
	return init, first, outcome, nil
}
