package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testenv"
)

// -h and --help print the usage and exit 0; an unknown argument is refused
// with it, exit 2; none of them starts a server (they all used to).
func TestHelpAndUnknownArguments(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t, "github.com/checkout-dev/checkout/cmd/checkout-server")
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"-h"}, 0}, {[]string{"--help"}, 0}, {[]string{"-help"}, 0},
		{[]string{"serve"}, 2}, {[]string{"--port", "80"}, 2}, {[]string{"-x"}, 2},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cmd := exec.CommandContext(ctx, bin, c.args...)
		cmd.Env = append(os.Environ(), "CHECKOUT_ADDR=127.0.0.1:0", "DYNAMODB_ENDPOINT=")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		cancel()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		out, other := stdout.String(), stderr.String()
		if c.code != 0 {
			out, other = other, out
		}
		if code != c.code || !strings.Contains(out, "usage: checkout-server") || !strings.Contains(out, "CHECKOUT_DATA_DIR") ||
			other != "" || strings.Contains(out, "listening") {
			t.Errorf("%v: exit %d (want %d), stdout %q, stderr %q", c.args, code, c.code, stdout.String(), stderr.String())
		}
		if c.code == 2 && !strings.Contains(out, "unknown argument \""+c.args[0]+"\"") {
			t.Errorf("%v: %q does not name the argument", c.args, out)
		}
	}
}

// The usage names every variable the command's doc comment does.
func TestUsageNamesEverySetting(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	doc, _, _ := strings.Cut(string(src), "\npackage main")
	names := regexp.MustCompile(`(?m)^//\t([A-Z][A-Z_]+) `).FindAllStringSubmatch(doc, -1)
	if len(names) < 10 {
		t.Fatalf("found %d variables in the doc comment", len(names))
	}
	for _, m := range names {
		if !regexp.MustCompile(`(?m)^  ` + m[1] + ` `).MatchString(usage) {
			t.Errorf("the usage lacks %s", m[1])
		}
	}
}

// migrate -h prints migrate's flags and exits 0, and a flag migrate does
// not know is a usage error (exit 2); neither logs an error line (-h used
// to log "flag: help requested" and exit 1, as the usage invites it).
func TestMigrateHelp(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t, "github.com/checkout-dev/checkout/cmd/checkout-server")
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"migrate", "-h"}, 0}, {[]string{"migrate", "--help"}, 0}, {[]string{"migrate", "-x"}, 2},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cmd := exec.CommandContext(ctx, bin, c.args...)
		cmd.Env = append(os.Environ(), "DYNAMODB_ENDPOINT=", "CHECKOUT_DATA_DIR=")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		cancel()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		out := stdout.String() + stderr.String()
		if code != c.code || !strings.Contains(out, "-aws") || strings.Contains(out, `"level":"ERROR"`) {
			t.Errorf("%v: exit %d (want %d), stdout %q, stderr %q", c.args, code, c.code, stdout.String(), stderr.String())
		}
	}
}
