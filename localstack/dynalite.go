package localstack

import (
	"bytes"
	"context"
	"errors"
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
	"sync"
	"time"
)

// EnvEndpoint names the variable that points every caller at an existing
// DynamoDB-compatible endpoint instead of starting one.
const EnvEndpoint = "DYNAMODB_ENDPOINT"

// EnvDir names the variable that overrides where the localstack directory
// (the one holding package.json for dynalite) is found.
const EnvDir = "CHECKOUT_LOCALSTACK_DIR"

// EnvIndexLag names the variable that gives every dynalite started without
// an explicit Options.IndexLag its default index lag ("500ms", "2s").
const EnvIndexLag = "DYNALITE_INDEX_LAG"

// Module is the module path whose go.mod marks the repository root.
const Module = "github.com/checkout-dev/checkout"

// startTimeout bounds Start when its context has no deadline. It covers a
// first `npm ci` as well as the server's own start (about 0.2 s).
const startTimeout = 2 * time.Minute

// Options configure Start.
type Options struct {
	// Path is the LevelDB directory that keeps the data on disk; it is
	// created if missing (see CheckDataDir). Empty means in memory.
	Path string
	// Port to listen on at 127.0.0.1; 0 picks a free one.
	Port int
	// Dir is the localstack directory holding dynalite's package.json;
	// empty means FindDir.
	Dir string
	// Log receives the server's stdout and stderr; nil discards them. The
	// last few kilobytes are kept either way and quoted when startup fails.
	Log io.Writer
	// IndexLag is how far every table's global secondary indexes trail its
	// writes unless SetIndexLag says otherwise for that table. Zero leaves
	// the server's default, $DYNALITE_INDEX_LAG or else none; a negative
	// value means none even when that variable is set. It is rounded to
	// whole milliseconds.
	IndexLag time.Duration
}

// Dynalite is a running dynalite server.
type Dynalite struct {
	// Endpoint is the base URL of the server, "http://127.0.0.1:N".
	Endpoint string
	// Port is the TCP port it listens on.
	Port int

	cmd      *exec.Cmd
	out      *tail
	done     chan struct{} // closed when the process has exited
	waitErr  error         // set before done is closed
	stopOnce sync.Once
	stopErr  error
}

// Endpoint returns the DynamoDB endpoint to use: DYNAMODB_ENDPOINT and a
// no-op stop when it is set, otherwise a fresh in-memory dynalite and the
// function that stops it.
func Endpoint(ctx context.Context) (endpoint string, stop func(), err error) {
	if e := os.Getenv(EnvEndpoint); e != "" {
		return e, func() {}, nil
	}
	d, err := Start(ctx, Options{})
	if err != nil {
		return "", nil, err
	}
	return d.Endpoint, func() { _ = d.Stop() }, nil
}

// MustEndpoint is Endpoint for TestMain and small programs: it panics when no
// endpoint can be had. Call stop before os.Exit.
func MustEndpoint() (endpoint string, stop func()) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	endpoint, stop, err := Endpoint(ctx)
	if err != nil {
		panic(fmt.Sprintf("localstack: no DynamoDB endpoint (set %s or install Node.js 20+): %v", EnvEndpoint, err))
	}
	return endpoint, stop
}

// Start installs dynalite if needed and starts it, returning once it answers
// ListTables. The server dies with the calling process; Stop ends it sooner.
func Start(ctx context.Context, opts Options) (*Dynalite, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, startTimeout)
		defer cancel()
	}
	dir := opts.Dir
	if dir == "" {
		var err error
		if dir, err = FindDir(); err != nil {
			return nil, err
		}
	}
	if err := Install(ctx, dir); err != nil {
		return nil, err
	}
	if opts.Path != "" {
		p, err := filepath.Abs(opts.Path)
		if err != nil {
			return nil, fmt.Errorf("localstack: data path: %w", err)
		}
		if err := CheckDataDirContext(ctx, p); err != nil {
			return nil, fmt.Errorf("localstack: data directory %w", err)
		}
		opts.Path = p
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, fmt.Errorf("localstack: Node.js 20 or later is needed to run dynalite: %w", err)
	}

	// A free port found by listening on :0 may be taken by someone else
	// before dynalite binds it; when the port was ours to choose, try again.
	attempts := 1
	if opts.Port == 0 {
		attempts = 5
	}
	var lastErr error
	for range attempts {
		port := opts.Port
		if port == 0 {
			if port, err = freePort(); err != nil {
				return nil, err
			}
		}
		d, err := launch(ctx, node, dir, port, opts)
		if err == nil {
			return d, nil
		}
		if opts.Path != "" && errors.Is(err, errExited) {
			// Another process took the directory since the check (LevelDB
			// then fails with a stack trace that does not say so).
			if derr := CheckDataDirContext(ctx, opts.Path); derr != nil {
				return nil, fmt.Errorf("localstack: data directory %w", derr)
			}
		}
		lastErr = err
		if ctx.Err() != nil || !errors.Is(err, errExited) {
			break
		}
	}
	return nil, lastErr
}

var errExited = errors.New("dynalite exited during startup")

