package objstore

import "errors"

var (
	// ErrNotFound is returned when no object exists at a key.
	ErrNotFound = errors.New("objstore: object not found")
	// ErrInvalidKey is returned (wrapped, with the reason) for a key or a
	// prefix that ValidateKey or ValidatePrefix refuses.
	ErrInvalidKey = errors.New("objstore: invalid key")
	// ErrInvalidMetadata is returned (wrapped, with the reason) for
	// metadata that ValidateMetadata refuses.
	ErrInvalidMetadata = errors.New("objstore: invalid metadata")
	// ErrTampered is returned (wrapped, with what failed) when an encrypted
	// object does not open or does not check: a changed, truncated,
	// reordered or extended object, one moved from another key, or a wrong
	// supervisor key.
	ErrTampered = errors.New("objstore: object failed its integrity check")
	// ErrTooMany is returned when a listing holds more than MaxList objects.
	ErrTooMany = errors.New("objstore: too many objects to list")
	// ErrSettings is returned (wrapped, with the setting at fault) by
	// FromEnv for settings that do not describe a store.
	ErrSettings = errors.New("objstore: bad object store settings")
)
