package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/checkout-dev/checkout/client"
	"github.com/checkout-dev/checkout/localserver"
)

func TestOneLine(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"Fix login bug", "Fix login bug"},
		{"café ünïcödé 日本語 🚀 👨‍👩‍👧 ✓", "café ünïcödé 日本語 🚀 👨‍👩‍👧 ✓"},
		{"  two  spaces  ", "  two  spaces  "},
		{`"quoted" and 'single'`, `"quoted" and 'single'`},
		{"a | b", "a | b"},
		{"x\nTask pipe1: not checked out", `x\nTask pipe1: not checked out`},
		{"a\r\nb", `a\r\nb`},
		{"col1\tcol2", `col1\tcol2`},
		{"\x1b[2J\x1b[31mred", `\x1b[2J\x1b[31mred`},
		{"\x00\x07\x08\x0b\x0c\x1f", `\x00\a\b\v\f\x1f`},
		{"del\x7f", `del\x7f`},
		{"nel\u0085 csi\u009b[2J", `nel\u0085 csi\u009b[2J`},
		{"ls\u2028ps\u2029", `ls\u2028ps\u2029`},
		{"rlo\u202eevil\u2066", `rlo\u202eevil\u2066`},
		{`back\slash`, `back\\slash`},
		{`\n is not a newline`, `\\n is not a newline`},
		{"bad \xff\xfe utf8 \xc3", `bad \xff\xfe utf8 \xc3`},
		{"\ufffd is a real replacement char", "\ufffd is a real replacement char"},
	} {
		if got := oneLine(tc.in); got != tc.want {
			t.Errorf("oneLine(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if got := oneLine(tc.in); strings.ContainsFunc(got, func(r rune) bool { return escaped(r) }) || !utf8.ValidString(got) {
			t.Errorf("oneLine(%q) = %q keeps a character it escapes, or is not UTF-8", tc.in, got)
		}
	}
}

func TestPrintLinesAndJSONLine(t *testing.T) {
	var b strings.Builder
	printLines(&b, "  Description: ", "first \x1b[2J\nTask pipe1: not checked out\r\n\n  Last error: forged\u0085")
	want := "  Description: first \\x1b[2J\n    Task pipe1: not checked out\\r\n    \n      Last error: forged\\u0085\n"
	if b.String() != want {
		t.Errorf("printLines:\n%q\nwant:\n%q", b.String(), want)
	}
	in := map[string]any{"k\x1b": "v\n\x7f\u0085\u202e", "n": 1, "q": `a"b\c`}
	j, _ := json.Marshal(in)
	got := jsonLine(j)
	if want := `{"k\u001b":"v\n\u007f\u0085\u202e","n":1,"q":"a\"b\\c"}`; got != want {
		t.Errorf("jsonLine = %s, want %s", got, want)
	}
	var back map[string]any
	if err := json.Unmarshal([]byte(got), &back); err != nil || back["k\x1b"] != in["k\x1b"] || back["q"] != in["q"] {
		t.Errorf("jsonLine is not the same JSON: %v %v", back, err)
	}
}

// rawControl is the first character of out that a terminal or a
// line-by-line reader would act on: a control character (C0 but the
// newline ending a line, DEL, C1), a line separator or a bidi control,
// or a byte that is not UTF-8.
func rawControl(out string) (rune, bool) {
	for i, r := range out {
		if r == utf8.RuneError && !strings.HasPrefix(out[i:], "\ufffd") {
			return r, true
		}
		if r != '\n' && escaped(r) {
			return r, true
		}
	}
	return 0, false
}

