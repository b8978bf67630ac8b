package localstack

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// FindDir returns the localstack directory: $CHECKOUT_LOCALSTACK_DIR when
// set, else the localstack directory of the repository found by walking up
// from the working directory to the go.mod of Module, else the directory
// this file was compiled from.
func FindDir() (string, error) {
	if d := os.Getenv(EnvDir); d != "" {
		return checkDir(d)
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("localstack: %w", err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		if isRepoRoot(d) {
			return checkDir(filepath.Join(d, "localstack"))
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		if d, err := checkDir(filepath.Dir(file)); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("localstack: no go.mod of %s above %s; set %s to the localstack directory", Module, wd, EnvDir)
}

func checkDir(d string) (string, error) {
	d, err := filepath.Abs(d)
	if err != nil {
		return "", fmt.Errorf("localstack: %w", err)
	}
	if _, err := os.Stat(filepath.Join(d, "package-lock.json")); err != nil {
		return "", fmt.Errorf("localstack: %s is not the localstack directory: %w", d, err)
	}
	return d, nil
}

// isRepoRoot reports whether dir holds the go.mod of Module. Other modules
// nested in the repository (infra/, bench/) are walked past.
func isRepoRoot(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`) == Module
		}
	}
	return false
}

// Installed reports whether dir's node_modules holds dynalite installed from
// the current package-lock.json (npm's hidden lockfile is at least as new).
func Installed(dir string) bool {
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "dynalite", "cli.js")); err != nil {
		return false
	}
	hidden, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json"))
	if err != nil {
		return false
	}
	lock, err := os.Stat(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		return false
	}
	return !hidden.ModTime().Before(lock.ModTime())
}

// Install runs `npm ci` in dir unless dynalite is already installed. Callers
// in several processes at once are serialised by a lock file in dir, and
// whoever waited re-checks before installing.
func Install(ctx context.Context, dir string) error {
	if Installed(dir) {
		return nil
	}
	unlock, err := lockDir(ctx, filepath.Join(dir, ".install.lock"))
	if err != nil {
		return fmt.Errorf("localstack: lock install: %w", err)
	}
	defer unlock()
	if Installed(dir) {
		return nil
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return fmt.Errorf("localstack: npm (Node.js 20 or later) is needed to install dynalite: %w", err)
	}
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("localstack: npm ci in %s: %w\n%s", dir, err, out)
	}
	if !Installed(dir) {
		return errors.New("localstack: npm ci finished but node_modules/dynalite is missing or older than package-lock.json")
	}
	return nil
}
