// Package objstore keeps named blobs, the archives of persistent computers,
// in an object store: a local folder (the default of `berth dev`) or an
// S3-compatible service. A write is committed only when its stream is
// complete, so a failed or interrupted upload never replaces a good object
// with a partial one. Encrypted wraps any Store so that objects are sealed
// (chunked AES-256-GCM under a fresh key per object) before they leave the
// process, and checked (every chunk, the length and a SHA-256) as they are
// read back.
package objstore

import (
	"context"
	"io"
	"time"
)

// Store keeps objects under validated keys (see ValidateKey).
type Store interface {
	// Put stores the stream r, of any length, under key with the given
	// metadata (see ValidateMetadata), replacing any object there only once
	// r has reached io.EOF and the object is durable. When r fails, ctx ends
	// or the process dies, the previous object (if any) stays as it was.
	Put(ctx context.Context, key string, r io.Reader, meta map[string]string) (Info, error)
	// Get opens the object at key for reading; the caller closes it. Reads
	// fail once ctx ends. ErrNotFound when there is none.
	Get(ctx context.Context, key string) (io.ReadCloser, Info, error)
	// Stat describes the object at key. ErrNotFound when there is none.
	Stat(ctx context.Context, key string) (Info, error)
	// Delete removes the object at key; removing a missing object is not
	// an error.
	Delete(ctx context.Context, key string) error
	// List describes the objects whose keys start with prefix (a plain
	// string prefix, "" for all), sorted by key. Its Infos carry no
	// Metadata: Stat an object for that. At most MaxList objects are
	// listed; a longer listing fails with ErrTooMany.
	List(ctx context.Context, prefix string) ([]Info, error)
}

// Info describes a stored object.
type Info struct {
	Key      string
	Size     int64     // bytes, as Get returns them
	Modified time.Time // when the object was committed
	Metadata map[string]string
}

// MaxList bounds how many objects one List call returns.
const MaxList = 100_000
