package supervisor

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/berthdev/berth/internal/httpjson"
)

// Error codes the API answers with, each with its HTTP status.
const (
	CodeBadRequest   = "bad_request"          // 400
	CodeUnauthorized = "unauthorized"         // 401
	CodeNotFound     = "not_found"            // 404
	CodeConflict     = "conflict"             // 409
	CodeBudget       = "budget_exhausted"     // 409
	CodeNoSession    = "no_session"           // 409
	CodeUncertain    = "session_uncertain"    // 409
	CodeLimit        = "limit_exceeded"       // 422
	CodeNotUTF8      = "not_utf8"             // 422
	CodeProvider     = "provider_error"       // 502
	CodeUnavailable  = "provider_unavailable" // 503
	CodeInternal     = "internal"             // 500
)

// CodeBrowserSession answers exec and the file tools on a hosted browser
// session, which has neither a shell nor files (422).
const CodeBrowserSession = "not_available_on_browser_session"

// Error is a failure with the status and code a client sees, answered in
// the shared error envelope. Messages name the field and the limit; they
// never carry secrets or internal addresses.
type Error = httpjson.Error

// BodyError turns a request body that httpjson.Decode refused into the
// API's error: limit_exceeded (413) for an oversize body, bad_request (400)
// for any other. Other errors are returned as they are.
func BodyError(err error) error {
	var de *httpjson.DecodeError
	if !errors.As(err, &de) {
		return err
	}
	code := CodeBadRequest
	if de.TooLarge {
		code = CodeLimit
	}
	return &Error{Status: de.Status(), Code: code, Message: de.Message}
}

func errorf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) *Error {
	return errorf(http.StatusBadRequest, CodeBadRequest, format, args...)
}

func limitf(format string, args ...any) *Error {
	return errorf(http.StatusUnprocessableEntity, CodeLimit, format, args...)
}

// AsError returns err as an *Error, turning anything else into an internal
// error whose message hides the details.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error; see the supervisor's log"}
}
