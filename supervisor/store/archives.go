package store

import (
	"context"
	"time"
)

// Home states of a session of a persistent connection (Session.Home). A
// session of a connection without persistence has none ("").
const (
	// HomeWake: the machine does not hold the agent's home yet; it is
	// restored from an archive (Session.WakeFrom) before any tool call.
	HomeWake = "wake"
	// HomeLive: the machine holds the home; it is archived when the
	// session ends.
	HomeLive = "live"
	// HomeArchived: the home was archived at the session's end; the
	// machine may be removed.
	HomeArchived = "archived"
	// HomeLost: archiving at the end failed for good; the agent's earlier
	// archive stays the one to wake from.
	HomeLost = "lost"
	// HomeSuspended: the home was archived at the session's end and the
	// session's machine (Session.MachineID) was suspended, not removed
	// (persistence "memory"); the next start resumes it. The session has
	// ended; a later one that resumes the machine, or gives it up, moves
	// this one to HomeArchived.
	HomeSuspended = "suspended"
)

// SleepArchive is the Archive.Name of an agent's sleep archive: the home
// as its last session left it, which the next start wakes from.
// Checkpoints have names of their own, never this one.
const SleepArchive = ""

// Archive is a stored archive of an agent's home: its sleep archive or a
// named checkpoint. The bytes live in the object store under Key.
type Archive struct {
	AgentID   string
	Workspace string
	Name      string // SleepArchive, or the checkpoint's name
	Key       string // the object store key
	Bytes     int64  // of the archive as computerd made it
	SHA256    string // hex, of the archive as computerd made it
	Image     string // the image the archive was made on
	SessionID string // the session it was made in
	CreatedAt time.Time
}

// StoredRow is the archive storage of one agent.
type StoredRow struct {
	AgentID   string
	Workspace string
	Bytes     int64
	Archives  int64
}

// Archives records the archives of persistent computers; every Store
// implements it.
type Archives interface {
	// PutArchive records a, replacing the agent's archive of the same
	// name, which it returns (ok true) so that its object can be deleted.
	// A new checkpoint (a name other than SleepArchive that the agent has
	// no archive of) is refused with a *CheckpointLimitError when the
	// agent has maxCheckpoints of them already.
	PutArchive(ctx context.Context, a Archive, maxCheckpoints int) (old Archive, ok bool, err error)
	// GetArchive returns the agent's archive of that name, or ErrNotFound.
	GetArchive(ctx context.Context, agentID, name string) (Archive, error)
	// ArchivesOf lists the agent's archives, oldest first.
	ArchivesOf(ctx context.Context, agentID string) ([]Archive, error)
	// DeleteArchive removes the agent's archive of that name and returns
	// it, or ErrNotFound.
	DeleteArchive(ctx context.Context, agentID, name string) (Archive, error)
	// ArchiveKeys lists every recorded object key, to tell stored objects
	// that no archive names (left by a crash) from the rest.
	ArchiveKeys(ctx context.Context) ([]string, error)
	// Stored sums the archive bytes of every agent that has any.
	Stored(ctx context.Context) ([]StoredRow, error)
	// TouchSession moves a running persistent session's idle-sleep time to
	// sleepAt; a session that is not running is left as it is.
	TouchSession(ctx context.Context, id string, sleepAt time.Time) error
}
