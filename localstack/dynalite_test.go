package localstack

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func client(endpoint string) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		BaseEndpoint: aws.String(endpoint),
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("local", "local", ""),
	})
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func start(t *testing.T, opts Options) *Dynalite {
	t.Helper()
	d, err := Start(ctxT(t), opts)
	if err != nil {
		t.Fatalf("Start(%+v): %v", opts, err)
	}
	t.Cleanup(func() { _ = d.Stop() })
	return d
}

func listTables(t *testing.T, endpoint string) []string {
	t.Helper()
	out, err := client(endpoint).ListTables(ctxT(t), &dynamodb.ListTablesInput{})
	if err != nil {
		t.Fatalf("ListTables at %s: %v", endpoint, err)
	}
	return out.TableNames
}

func TestStartInMemoryAnswersAndStops(t *testing.T) {
	t.Parallel()
	d := start(t, Options{})
	if want := "http://127.0.0.1:" + strconv.Itoa(d.Port); d.Endpoint != want {
		t.Fatalf("Endpoint = %q, want %q", d.Endpoint, want)
	}
	if got := listTables(t, d.Endpoint); len(got) != 0 {
		t.Fatalf("fresh in-memory server has tables %v", got)
	}
	if err := d.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	select {
	case <-d.Done():
	default:
		t.Fatal("Stop returned before the process exited")
	}
	if c, err := net.DialTimeout("tcp", strings.TrimPrefix(d.Endpoint, "http://"), time.Second); err == nil {
		_ = c.Close()
		t.Fatal("port still accepts connections after Stop")
	}
	if err := d.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

func TestInMemoryServersAreIndependent(t *testing.T) {
	t.Parallel()
	a, b := start(t, Options{}), start(t, Options{})
	if a.Port == b.Port {
		t.Fatalf("two servers on one port %d", a.Port)
	}
	createTable(t, a.Endpoint, "only-in-a")
	if got := listTables(t, b.Endpoint); len(got) != 0 {
		t.Fatalf("second server sees tables %v", got)
	}
}

func createTable(t *testing.T, endpoint, name string) {
	t.Helper()
	_, err := client(endpoint).CreateTable(ctxT(t), &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
	})
	if err != nil {
		t.Fatalf("CreateTable %s: %v", name, err)
	}
	// Even with --createTableMs 0, dynalite marks a table ACTIVE a moment
	// after CreateTable returns, as DynamoDB does much later.
	w := dynamodb.NewTableExistsWaiter(client(endpoint), func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 10*time.Millisecond, 100*time.Millisecond
	})
	if err := w.Wait(ctxT(t), &dynamodb.DescribeTableInput{TableName: aws.String(name)}, 10*time.Second); err != nil {
		t.Fatalf("table %s not ACTIVE: %v", name, err)
	}
}

func TestStartOnDiskKeepsDataAcrossRestarts(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "db")
	d := start(t, Options{Path: path})
	createTable(t, d.Endpoint, "kept")
	_, err := client(d.Endpoint).PutItem(ctxT(t), &dynamodb.PutItemInput{
		TableName: aws.String("kept"),
		Item:      map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "k1"}},
	})
	if err != nil {
		t.Fatalf("PutItem: %v", err)
	}
	if err := d.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}

	d2 := start(t, Options{Path: path})
	if got := listTables(t, d2.Endpoint); !slices.Equal(got, []string{"kept"}) {
		t.Fatalf("after restart tables = %v, want [kept]", got)
	}
	got, err := client(d2.Endpoint).GetItem(ctxT(t), &dynamodb.GetItemInput{
		TableName: aws.String("kept"),
		Key:       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "k1"}},
	})
	if err != nil || got.Item == nil {
		t.Fatalf("after restart GetItem = %v, %v; want the item", got, err)
	}
}

func TestStartOnTakenPortFails(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	d, err := Start(ctxT(t), Options{Port: port})
	if err == nil {
		_ = d.Stop()
		t.Fatalf("Start on taken port %d succeeded", port)
	}
	if !errors.Is(err, errExited) {
		t.Fatalf("Start on taken port: %v, want errExited", err)
	}
}

func TestStartWithFixedPort(t *testing.T) {
	t.Parallel()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	d := start(t, Options{Port: port})
	if d.Port != port || d.Endpoint != fmt.Sprintf("http://127.0.0.1:%d", port) {
		t.Fatalf("got port %d endpoint %s, want %d", d.Port, d.Endpoint, port)
	}
	listTables(t, d.Endpoint)
}

func TestEndpointHonoursEnvironment(t *testing.T) {
	t.Setenv(EnvEndpoint, "http://127.0.0.1:1")
	t.Setenv(EnvDir, t.TempDir()) // no dynalite here: starting one would fail
	ep, stop, err := Endpoint(ctxT(t))
	if err != nil {
		t.Fatalf("Endpoint: %v", err)
	}
	stop()
	if ep != "http://127.0.0.1:1" {
		t.Fatalf("Endpoint = %q, want the environment's", ep)
	}
	ep, stop = MustEndpoint()
	stop()
	if ep != "http://127.0.0.1:1" {
		t.Fatalf("MustEndpoint = %q, want the environment's", ep)
	}
}

