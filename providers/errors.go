package providers

import "errors"

// Errors a provider wraps so that the supervisor can answer clearly.
var (
	// ErrUnknown: no provider is registered under that id.
	ErrUnknown = errors.New("unknown provider")
	// ErrNotFound: the machine does not exist (Destroy treats it as done).
	ErrNotFound = errors.New("machine not found")
	// ErrBadCredentials: the provider refused the connection's credentials.
	ErrBadCredentials = errors.New("provider refused the credentials")
	// ErrCapacity: the provider is out of quota or capacity.
	ErrCapacity = errors.New("provider out of quota or capacity")
	// ErrUnavailable: the provider cannot be reached or failed.
	ErrUnavailable = errors.New("provider unavailable")
	// ErrBadImage: the configured image or template is missing.
	ErrBadImage = errors.New("computer image missing")
)

// ErrRefused: the provider refused the request for sure (nothing was
// created). A *RefusedError says how.
var ErrRefused = errors.New("provider refused the request")

// RefusedError is a definite refusal that carries what the caller is told:
// an HTTP status, an error code and a message (a lender's limits, an agent
// that is offline). errors.Is(err, ErrRefused) holds for it.
type RefusedError struct {
	Status  int
	Code    string
	Message string
}

func (e *RefusedError) Error() string { return e.Code + ": " + e.Message }

// Unwrap makes errors.Is(err, ErrRefused) true.
func (e *RefusedError) Unwrap() error { return ErrRefused }
