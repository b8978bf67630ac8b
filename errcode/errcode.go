// Package errcode is the list of the checkout API's error codes, stated
// once: each code with its HTTP status, what it means, and what a caller
// can do about it. Every error answer has the form
// {"error": "<sentence>", "code": "<code>"}, and its code is one of these.
//
// The server (package httpapi) answers with these constants, the Go client
// maps them to its sentinel errors, the MCP server passes them on to the
// model, the CLI derives its exit statuses from Kind, and the tests
// provoke them. A test holds the list to the OpenAPI document
// (httpapi/openapi/openapi.yaml): a code added to one and not the other
// fails it. The package imports nothing but the standard library, so the
// client can use it without the server's dependencies.
package errcode

import "net/http"

// The codes. Each string appears here and nowhere else in the product.
const (
	NotFound          = "not_found"
	MethodNotAllowed  = "method_not_allowed"
	Unauthorized      = "unauthorized"
	Forbidden         = "forbidden"
	InvalidID         = "invalid_id"
	InvalidTimeout    = "invalid_timeout"
	InvalidRequest    = "invalid_request"
	InvalidJSON       = "invalid_json"
	PayloadTooLarge   = "payload_too_large"
	TaskNotFound      = "task_not_found"
	AgentNotFound     = "agent_not_found"
	NotCheckedOut     = "not_checked_out"
	NoTaskAvailable   = "no_task_available"
	CheckedOut        = "checked_out"
	StatusMismatch    = "status_mismatch"
	TaskExists        = "task_exists"
	AgentExists       = "agent_exists"
	NotHolder         = "not_holder"
	VersionMismatch   = "version_mismatch"
	InvalidTransition = "invalid_transition"
	TooManyWatchers   = "too_many_watchers"
	CannotRemoveAdmin = "cannot_remove_admin"
	Blocked           = "blocked"
	NotReady          = "not_ready"
	InvalidDependency = "invalid_dependency"
	DependencyCycle   = "dependency_cycle"
	Unavailable       = "unavailable"
	Internal          = "internal"
)

// Kind is what a caller can do about an error.
type Kind int

const (
	// Invalid: the request itself is wrong (a 400 or 413); fix it, never
	// retry it as it is.
	Invalid Kind = iota + 1
	// Denied: the state of a task or an agent refuses the request (another
	// lease holds the task, the version moved on, the id exists); read the
	// state again, wait, or pick another task.
	Denied
	// Missing: what the request names does not exist, or there is nothing
	// to give (no lease, no task available).
	Missing
	// Refused: the key is missing or unknown, or lacks the right.
	Refused
	// Failed: the server could not answer the request (the database cannot
	// be reached, or a bug); an unavailable answer may be retried.
	Failed
)

// Code is one error code of the API.
type Code struct {
	Code string
	// Status is the HTTP status the code is answered with.
	Status int
	Kind   Kind
	// Meaning says when the server answers it.
	Meaning string
}

// All lists every code the API answers with, in the order of the OpenAPI
// document's Error schema.
var All = []Code{
	{NotFound, http.StatusNotFound, Missing, "no route has this path, or the inbox message does not exist"},
	{MethodNotAllowed, http.StatusMethodNotAllowed, Invalid, "the path exists, but not with this method (the Allow header lists those it has)"},
	{Unauthorized, http.StatusUnauthorized, Refused, "the API key is missing, malformed, unknown or revoked"},
	{Forbidden, http.StatusForbidden, Refused, "the caller is not an admin, and the route or a field of the body is for admins only"},
	{InvalidID, http.StatusBadRequest, Invalid, "a task or agent id does not match ^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"},
	{InvalidTimeout, http.StatusBadRequest, Invalid, "a duration does not parse or is out of its range"},
	{InvalidRequest, http.StatusBadRequest, Invalid, "a value is not valid (any other invalid input)"},
	{InvalidJSON, http.StatusBadRequest, Invalid, "the body is not a JSON object, is malformed, has an unknown field or a value of the wrong type"},
	{PayloadTooLarge, http.StatusRequestEntityTooLarge, Invalid, "the body is larger than 64 KiB"},
	{TaskNotFound, http.StatusNotFound, Missing, "the task does not exist"},
	{AgentNotFound, http.StatusNotFound, Missing, "the agent does not exist"},
	{NotCheckedOut, http.StatusNotFound, Missing, "no live lease holds the task (the caller's lease expired, was released, or its holder died)"},
	{NoTaskAvailable, http.StatusNotFound, Missing, "no task of the queues can be claimed now"},
	{CheckedOut, http.StatusConflict, Denied, "another live lease holds the task (holder names it)"},
	{StatusMismatch, http.StatusConflict, Denied, "the task's status is not one the checkout expected (status gives it)"},
	{TaskExists, http.StatusConflict, Denied, "a task with this id exists"},
	{AgentExists, http.StatusConflict, Denied, "an agent with this id exists"},
	{NotHolder, http.StatusForbidden, Denied, "the caller does not hold the task's live lease (holder names the one who does)"},
	{VersionMismatch, http.StatusPreconditionFailed, Denied, "the task changed since the version If-Match gave"},
	{InvalidTransition, http.StatusConflict, Denied, "the task's status does not allow the status change asked for"},
	{TooManyWatchers, http.StatusConflict, Denied, "the task has as many watchers as it may have"},
	{CannotRemoveAdmin, http.StatusConflict, Denied, "the built-in admin cannot be removed"},
	{Blocked, http.StatusConflict, Denied, "the task is blocked: blocked_by lists its blockers that are not done"},
	{NotReady, http.StatusConflict, Denied, "the task may not be granted before not_before"},
	{InvalidDependency, http.StatusBadRequest, Invalid, "blocked_by names an unknown task, the task itself, or more than 20 tasks"},
	{DependencyCycle, http.StatusBadRequest, Invalid, "blocked_by would close a cycle of dependencies"},
	{Unavailable, http.StatusServiceUnavailable, Failed, "the database cannot be reached; retry shortly (Retry-After)"},
	{Internal, http.StatusInternalServerError, Failed, "a bug; the details are logged with the request id"},
}

var byCode = func() map[string]Code {
	m := make(map[string]Code, len(All))
	for _, c := range All {
		m[c.Code] = c
	}
	return m
}()

// Lookup returns the code named s; ok is false for a string that is not
// one of the API's codes.
func Lookup(s string) (c Code, ok bool) {
	c, ok = byCode[s]
	return c, ok
}
