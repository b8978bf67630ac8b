package lease

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/checkout-dev/checkout/errcode"
)

// The rules on what a caller may send. Each rule is written here once, and
// each failure is a *ValidationError naming the field, with the API's 400
// code and the sentence the API answers with. The store checks every
// operation's params with them before it reads or writes anything; the
// HTTP layer, which only parses, calls the same functions as it parses a
// request, so that an invalid request is answered before the handler
// resolves anything (the agent an admin names, say) and whatever Service
// it runs on.
//
// A zero value means "the default" in the params of the store's
// operations (a zero Timeout, Limit or TTL; an empty Queue or RunID); a
// caller that gives a field explicitly, as an HTTP body does, checks what
// it gave with the rule, so that an explicit 0s or "" is refused.

// Codes of ValidationError, which the API answers with (package errcode
// lists every code of the API).
const (
	CodeInvalidID      = errcode.InvalidID
	CodeInvalidTimeout = errcode.InvalidTimeout
	CodeInvalidRequest = errcode.InvalidRequest
	// CodeInvalidDependency and CodeDependencyCycle refuse a blocked_by
	// (deps.go).
	CodeInvalidDependency = errcode.InvalidDependency
	CodeDependencyCycle   = errcode.DependencyCycle
)

// MaxCursorLen bounds a listing cursor as a caller gives it; the cursors
// the store issues are far shorter.
const MaxCursorLen = 4096

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)

// ValidID reports whether id is a valid task, agent, run or queue id.
func ValidID(id string) bool { return idPattern.MatchString(id) }

// CheckID checks an id field (task_id, agent_id, run_id).
func CheckID(field, id string) error {
	if !ValidID(id) {
		return invalidField(field, CodeInvalidID, "%s must match %s", field, idPattern.String())
	}
	return nil
}

// CheckQueue checks a queue given explicitly: a non-empty id.
func CheckQueue(q string) error {
	if q == "" {
		return invalidField("queue", CodeInvalidID, "queue must not be empty")
	}
	if !ValidID(q) {
		return invalidField("queue", CodeInvalidID, "queue %q must match %s", q, idPattern.String())
	}
	return nil
}

// checkText checks a free-text field's length in bytes.
func checkText(field, v string, max int) error {
	if len(v) > max {
		return invalidField(field, CodeInvalidRequest, "%s must be at most %d bytes", field, max)
	}
	if !utf8.ValidString(v) {
		// DynamoDB refuses a string that is not UTF-8. JSON decoding
		// replaces such bytes, so only a Go caller can get here.
		return invalidField(field, CodeInvalidRequest, "%s must be UTF-8", field)
	}
	return nil
}

// CheckName checks an agent's name: required, not blank, at most
// MaxNameLen bytes.
func CheckName(name string) error {
	if strings.TrimSpace(name) == "" {
		return invalidField("name", CodeInvalidRequest, "name is required")
	}
	return checkText("name", name, MaxNameLen)
}

// CheckTitle checks a task's title: at most MaxTitleLen bytes.
func CheckTitle(title string) error { return checkText("title", title, MaxTitleLen) }

// CheckReason checks the reason of a checkout, claim or release: at most
// MaxReasonLen bytes.
func CheckReason(reason string) error { return checkText("reason", reason, MaxReasonLen) }

