package testenv

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Build builds the main package pkg (an import path, or a path relative to
// dir starting with ".") with go build and the given flags, in dir ("" for the test's own
// folder), and returns the binary's path. The binary is built once per
// `go test` run and shared by every test binary of that run: it lands in a
// folder under the system's temporary folder named after the run (the go
// command that started the test binaries), keyed by dir, pkg and flags.
// Folders of runs older than a day are removed. The build takes the
// environment's settings, as `make run` and `make install` build the CLI
// and the server, so it reuses what `go vet` and the linters compiled
// before the tests (a static build compiles the standard library and every
// module again: about 20 s of CPU a binary on a cold cache).
func Build(dir, pkg string, flags ...string) (string, error) {
	return buildOnce(dir, pkg, false, flags)
}

// BuildStatic is Build of a static binary (CGO_ENABLED=0), as `make build`
// and `make lambda-test` build the Lambda functions.
func BuildStatic(dir, pkg string, flags ...string) (string, error) {
	return buildOnce(dir, pkg, true, flags)
}

func buildOnce(dir, pkg string, static bool, flags []string) (string, error) {
	key := fmt.Sprint(static) + "\x00" + dir + "\x00" + pkg + "\x00" + strings.Join(flags, "\x00")
	builds.mu.Lock()
	b, ok := builds.m[key]
	if !ok {
		b = &build{}
		builds.m[key] = b
	}
	builds.mu.Unlock()
	b.once.Do(func() { b.path, b.err = goBuild(dir, pkg, key, static, flags) })
	return b.path, b.err
}

// Binary is Build of pkg (best an import path, which packages share) from
// the test's own folder, for a test: it fails the test when the build
// fails.
func Binary(t testing.TB, pkg string) string {
	t.Helper()
	path, err := Build("", pkg)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

type build struct {
	once sync.Once
	path string
	err  error
}

var builds = struct {
	mu sync.Mutex
	m  map[string]*build
}{m: map[string]*build{}}

func goBuild(dir, pkg, key string, static bool, flags []string) (string, error) {
	// An import path names the same binary from anywhere in one module; a
	// relative path only from its own folder.
	where, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(pkg, ".") {
		where = moduleRoot(where)
	}
	sum := sha256.Sum256([]byte(where + "\x00" + key))
	out := filepath.Join(runDir(), hex.EncodeToString(sum[:8]), filepath.Base(strings.TrimSuffix(pkg, "/...")))
	if _, err := os.Stat(out); err == nil {
		return out, nil // another package's tests of this run built it
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", fmt.Errorf("testenv: build %s: %w", pkg, err)
	}
	// Built under another name and renamed, so that a test binary of the
	// same run never finds half a binary.
	tmp := fmt.Sprintf("%s.%d.tmp", out, os.Getpid())
	cmd := exec.Command("go", append(append([]string{"build"}, flags...), "-o", tmp, pkg)...)
	cmd.Dir = dir
	if static {
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("testenv: go build %s %s: %w\n%s", strings.Join(flags, " "), pkg, err, b)
	}
	if err := os.Rename(tmp, out); err != nil {
		return "", fmt.Errorf("testenv: build %s: %w", pkg, err)
	}
	return out, nil
}

// moduleRoot is the folder of the go.mod that dir belongs to, or dir.
func moduleRoot(dir string) string {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return dir
		}
	}
}

// runDir is the folder of this `go test` run's binaries. The test binaries
// of one run share their parent, the go command; its start time tells a
// later run that reuses its pid apart, where /proc has it. A test binary
// that the go command did not start (one run by hand, say) shares nothing,
// since its parent may start it again after the code has changed.
func runDir() string {
	root := filepath.Join(os.TempDir(), "checkout-testbin")
	parent := os.Getppid()
	if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", parent)); err == nil && strings.TrimSpace(string(comm)) != "go" {
		parent = os.Getpid()
	}
	run := fmt.Sprint(parent)
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", parent)); err == nil {
		// The start time is field 22; the command name (field 2) may hold
		// spaces, so count from its closing parenthesis.
		if f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:])); len(f) > 19 {
			run += "-" + f[19]
		}
	}
	if entries, err := os.ReadDir(root); err == nil {
		for _, e := range entries {
			if info, err := e.Info(); err == nil && e.Name() != run && time.Since(info.ModTime()) > 24*time.Hour {
				_ = os.RemoveAll(filepath.Join(root, e.Name()))
			}
		}
	}
	return filepath.Join(root, run)
}
