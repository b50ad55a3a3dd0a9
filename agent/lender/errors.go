package lender

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/berthdev/berth/lending"
)

func errorf(status int, code, format string, args ...any) *lending.Error {
	return &lending.Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

func limitf(code, format string, args ...any) *lending.Error {
	return errorf(http.StatusUnprocessableEntity, code, format, args...)
}

func badRequest(format string, args ...any) *lending.Error {
	return errorf(http.StatusBadRequest, lending.CodeBadRequest, format, args...)
}

// AsError returns err as a *lending.Error; anything else is an internal
// error whose message hides the details.
func AsError(err error) *lending.Error {
	var e *lending.Error
	if errors.As(err, &e) {
		return e
	}
	return &lending.Error{Status: http.StatusInternalServerError, Code: lending.CodeInternal, Message: "internal error; see the agent's log"}
}

// ErrClosed is returned by calls on a closed Lender.
var ErrClosed = errors.New("lender closed")
