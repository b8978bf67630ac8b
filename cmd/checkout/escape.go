package main

// What other agents wrote, made safe to print as plain text.

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// oneLine renders text that another party wrote (a title, a reason, an
// error, an agent's name, an event's or a message's reason) for one line
// of the plain-text output, which agents read line by line: a newline in
// a reason must not start a forged line, and a terminal escape in a title
// must not reach the terminal.
//
// Every control character (C0, DEL, C1), the Unicode line and paragraph
// separators (line breaks to many readers) and the bidirectional
// embedding, override and isolate controls (which reorder what follows
// them on screen) are shown escaped, as Go writes them in a quoted string:
// \n, \r, \t, \x1b, \x7f, \u0085, \u2028, \u202e. A backslash is shown as \\,
// so that an escape shown always stands for the character, never for the
// text that spells it. A byte that is not UTF-8 is shown as \xNN. All
// other text, spaces, accents and emoji included, is kept as it is.
//
// --json output does not go through here: JSON escapes on its own.
func oneLine(s string) string {
	i := 0
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == '\\' || escaped(r) || r == utf8.RuneError && size == 1 {
			break
		}
		i += size
	}
	if i == len(s) {
		return s // nothing to escape: the common case
	}
	b := make([]byte, 0, len(s)+16)
	b = append(b, s[:i]...)
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			q := strconv.Quote(s[i : i+1]) // "\xNN"
			b = append(b, q[1:len(q)-1]...)
		case r == '\\' || escaped(r):
			q := strconv.QuoteRune(r) // '\n', '\x1b', '\u0085', '\\'
			b = append(b, q[1:len(q)-1]...)
		default:
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return string(b)
}

// escaped reports whether oneLine shows r escaped (besides the backslash).
func escaped(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f: // C0, DEL, C1
		return true
	case r == '\u2028', r == '\u2029': // line and paragraph separators
		return true
	case r >= '\u202a' && r <= '\u202e', r >= '\u2066' && r <= '\u2069': // bidi embeddings, overrides, isolates
		return true
	}
	return false
}

// printLines writes a field whose text may rightly span lines (a task's
// description): its first line after label, each further line on a line
// of its own indented by four spaces. A description's line breaks are
// part of what it says, and shown escaped (\n) a long one would be
// unreadable; so its lines are kept, each escaped by oneLine for every
// other control character. Their deeper indent keeps them apart from the
// output's own "  Field: value" lines, so that a description line
// reading "  Last error: ..." or "Task x: not checked out" can never be
// taken for one.
func printLines(w io.Writer, label, text string) {
	lines := strings.Split(text, "\n")
	fmt.Fprintf(w, "%s%s\n", label, oneLine(lines[0]))
	for _, l := range lines[1:] {
		fmt.Fprintf(w, "    %s\n", oneLine(l))
	}
}

// jsonLine is JSON that json.Marshal wrote (a task's metadata), for one
// line of plain text: Marshal already escapes the C0 controls and the
// line separators, and oneLine's other characters (DEL, the C1 controls,
// the bidi controls), which only a string can hold, are escaped here as
// \u00XX, so that the line is still the same JSON. (oneLine would escape
// its backslashes and quotes' escapes again, which JSON readers would no
// longer read as the same value.)
func jsonLine(b []byte) string {
	s := string(b)
	if !strings.ContainsFunc(s, escaped) {
		return s
	}
	var out strings.Builder
	for _, r := range s {
		if escaped(r) {
			fmt.Fprintf(&out, `\u%04x`, r)
		} else {
			out.WriteRune(r)
		}
	}
	return out.String()
}