// CheckTaskFields checks a task's fields as create and PATCH take them; nil
// is a field not given. They are checked in the order the API has always
// reported them: title, an empty queue, description, the queue's form,
// priority, metadata.
func CheckTaskFields(title, description, queue *string, priority *int, metadata json.RawMessage) error {
	if title != nil {
		if err := CheckTitle(*title); err != nil {
			return err
		}
	}
	if queue != nil && *queue == "" {
		return CheckQueue(*queue)
	}
	if description != nil {
		if err := checkText("description", *description, MaxDescriptionLen); err != nil {
			return err
		}
	}
	if queue != nil {
		if err := CheckQueue(*queue); err != nil {
			return err
		}
	}
	if priority != nil && (*priority < 0 || *priority > MaxPriority) {
		return invalidField("priority", CodeInvalidRequest, "priority must be an integer from 0 to %d", MaxPriority)
	}
	if metadata != nil {
		metadata = NormalizeMetadata(metadata)
		if len(metadata) > MaxMetadataLen {
			return invalidField("metadata", CodeInvalidRequest, "metadata is larger than %d bytes", MaxMetadataLen)
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(metadata, &obj); err != nil || obj == nil {
			return invalidField("metadata", CodeInvalidRequest, "metadata must be a JSON object")
		}
		if msg := checkJSONValue(json.NewDecoder(bytes.NewReader(metadata)), 0); msg != "" {
			return invalidField("metadata", CodeInvalidRequest, "metadata %s", msg)
		}
	}
	return nil
}

// NormalizeMetadata is metadata as it is kept, measured and answered:
// bytes that are not UTF-8 replaced by U+FFFD, as JSON decoding does in
// every other field (so no answer carries them, and the 4 KiB bound holds
// for what GET shows), compacted, so that whitespace counts for nothing,
// and its strings written as their characters rather than \u escapes, so
// that a client whose encoder escapes every character past ASCII is held
// to the same 4 KiB (unescaped). Keys keep their order and numbers their
// digits. Metadata that is not valid JSON is returned as it is, for
// CheckTaskFields to refuse.
func NormalizeMetadata(metadata json.RawMessage) json.RawMessage {
	if metadata == nil {
		return nil
	}
	valid := []byte(metadata)
	if !utf8.Valid(valid) {
		// Each byte on its own, as encoding/json replaces them.
		valid = make([]byte, 0, len(metadata)+64)
		for b := []byte(metadata); len(b) > 0; {
			r, n := utf8.DecodeRune(b)
			if r == utf8.RuneError && n == 1 {
				valid = utf8.AppendRune(valid, utf8.RuneError)
			} else {
				valid = append(valid, b[:n]...)
			}
			b = b[n:]
		}
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, valid); err != nil {
		return valid
	}
	if !bytes.Contains(buf.Bytes(), []byte(`\u`)) {
		return buf.Bytes()
	}
	if out, err := unescapeJSON(buf.Bytes()); err == nil {
		return out
	}
	return buf.Bytes()
}

// unescapeJSON writes the compact JSON text in again token by token, each
// string as its characters (escaping only what JSON needs: the quote, the
// backslash and control characters), numbers as they were.
func unescapeJSON(text []byte) ([]byte, error) {
	d := json.NewDecoder(bytes.NewReader(text))
	d.UseNumber()
	var out bytes.Buffer
	// Per open container: an object (keys and values alternate) and how
	// many tokens it holds so far.
	type level struct {
		object bool
		n      int
	}
	var open []level
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return out.Bytes(), nil
		}
		if err != nil {
			return nil, err
		}
		if closing := tok == json.Delim('}') || tok == json.Delim(']'); len(open) > 0 && !closing {
			l := &open[len(open)-1]
			switch {
			case l.object && l.n%2 == 1:
				out.WriteByte(':')
			case l.n > 0:
				out.WriteByte(',')
			}
			l.n++
		}
		switch v := tok.(type) {
		case json.Delim:
			out.WriteByte(byte(v))
			if v == '{' || v == '[' {
				open = append(open, level{object: v == '{'})
			} else {
				open = open[:len(open)-1]
			}
		case json.Number:
			out.WriteString(v.String())
		case string:
			writeJSONString(&out, v)
		case bool:
			out.WriteString(strconv.FormatBool(v))
		case nil:
			out.WriteString("null")
		}
	}
}

// writeJSONString writes s as a JSON string: its characters, but for the
// quote, the backslash and the control characters, which JSON escapes.
func writeJSONString(out *bytes.Buffer, s string) {
	const hex = "0123456789abcdef"
	out.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			out.WriteByte('\\')
			out.WriteRune(r)
		case r == '\n':
			out.WriteString(`\n`)
		case r == '\r':
			out.WriteString(`\r`)
		case r == '\t':
			out.WriteString(`\t`)
		case r < 0x20:
			out.WriteString(`\u00`)
			out.WriteByte(hex[r>>4])
			out.WriteByte(hex[r&0xf])
		default:
			out.WriteRune(r)
		}
	}
	out.WriteByte('"')
}

