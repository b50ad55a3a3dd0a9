package api

import (
	"errors"
	"fmt"
	"net/http"
)

// ErrAgentID is returned, before any request is made, by the calls that
// name an agent when the id is empty, "." or "..".
var ErrAgentID = errors.New("client: agent id is empty, \".\" or \"..\"")

// APIError is the supervisor's answer to a request it refused or could not
// serve: any status outside 2xx. Code and Message come from the
// {"error": {"code", "message"}} body; when the body is not in that form
// (a proxy's error page, say) Code is empty and Message holds the status
// text or the start of the body.
type APIError struct {
	Status  int    // HTTP status
	Code    string // machine-readable code, such as "not_found" or "budget_exhausted"
	Message string // what went wrong, for people
}

func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	if e.Code == "" {
		return fmt.Sprintf("%s (HTTP %d)", msg, e.Status)
	}
	return fmt.Sprintf("%s (%s)", msg, e.Code)
}
