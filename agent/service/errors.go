package service

import "errors"

// Errors of this package; those returned wrap them.
var (
	// ErrConfig is a bad Config: a name, path or argument.
	ErrConfig = errors.New("invalid service config")
	// ErrNoManager means no service manager was found on this machine.
	ErrNoManager = errors.New("no service manager found")
	// ErrNoUserServices means the service manager has no user services.
	ErrNoUserServices = errors.New("user services need systemd")
	// ErrInstalled is returned by Install when the service exists.
	ErrInstalled = errors.New("service already installed; uninstall it first")
	// ErrNotInstalled is returned when the service does not exist.
	ErrNotInstalled = errors.New("service not installed")
)
