// Command checkout is the command-line client of the checkout service: it
// checks tasks out and in, shows who holds what, and runs an MCP server
// (checkout mcp) so that LLM agents can do the same through tools.
//
// It reads the server's URL from CHECKOUT_URL (default
// http://127.0.0.1:3100) and the API key from CHECKOUT_API_KEY, from a
// profile of ~/.config/checkout/config.toml, or from the --url and
// --api-key flags.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	// Zone names work under TZ on hosts without a zone database.
	_ "time/tzdata"

	"github.com/checkout-dev/checkout/client"
)

// Exit statuses.
const (
	exitOK       = 0
	exitError    = 1 // anything else: server unreachable, not a checkout server, bad key, forbidden, ...
	exitUsage    = 2 // bad flags or arguments, an unknown command, or input the server refused (400)
	exitConflict = 3 // denied: the task is held by another lease, or not by you
	exitNotFound = 4 // no such task, agent or message; nothing checked out; no task available
)

const defaultURL = "http://127.0.0.1:3100"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// usageError is a mistake in the command line.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// exitStatus carries a status for an outcome already printed (a denied
// checkout prints its own report).
type exitStatus struct{ code int }

func (e *exitStatus) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	app := &app{stdin: stdin, stdout: stdout, stderr: stderr}
	root := app.rootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
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

// describe is the one line printed for err.
func (a *app) describe(err error) string {
	var ue *client.UnreachableError
	var nse *client.NotServerError
	var ae *client.APIError
	var use *usageError
	switch {
	case errors.As(err, &use):
		return use.msg
	case errors.As(err, &ue):
		return ue.Error()
	case errors.As(err, &nse):
		return nse.Error()
	case errors.Is(err, client.ErrUnauthorized):
		from := "CHECKOUT_API_KEY"
		if a.resolved != nil && a.resolved.key.from != "" {
			from = a.resolved.key.from
		}
		return "unauthorized: the server refused the API key from " + from
	case errors.Is(err, client.ErrForbidden) && errors.As(err, &ae):
		return "forbidden: " + ae.Message
	case errors.As(err, &ae):
		if ae.Message != "" {
			return ae.Message
		}
		return ae.Error()
	case errors.Is(err, context.Canceled):
		return "interrupted"
	}
	msg := err.Error()
	if isCobraUsage(msg) {
		return msg + " (see checkout --help)"
	}
	return msg
}

func isCobraUsage(msg string) bool {
	for _, p := range []string{"unknown flag", "unknown shorthand flag", "unknown command", "flag needs an argument",
		"invalid argument", "accepts ", "requires ", "bad flag syntax", "if any flags in the group"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

func exitCode(err error) int {
	var ue *usageError
	var ae *client.APIError
	switch {
	case errors.As(err, &ue), isCobraUsage(err.Error()):
		return exitUsage
	case errors.Is(err, client.ErrCheckedOut), errors.Is(err, client.ErrStatusMismatch),
		errors.Is(err, client.ErrNotHolder), errors.Is(err, client.ErrTaskExists), errors.Is(err, client.ErrAgentExists),
		errors.Is(err, client.ErrVersionMismatch), errors.Is(err, client.ErrInvalidTransition):
		return exitConflict
	case errors.Is(err, client.ErrNotFound):
		return exitNotFound
	case errors.As(err, &ae) && ae.Status == 400:
		return exitUsage
	}
	return exitError
}