func TestEndpointStartsWhenUnset(t *testing.T) {
	t.Setenv(EnvEndpoint, "")
	ep, stop, err := Endpoint(ctxT(t))
	if err != nil {
		t.Fatalf("Endpoint: %v", err)
	}
	listTables(t, ep)
	stop()
	if c, err := net.DialTimeout("tcp", strings.TrimPrefix(ep, "http://"), time.Second); err == nil {
		_ = c.Close()
		t.Fatal("server still up after stop")
	}
}

func TestFindDir(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	got, err := FindDir()
	if err != nil || got != wd {
		t.Fatalf("FindDir() = %q, %v; want %q", got, err, wd)
	}

	t.Setenv(EnvDir, t.TempDir())
	if got, err := FindDir(); err == nil {
		t.Fatalf("FindDir with %s pointing at an empty dir = %q, want an error", EnvDir, got)
	}
	t.Setenv(EnvDir, ".")
	if got, err := FindDir(); err != nil || got != wd {
		t.Fatalf("FindDir with %s=. = %q, %v; want %q", EnvDir, got, err, wd)
	}
}

// TestInstallRunsNpmOnceUnderConcurrency stands in a fake npm that counts its
// runs and takes a while, and calls Install from many goroutines at once.
func TestInstallRunsNpmOnceUnderConcurrency(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("install lock is Unix-only")
	}
	bin, dir := t.TempDir(), t.TempDir()
	count := filepath.Join(t.TempDir(), "count")
	fake := `#!/bin/sh
[ "$1" = ci ] || exit 3
echo run >> "` + count + `"
sleep 0.3
mkdir -p node_modules/dynalite && : > node_modules/dynalite/cli.js && : > node_modules/.package-lock.json
`
	if err := os.WriteFile(filepath.Join(bin, "npm"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "package-lock.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "package-lock.json"), old, old); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))

	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() { errs <- Install(ctxT(t), dir) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Install: %v", err)
		}
	}
	if runs := countLines(t, count); runs != 1 {
		t.Fatalf("npm ci ran %d times, want 1", runs)
	}

	// A lockfile newer than the install means the install is stale.
	if err := os.Chtimes(filepath.Join(dir, "package-lock.json"), time.Now().Add(time.Hour), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if Installed(dir) {
		t.Fatal("Installed with a lockfile newer than node_modules")
	}
	if err := Install(ctxT(t), dir); err == nil {
		// The fake's fresh hidden lockfile is still older than the future
		// lockfile, so Install must report that the install did not take.
		t.Fatal("Install succeeded although node_modules stays stale")
	}
	if runs := countLines(t, count); runs != 2 {
		t.Fatalf("npm ci ran %d times, want 2", runs)
	}
}

func countLines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// TestServerDiesWithParent runs this test binary as a parent that starts a
// server and prints its pid, kills that parent with SIGKILL, and checks the
// server goes too.
func TestServerDiesWithParent(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("parent-death signal is Linux-only")
	}
	if os.Getenv("LOCALSTACK_TEST_PARENT") == "1" {
		d, err := Start(context.Background(), Options{})
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println("pid", d.cmd.Process.Pid)
		select {} // wait to be killed
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestServerDiesWithParent$")
	cmd.Env = append(os.Environ(), "LOCALSTACK_TEST_PARENT=1", EnvEndpoint+"=")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("reading child pid: %v (%q)", err, line)
	}
	var pid int
	if _, err := fmt.Sscanf(line, "pid %d", &pid); err != nil {
		t.Fatalf("parent said %q", line)
	}
	if !alive(pid) {
		t.Fatalf("server %d not running while its parent lives", pid)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("server %d still running 10s after its parent was killed", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// alive reports whether pid exists and is not a zombie waiting to be reaped.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// A client that hangs up in the middle of a request must not take the
// server down: dynalite on its own exits with "aborted" (ECONNRESET), which
// ends every test sharing it.
func TestServerSurvivesRequestsCutShort(t *testing.T) {
	t.Parallel()
	d := start(t, Options{})
	for range 5 {
		conn, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(d.Port))
		if err != nil {
			t.Fatal(err)
		}
		_, err = conn.Write([]byte("POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-amz-json-1.0\r\n" +
			"X-Amz-Target: DynamoDB_20120810.ListTables\r\nContent-Length: 1000\r\n\r\n{\"Lim"))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // let the server start reading the body
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // reset, as a cut connection does
		}
		_ = conn.Close()
	}
	select {
	case <-d.Done():
		t.Fatal("dynalite exited after a client hung up mid-request")
	case <-time.After(200 * time.Millisecond):
	}
	listTables(t, d.Endpoint)
}
