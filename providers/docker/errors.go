package docker

import "errors"

// Errors the docker provider returns besides the providers package's own.
var (
	// ErrNotManaged: the container named in Destroy or Stats was not created
	// by Berth, so the provider leaves it alone.
	ErrNotManaged = errors.New("container not managed by Berth")
	// ErrLeftover: resources of an earlier attempt for the same computer are
	// still on the host; destroy the computer before creating it again.
	ErrLeftover = errors.New("resources of an earlier attempt remain")
	// ErrRuntime: SANDBOX_RUNTIME names a runtime the engine does not list.
	ErrRuntime = errors.New("sandbox runtime not on the engine")
)

// ErrNoEgressContainer is returned by ConnectEgress when the egress proxy
// container does not exist (egress is off, or the proxy is gone).
var ErrNoEgressContainer = errors.New("no egress proxy container")