// mantissa is a JSON number's digits before its exponent.
func mantissa(n string) string {
	if i := strings.IndexAny(n, "eE"); i >= 0 {
		return n[:i]
	}
	return n
}

// checkJSONValue reads one JSON value (known to be valid) from d, nested
// depth levels deep, and says what in it every client could not read back
// alike: nesting deeper than MaxMetadataDepth (a recursive parser's
// limit), a number no 64-bit float can hold (most JSON decoders fail on
// it, or, too small, read it as 0), or a key twice in one object (decoders differ on which one wins).
// "" means none.
func checkJSONValue(d *json.Decoder, depth int) string {
	d.UseNumber()
	tok, err := d.Token()
	if err != nil {
		return "is not valid JSON"
	}
	switch t := tok.(type) {
	case json.Number:
		f, err := strconv.ParseFloat(string(t), 64)
		if err != nil {
			return fmt.Sprintf("holds the number %.40s, which no 64-bit float can hold", t)
		}
		if f == 0 && strings.ContainsAny(mantissa(string(t)), "123456789") {
			// Too small for a float64: every float client reads it
			// back as 0, a client of exact numbers as it was sent.
			return fmt.Sprintf("holds the number %.40s, which no 64-bit float can hold (it would read back as 0)", t)
		}
		if !strings.ContainsAny(string(t), ".eE") {
			// An integer past 2^53 reads back exactly in some clients
			// (Python, Go's json.Number) and rounded in others
			// (JavaScript, any 64-bit float).
			if n, err := strconv.ParseInt(string(t), 10, 64); err != nil || n > 1<<53 || n < -(1<<53) {
				return fmt.Sprintf("holds the integer %.40s, beyond 2^53, which clients read back differently (send it as a string)", t)
			}
		}
		return ""
	case json.Delim:
		if depth == MaxMetadataDepth {
			return fmt.Sprintf("nests deeper than %d levels", MaxMetadataDepth)
		}
		var keys map[string]bool
		if t == '{' {
			keys = map[string]bool{}
		}
		for d.More() {
			if keys != nil {
				k, err := d.Token()
				if err != nil {
					return "is not valid JSON"
				}
				key, _ := k.(string)
				if keys[key] {
					return fmt.Sprintf("has the key %.40q twice in one object", key)
				}
				keys[key] = true
			}
			if msg := checkJSONValue(d, depth+1); msg != "" {
				return msg
			}
		}
		if _, err := d.Token(); err != nil { // the closing delimiter
			return "is not valid JSON"
		}
	}
	return ""
}

// CheckWorkFields checks a task's attempt limit and retry delay, on
// create and PATCH (nil: not given).
func CheckWorkFields(maxAttempts *int, retryDelay *time.Duration) error {
	if maxAttempts != nil && (*maxAttempts < 1 || *maxAttempts > MaxMaxAttempts) {
		return invalidField("max_attempts", CodeInvalidRequest, "max_attempts must be an integer from 1 to %d", MaxMaxAttempts)
	}
	if retryDelay != nil {
		if err := RetryDelayRange.Check(*retryDelay); err != nil {
			return err
		}
	}
	return nil
}

// CheckOutcome checks a release's outcome and error: the outcome is none,
// done or failed, and an error (up to MaxErrorLen bytes) comes only with
// failed.
func CheckOutcome(o ReleaseOutcome, errText string) error {
	switch o {
	case OutcomeNone, OutcomeDone, OutcomeFailed:
	default:
		return invalidField("outcome", CodeInvalidRequest, "outcome must be done or failed")
	}
	if errText != "" && o != OutcomeFailed {
		return invalidField("error", CodeInvalidRequest, `error comes only with "outcome": "failed"`)
	}
	if len(errText) > MaxErrorLen {
		return invalidField("error", CodeInvalidRequest, "error is %d bytes; at most %d", len(errText), MaxErrorLen)
	}
	if !utf8.ValidString(errText) {
		return invalidField("error", CodeInvalidRequest, "error must be UTF-8 text")
	}
	return nil
}

// CheckPatchStatus checks the status a PATCH asks for: only cancelled and
// todo (a reopen) may be asked for; nil asks for none.
func CheckPatchStatus(s *Status) error {
	if s != nil && *s != StatusCancelled && *s != StatusTodo {
		return invalidField("status", CodeInvalidRequest, "status may be changed only to cancelled or todo")
	}
	return nil
}