// What other agents write (a title, a reason, a failed attempt's error,
// an agent's name, a description, metadata) is printed escaped: a newline
// in it cannot forge a line of another agent's output, and a terminal
// escape in it never reaches the terminal.
func TestOtherAgentsTextIsEscaped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *localserver.Config) { c.FeedSettle = -1 }) // the feed shows events at once
	ctx := context.Background()
	const forged = "Task pipe1: not checked out"
	// evil holds every character that must not reach the output raw.
	evil := "x\n" + forged + "\r\n  Agent: forged\x1b[2J\x1b[31m\u009b2J\u0085\x7f\u2028\u202e\t|end"
	mallory, err := e.admin.CreateAgent(ctx, client.CreateAgentRequest{AgentID: "agent-evil", Name: "mallory\n" + forged + "\x1b[2J"})
	if err != nil {
		t.Fatal(err)
	}
	e.keys["agent-evil"] = mallory.APIKey
	for _, id := range []string{"pipe1", "pipe2"} {
		if _, err := e.admin.CreateTask(ctx, client.CreateTaskRequest{TaskID: id, Title: "title " + evil,
			Description: "line one\n" + evil, Metadata: json.RawMessage(`{"note":"\u001b[2J\u0085\u007f"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	url := e.srv.URL()
	as := func(agent string, wantCode int, args ...string) string {
		t.Helper()
		if err := e.srv.Drain(ctx); err != nil {
			t.Fatal(err)
		}
		r := runCLI(t, url, e.keys[agent], args...)
		if r.code != wantCode {
			t.Fatalf("checkout %q: exit %d, want %d\n%s%s", args, r.code, wantCode, r.stdout, r.stderr)
		}
		return r.stdout + r.stderr
	}
	check := func(what, out string) {
		t.Helper()
		if r, bad := rawControl(out); bad {
			t.Errorf("%s prints %U raw:\n%q", what, r, out)
		}
		// A line of its own, or one a field's indent makes look like one
		// of the output's; a description's lines are indented deeper.
		for _, l := range strings.Split(out, "\n") {
			text := strings.TrimLeft(l, " ")
			if len(l)-len(text) < 4 && (strings.HasPrefix(text, forged) || strings.HasPrefix(text, "Agent: forged")) {
				t.Errorf("%s prints the forged line %q:\n%s", what, l, out)
			}
		}
	}

	check("checkout", as("agent-evil", 0, "pipe1", "--reason", evil))
	check("checkout (its own again)", as("agent-evil", 0, "pipe1"))
	check("checkout (denied)", as("agent-a1b2", 3, "pipe1", "--watch"))
	check("status", as("agent-a1b2", 0, "status", "pipe1"))
	check("tasks show (held)", as("agent-a1b2", 0, "tasks", "show", "pipe1"))
	check("list", as("agent-a1b2", 0, "list"))
	check("tasks list", as("agent-a1b2", 0, "tasks", "list"))
	check("claim", as("agent-evil", 0, "claim", "--reason", evil))
	check("fail", as("agent-evil", 0, "fail", "pipe2", "--error", evil))
	check("release", as("agent-evil", 0, "release", "pipe1", "--reason", evil))
	check("tasks show (failed)", as("agent-a1b2", 0, "tasks", "show", "pipe2"))
	check("events pipe1", as("agent-a1b2", 0, "events", "pipe1"))
	check("events pipe2", as("agent-a1b2", 0, "events", "pipe2"))
	e.clock.Advance(time.Millisecond) // the feed shows whole milliseconds
	feed := as("agent-a1b2", 0, "events")
	check("events", feed)
	if want := `error: x\nTask pipe1: not checked out\r\n`; !strings.Contains(feed, want) {
		t.Errorf("events: no %q:\n%s", want, feed)
	}
	check("inbox", as("agent-a1b2", 0, "inbox"))
	check("agents list", as("admin", 0, "agents", "list"))
	// A completion is "id<TAB>description": the tab is cobra's layout.
	comp := as("agent-a1b2", 0, "__complete", "status", "")
	check("completion", strings.ReplaceAll(comp, "\t", " "))
	if strings.Count(comp, "\t") != 2 {
		t.Errorf("completion: not one tab a task:\n%q", comp)
	}

	// The reason and the error are shown, escaped, where agents read them.
	show := as("agent-a1b2", 0, "tasks", "show", "pipe2")
	if want := `  Last error: x\nTask pipe1: not checked out\r\n  Agent: forged\x1b[2J\x1b[31m\u009b2J\u0085\x7f\u2028\u202e\t|end`; !strings.Contains(show, want+"\n") {
		t.Errorf("tasks show: no line %q:\n%s", want, show)
	}
	if want := "  Title: title x\\nTask pipe1: not checked out\\r\\n"; !strings.Contains(show, want) {
		t.Errorf("tasks show: no %q:\n%s", want, show)
	}
	if want := "  Description: line one\n    x\n    " + forged + "\\r\n      Agent: forged\\x1b[2J"; !strings.Contains(show, want) {
		t.Errorf("tasks show: the description is not indented line by line:\n%s", show)
	}
	if want := `  Metadata: {"note":"\u001b[2J\u0085\u007f"}`; !strings.Contains(show, want+"\n") {
		t.Errorf("tasks show: no line %q:\n%s", want, show)
	}
	if _, err := e.admin.Checkout(ctx, "pipe1", client.CheckoutRequest{Reason: evil, AgentID: "agent-evil"}); err != nil {
		t.Fatal(err)
	}
	status := as("agent-a1b2", 0, "status", "pipe1")
	check("status", status)
	if want := `  Reason: x\nTask pipe1: not checked out\r\n  Agent: forged\x1b[2J`; !strings.Contains(status, want) {
		t.Errorf("status: no %q:\n%s", want, status)
	}
	if want := `  Agent: mallory\nTask pipe1: not checked out\x1b[2J (agent-evil)`; !strings.Contains(status, want+"\n") {
		t.Errorf("status: no line %q:\n%s", want, status)
	}
	// --json is the server's JSON as it is.
	if out := as("agent-a1b2", 0, "status", "pipe1", "--json"); !strings.Contains(out, `"reason":"x\nTask pipe1: not checked out\r\n  Agent: forged\u001b[2J\u001b[31m`) {
		t.Errorf("status --json: %s", out)
	}

	// events --follow prints each event on one line as it comes.
	if err := e.srv.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(fctx, binary, "events", "--follow", "--interval", "100ms")
	cmd.Env = cleanEnv("CHECKOUT_URL="+url, "CHECKOUT_API_KEY="+e.keys["agent-a1b2"])
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var followed strings.Builder
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		followed.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "failed") && strings.Contains(sc.Text(), "pipe2") {
			break
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	out := followed.String()
	check("events --follow", out)
	if fctx.Err() != nil {
		t.Errorf("events --follow: no failed release of pipe2 before the timeout:\n%s", out)
	}
	if !strings.Contains(out, `error: x\nTask pipe1: not checked out\r\n`) {
		t.Errorf("events --follow: no escaped error:\n%s", out)
	}
}
