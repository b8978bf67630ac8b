package lease_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/checkout-dev/checkout/lease"
)

// Metadata is measured as it is kept and shown: bytes that are not UTF-8
// become U+FFFD (3 bytes each) before the 4 KiB bound, so metadata that
// passed the bound is never shown three times larger, and no answer
// carries bytes that are not UTF-8; whitespace between tokens counts for
// nothing.
func TestMetadataIsMeasuredAsItIsShown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	big := json.RawMessage(`{"k":"` + strings.Repeat("\xff", 4088) + `"}`)
	if _, err := e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "m-big", Metadata: big}); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("create with 4 KiB of bytes that are not UTF-8 in metadata: %v, want invalid (it shows as 12 KiB)", err)
	}
	small := e.create(t, lease.CreateTaskParams{TaskID: "m-small", Metadata: json.RawMessage("{\"k\":\"a\xffb\"}")})
	if !utf8.Valid(small.Metadata) || string(small.Metadata) != `{"k":"a`+"\uFFFD"+`b"}` {
		t.Errorf("metadata with a byte that is not UTF-8: %q, want it replaced by U+FFFD", small.Metadata)
	}
	if got := e.get(t, "m-small").Metadata; string(got) != string(small.Metadata) {
		t.Errorf("GET shows %q, the create answered %q", got, small.Metadata)
	}
	// 4,000 bytes of value with spaces around every token: over 4 KiB as
	// sent, under it compact.
	spaced := json.RawMessage("{ \"k\" :  \"" + strings.Repeat("x", 4000) + "\" ,  \"n\" : 9007199254740992 " + strings.Repeat(" ", 100) + "}")
	got := e.create(t, lease.CreateTaskParams{TaskID: "m-spaced", Metadata: spaced})
	if want := `{"k":"` + strings.Repeat("x", 4000) + `","n":9007199254740992}`; string(got.Metadata) != want {
		t.Errorf("spaced metadata kept as %.60q..., want it compact with its keys in order and digits kept", got.Metadata)
	}
	edited := must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "m-small", AgentID: "x", Metadata: json.RawMessage("{ \"k\" : \"\xfe\" }")}))
	if string(edited.Metadata) != `{"k":"`+"\uFFFD"+`"}` {
		t.Errorf("PATCHed metadata: %q", edited.Metadata)
	}
	// An integer past 2^53 reads back differently in different clients.
	for _, v := range []string{`{"n":9007199254740993}`, `{"n":-9007199254740993}`, `{"a":[1,{"n":123456789012345678901}]}`} {
		if _, err := e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "m-int", Metadata: json.RawMessage(v)}); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("metadata %s: %v, want invalid", v, err)
		}
	}
	for i, v := range []string{`{"n":9007199254740992}`, `{"n":1e300}`, `{"n":-0.5}`} {
		if _, err := e.store.CreateTask(c, lease.CreateTaskParams{TaskID: fmt.Sprintf("m-ok-%d", i), Metadata: json.RawMessage(v)}); err != nil {
			t.Errorf("metadata %s: %v", v, err)
		}
	}
}

// Metadata whose strings are written with \u escapes (as many JSON
// encoders write every character past ASCII) is kept and measured as the
// characters themselves: 700 é are 1,400 bytes of UTF-8, not 4,200 of
// escapes, and 600 U+2028 and U+2029 (which encoding/json would escape)
// 1,800, not 3,600; so a client gets the same 4 KiB whatever its encoder
// does. The escapes JSON needs (a quote, a backslash, control
// characters) stay.
func TestMetadataIsMeasuredUnescaped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	escaped := json.RawMessage(`{"k":"` + strings.Repeat(`\u00e9`, 700) + `","q":"a\"b\\c\u0001\n","n":1.50,"l":[true,null,{"x":"\u2603"}],"s":"` + strings.Repeat(`\u2028\u2029`, 300) + `"}`)
	got := e.create(t, lease.CreateTaskParams{TaskID: "m-esc", Metadata: escaped})
	want := `{"k":"` + strings.Repeat("é", 700) + `","q":"a\"b\\c\u0001\n","n":1.50,"l":[true,null,{"x":"☃"}],"s":"` + strings.Repeat("\u2028\u2029", 300) + `"}`
	if string(got.Metadata) != want {
		t.Fatalf("escaped metadata kept as %.80q..., want %.80q...", got.Metadata, want)
	}
	if shown := e.get(t, "m-esc").Metadata; string(shown) != want {
		t.Errorf("GET shows %.80q...", shown)
	}
}