// CheckBatchSize checks how many tasks a batch create holds: 1 to MaxBatch.
func CheckBatchSize(n int) error {
	if n < 1 || n > MaxBatch {
		return invalidField("tasks", CodeInvalidRequest, "tasks must hold 1 to %d tasks", MaxBatch)
	}
	return nil
}

// InBatch is err, a task's validation error, as the error of the i-th task
// of a batch. Other errors are returned as they are.
func InBatch(i int, err error) error {
	var ve *ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	return &ValidationError{
		Field:   fmt.Sprintf("tasks[%d].%s", i, ve.Field),
		Code:    ve.Code,
		Message: fmt.Sprintf("tasks[%d]: %s", i, ve.Message),
	}
}

// CheckFence checks a fence a request names: 0 (none) or a grant's fence.
func CheckFence(fence int64) error {
	if fence < 0 {
		return invalidField("fence", CodeInvalidRequest, "fence must be a positive integer")
	}
	return nil
}

// CheckExpectedStatuses checks a checkout's expected statuses: nil for the
// default, otherwise a non-empty list of statuses.
func CheckExpectedStatuses(ss []Status) error {
	if ss == nil {
		return nil
	}
	if len(ss) == 0 {
		return invalidField("expected_statuses", CodeInvalidRequest, "expected_statuses must not be empty")
	}
	for _, s := range ss {
		if !s.Valid() {
			// Any status may be named. A blocked task is never granted (a
			// checkout answers blocked whatever it expects); a finished
			// one (done, cancelled, failed) expected is reopened.
			return invalidField("expected_statuses", CodeInvalidRequest, "expected_statuses may hold only todo, blocked, in_progress, done, cancelled and failed")
		}
	}
	return nil
}

// CheckClaimQueues checks the queues a claim names: nil for the default
// queue, otherwise 1 to MaxClaimQueues queues.
func CheckClaimQueues(qs []string) error {
	if qs == nil {
		return nil
	}
	if len(qs) == 0 {
		return invalidField("queues", CodeInvalidRequest, "queues must name at least one queue")
	}
	if len(qs) > MaxClaimQueues {
		return invalidField("queues", CodeInvalidRequest, "a claim names at most %d queues", MaxClaimQueues)
	}
	for _, q := range qs {
		if err := CheckQueue(q); err != nil {
			return err
		}
	}
	return nil
}

// CheckListStatus checks the status a listing is confined to.
func CheckListStatus(s Status) error {
	if !s.Valid() {
		return invalidField("status", CodeInvalidRequest, "status must be todo, blocked, in_progress, done, cancelled or failed")
	}
	return nil
}

// CheckLimit checks a listing's page size: 1 to MaxListLimit.
func CheckLimit(n int) error {
	if n < 1 || n > MaxListLimit {
		return InvalidLimit()
	}
	return nil
}

// InvalidLimit is the error for a limit that is not an integer from 1 to
// MaxListLimit, one that does not parse included.
func InvalidLimit() error {
	return invalidField("limit", CodeInvalidRequest, "limit must be an integer from 1 to %d", MaxListLimit)
}

// CheckCursor checks the length of a listing cursor as a caller gives it;
// whether the store issued it is decided when it is decoded.
func CheckCursor(c string) error {
	if len(c) > MaxCursorLen {
		return invalidField("cursor", CodeInvalidRequest, "cursor is not valid")
	}
	return nil
}

// notIssued is the error for a cursor of the right length that the store
// did not issue.
func notIssued() error {
	return invalidField("cursor", CodeInvalidRequest, "cursor is not one this server issued")
}

// CheckEventTypes checks the event types a feed is confined to.
func CheckEventTypes(ts []EventType) error {
	if len(ts) > len(EventTypes) {
		return invalidField("type", CodeInvalidRequest, "type lists too many event types")
	}
	for _, t := range ts {
		if !slices.Contains(EventTypes, t) {
			return invalidField("type", CodeInvalidRequest, "type %q is not an event type", t)
		}
	}
	return nil
}

