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