func launch(ctx context.Context, node, dir string, port int, opts Options) (*Dynalite, error) {
	args := []string{
		"server.js", // dynalite's cli.js with the shim, made to survive clients that hang up mid-request
		"--host", "127.0.0.1",
		"--port", strconv.Itoa(port),
		"--createTableMs", "0",
		"--deleteTableMs", "0",
		"--updateTableMs", "0",
	}
	if opts.Path != "" {
		args = append(args, "--path", opts.Path)
	}
	if opts.IndexLag != 0 {
		args = append(args, "--index-lag", strconv.FormatInt(max(opts.IndexLag, 0).Milliseconds(), 10)+"ms")
	}
	d := &Dynalite{
		Endpoint: "http://127.0.0.1:" + strconv.Itoa(port),
		Port:     port,
		out:      &tail{max: 8 << 10},
		done:     make(chan struct{}),
	}
	var w io.Writer = d.out
	if opts.Log != nil {
		w = io.MultiWriter(d.out, opts.Log)
	}
	cmd := exec.Command(node, args...)
	cmd.Dir = dir
	cmd.Stdout = w
	cmd.Stderr = w
	cmd.SysProcAttr = sysProcAttr()
	d.cmd = cmd

	// The parent-death signal is tied to the OS thread that forked the
	// child, so that thread stays locked and alive for the child's lifetime.
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			close(d.done)
			return
		}
		started <- nil
		d.waitErr = cmd.Wait()
		close(d.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("localstack: start dynalite: %w", err)
	}

	if err := d.waitReady(ctx); err != nil {
		_ = d.Stop()
		return nil, err
	}
	return d, nil
}

// waitReady polls until the server accepts TCP and answers ListTables, the
// process exits, or ctx ends.
func (d *Dynalite) waitReady(ctx context.Context) error {
	// A probe in flight is cut short when the process exits.
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-d.done:
			cancel()
		case <-pctx.Done():
		}
	}()
	client := &http.Client{Timeout: 2 * time.Second}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := probe(pctx, client, d.Endpoint)
		if err == nil {
			return nil
		}
		select {
		case <-d.done:
			return fmt.Errorf("localstack: %w (%w): %s", errExited, d.waitErr, d.out.String())
		default:
		}
		select {
		case <-d.done: // exit wins over a deadline that fired at the same moment
			return fmt.Errorf("localstack: %w (%w): %s", errExited, d.waitErr, d.out.String())
		case <-ctx.Done():
			return fmt.Errorf("localstack: dynalite at %s not ready: %w (last: %w): %s", d.Endpoint, ctx.Err(), err, d.out.String())
		case <-tick.C:
		}
	}
}

// probe sends one ListTables request. dynalite checks that a request looks
// signed but not the signature, so a fixed header does.
func probe(ctx context.Context, client *http.Client, endpoint string) error {
	addr := strings.TrimPrefix(endpoint, "http://")
	c, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	_ = c.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint+"/", strings.NewReader(`{"Limit":1}`))
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	req.Header.Set("X-Amz-Target", "DynamoDB_20120810.ListTables")
	req.Header.Set("X-Amz-Date", now.Format("20060102T150405Z"))
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=local/"+now.Format("20060102")+
		"/us-east-1/dynamodb/aws4_request, SignedHeaders=host;x-amz-date;x-amz-target, Signature=0")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"TableNames"`)) {
		return fmt.Errorf("ListTables: %s: %s", resp.Status, body)
	}
	return nil
}

// Done is closed when the server process has exited.
func (d *Dynalite) Done() <-chan struct{} { return d.done }

// Pid is the server process's id (it leads its own process group).
func (d *Dynalite) Pid() int { return d.cmd.Process.Pid }

// Err waits for the process to exit and reports why (nil for a clean exit).
func (d *Dynalite) Err() error {
	<-d.done
	return d.waitErr
}

// StopGrace is how long Stop waits for the server to exit after SIGTERM
// before it kills it (SIGKILL).
const StopGrace = 5 * time.Second

// ErrKilled is what Stop reports when the server did not exit within
// StopGrace of SIGTERM and was killed.
var ErrKilled = errors.New("dynalite did not stop within 5s of SIGTERM: killed it (SIGKILL)")

// Stop ends the server's process group and waits for it to exit: SIGTERM,
// then SIGKILL if it has not exited StopGrace later (ErrKilled). It is
// safe to call more than once and from several goroutines.
func (d *Dynalite) Stop() error {
	d.stopOnce.Do(func() {
		select {
		case <-d.done:
			// Exited on its own before Stop: report why.
			if d.waitErr != nil {
				d.stopErr = fmt.Errorf("localstack: dynalite had exited: %w: %s", d.waitErr, d.out.String())
			}
			return
		default:
		}
		terminate(d.cmd, false)
		select {
		case <-d.done:
		case <-time.After(StopGrace):
			terminate(d.cmd, true)
			<-d.done
			d.stopErr = fmt.Errorf("localstack: %w (pid %d)", ErrKilled, d.Pid())
		}
	})
	return d.stopErr
}

// freePort asks the kernel for a free port on 127.0.0.1.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("localstack: find a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("localstack: find a free port: %w", err)
	}
	return port, nil
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}