// A DurationRange is what a duration field may be, from Min to Max
// inclusive.
type DurationRange struct {
	Field    string
	Min, Max time.Duration
	// Examples are two durations in the range, for the message (default
	// "90s" and "30m").
	Examples [2]string
	// Whole says the field is whole seconds: it is shown back in seconds
	// (timeout_seconds, retry_delay_seconds), which would hide the rest.
	Whole bool
}

// The duration fields.
var (
	TimeoutRange = DurationRange{Field: "timeout", Min: MinTimeout, Max: MaxTimeout, Whole: true}
	TTLRange     = DurationRange{Field: "ttl", Min: MinHeartbeatTTL, Max: MaxHeartbeatTTL}
	WaitRange    = DurationRange{Field: "wait", Min: 0, Max: MaxClaimWait, Examples: [2]string{"5s", "20s"}}
	// RetryDelayRange is a task's retry delay: 0s (at once) to 1h.
	RetryDelayRange = DurationRange{Field: "retry_delay", Min: 0, Max: MaxRetryWait, Examples: [2]string{"10s", "2m"}, Whole: true}
)

// Check checks d.
func (r DurationRange) Check(d time.Duration) error {
	if d < r.Min || d > r.Max {
		return r.Invalid()
	}
	if r.Whole && d%time.Second != 0 {
		ex := r.examples()
		return invalidField(r.Field, CodeInvalidTimeout, "%s must be whole seconds, such as %q or %q", r.Field, ex[0], ex[1])
	}
	return nil
}

// examples are Examples, or the default.
func (r DurationRange) examples() [2]string {
	if r.Examples[0] == "" {
		return [2]string{"90s", "30m"}
	}
	return r.Examples
}

// Invalid is the error for a value of the field that is not a duration in
// the range, one that does not parse included.
func (r DurationRange) Invalid() error {
	ex := r.examples()
	return invalidField(r.Field, CodeInvalidTimeout, "%s must be a duration such as %q or %q from %s to %s", r.Field, ex[0], ex[1], fmtDur(r.Min), fmtDur(r.Max))
}

// fmtDur writes a bound in whole hours or minutes when it is one.
func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d%time.Hour == 0:
		return strconv.Itoa(int(d/time.Hour)) + "h"
	case d%time.Minute == 0:
		return strconv.Itoa(int(d/time.Minute)) + "m"
	}
	return d.String()
}

// checkCheckout checks a checkout's params (a claim's too) and fills in
// their defaults.
func checkCheckout(p *CheckoutParams) error {
	if err := CheckID("task_id", p.TaskID); err != nil {
		return err
	}
	if err := CheckID("agent_id", p.AgentID); err != nil {
		return err
	}
	if p.RunID == "" {
		p.RunID = newID("run-")
	} else if err := CheckID("run_id", p.RunID); err != nil {
		return err
	}
	if p.Timeout == 0 {
		p.Timeout = DefaultTimeout
	}
	if err := TimeoutRange.Check(p.Timeout); err != nil {
		return err
	}
	if err := CheckReason(p.Reason); err != nil {
		return err
	}
	if p.By == p.AgentID {
		p.By = ""
	} else if p.By != "" {
		if err := CheckID("by", p.By); err != nil {
			return err
		}
	}
	if err := CheckExpectedStatuses(p.ExpectedStatuses); err != nil {
		return err
	}
	if p.AgentName == "" {
		p.AgentName = p.AgentID
	}
	if p.ExpectedStatuses == nil {
		p.ExpectedStatuses = []Status{StatusTodo, StatusInProgress}
	}
	return nil
}

// checkHolder checks what a holder's renew, release or complete names. The
// fence is not checked: to the store a negative fence is one that no grant
// has, and the answer says the caller holds no such lease. CheckFence is
// the API's rule for the fence a request gives.
func checkHolder(taskID, runID string) error {
	if err := CheckID("task_id", taskID); err != nil {
		return err
	}
	if runID != "" {
		return CheckID("run_id", runID)
	}
	return nil
}

// actedBy is who makes a holder's request for agentID, whom its event names
// as by: by (an admin acting for the holder) when given, else the holder.
func actedBy(agentID, by string) (string, error) {
	if by == "" || by == agentID {
		return agentID, nil
	}
	return by, CheckID("by", by)
}
