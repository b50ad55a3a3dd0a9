package lender

import (
	"errors"
	"fmt"
	"net/http"
)

// Error codes the lender answers a refused or failed request with. Each
// owner limit has its own code and message.
const (
	CodePaused          = "lending_paused"      // 503: the owner turned lending off
	CodeTooMany         = "too_many_computers"  // 422: at most N computers at once
	CodeCPU             = "cpu_limit"           // 422: more CPUs than the owner allows
	CodeMemory          = "memory_limit"        // 422: more memory than the owner allows
	CodeBudget          = "daily_budget"        // 422: the day's lending budget is spent
	CodeHours           = "outside_hours"       // 422: outside the allowed hours
	CodeDesktop         = "desktop_not_allowed" // 422: the owner allows no desktop computers
	CodeDenied          = "approval_denied"     // 403: the owner denied the session
	CodeApprovalTimeout = "approval_timeout"    // 503: nobody decided in time
	CodeBadRequest      = "bad_request"         // 400
	CodeNotFound        = "not_found"           // 404
	CodeConflict        = "conflict"            // 409
	CodeBadImage        = "image_missing"       // 502: the computer image is not on this machine
	CodeUnavailable     = "unavailable"         // 503: Docker or the computer unreachable
	CodeNoScreenshot    = "no_screenshot"       // 404
	CodeInternal        = "internal"            // 500
)

// Error is a refusal or failure with the status and code a caller sees.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

func errorf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

func limitf(code, format string, args ...any) *Error {
	return errorf(http.StatusUnprocessableEntity, code, format, args...)
}

func badRequest(format string, args ...any) *Error {
	return errorf(http.StatusBadRequest, CodeBadRequest, format, args...)
}

// AsError returns err as an *Error; anything else is an internal error
// whose message hides the details.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error; see the agent's log"}
}

// ErrClosed is returned by calls on a closed Lender.
var ErrClosed = errors.New("lender closed")

// StatusCode is the HTTP status of the refusal.
func (e *Error) StatusCode() int { return e.Status }

// ErrorCode is the refusal's code.
func (e *Error) ErrorCode() string { return e.Code }

// ErrorMessage is the refusal's message.
func (e *Error) ErrorMessage() string { return e.Message }
