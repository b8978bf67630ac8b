// Command checkout is the command-line client of the checkout service: it
// checks tasks out and in, shows who holds what, and runs an MCP server
// (checkout mcp) so that LLM agents can do the same through tools.
//
// It reads the server's URL from CHECKOUT_URL (default
// http://127.0.0.1:3100) and the API key from CHECKOUT_API_KEY, from a
// profile of $XDG_CONFIG_HOME/checkout/config.toml (default
// ~/.config/checkout/config.toml), or from the --url and --api-key flags.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/checkout-dev/checkout/internal/envcheck"

	// Zone names work under TZ on hosts without a zone database.
	_ "time/tzdata"
)

const defaultURL = "http://127.0.0.1:3100"

func main() {
	for _, s := range envcheck.Slips(os.Environ(), envcheck.CLI) {
		fmt.Fprintf(os.Stderr, "checkout: warning: %s is not a setting and is ignored; did you mean %s?\n", s.Name, s.Meant)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first interrupt ends the command's work; a second one, should
	// that work take a while to wind down (an interrupted claim gives
	// back the task it took), ends the process at once.
	context.AfterFunc(ctx, stop)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	app := &app{stdin: stdin, stdout: stdout, stderr: stderr}
	root := app.rootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		// A help flag cobra answered before the command's arguments were
		// checked, for a word that is no command.
		err = app.helpErr
	}
	if err == nil {
		return exitOK
	}
	var es *exitStatus
	if errors.As(err, &es) {
		return es.code
	}
	fmt.Fprintln(stderr, "checkout: "+app.describe(err))
	return exitCode(err)
}
