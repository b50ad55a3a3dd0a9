package computerd

// Home archives (GET and PUT /v1/archive): a persistent computer's home
// folder leaves the computer as one stream and comes back into a new one.
//
// The stream is a tar archive (POSIX pax) compressed with zstd, format
// ArchiveFormat: a series of zstd frames of up to 2 MiB of the tar each,
// which computerd compresses side by side on the computer's cores (all
// but one with ?background=1, for a computer that keeps running). It holds the home's contents, not the home folder itself,
// with relative names ("notes/a.txt", "notes/"), numeric owners (uid and
// gid, no names), permissions, nanosecond modification times, symbolic
// links as links (never followed) and hard links as links. Sparse files are
// stored in GNU tar's sparse format 1.0: their holes are not read or
// stored. Fifos, sockets and device files are left out and counted, and so
// are folders on another filesystem mounted inside the home. GNU tar reads
// the stream: `zstd -d | tar -x`.
//
// Archiving reads each file as it is at that moment: run it while no
// command writes to the home for a consistent whole. A file that shrinks
// while it is read is padded with zeros to the size it had when its entry
// began, and counted in ArchiveInfo.Changed; a file that grows is stored
// at that size.
//
// Integrity: the server ends the stream with the HTTP trailer
// ArchiveInfoTrailer, holding its ArchiveInfo (the stream's byte count and
// SHA-256 among it), or ArchiveErrorTrailer when the archive failed after
// the answer began. The client hashes what it receives and fails the call
// when the trailer is missing, reports an error, or disagrees. A stream
// cut short also fails to restore: a zstd frame or the tar's end is
// missing.
// Proxies on the way to a hosted computer may drop trailers, so the answer
// also names the archive (ArchiveIDHeader), and GET ArchiveOutcomePath
// with ?id= gives the same outcome once the stream has ended (computerd
// keeps the last few): the client asks for it when no trailer came.
//
// Restoring (PUT /v1/archive, the stream as the body) replaces the home's
// contents with the archive's, or changes nothing: the archive is unpacked
// into a staging folder inside the home (RestoreStagingPrefix), on the
// home's filesystem, and only when every entry is in place are the home's
// old contents moved aside and the new ones moved in; then the old
// contents are removed. A failed restore answers an error and leaves the
// home as it was. One archive or restore runs at a time; another answers
// 409 CodeBusy. Restore is meant for a computer where no command runs yet.
//
// A restore refuses, with 422 CodeBadArchive and nothing written outside
// the staging folder (which it removes): a name that is absolute, holds a
// ".." element, is longer than MaxArchiveNameBytes or has an element longer
// than MaxArchiveNameElement bytes; an entry beneath a symbolic link or a
// file; a hard link to anything but a regular file that came earlier in
// the same archive; a device, fifo or any type but file, folder, symbolic
// link and hard link; a duplicate name; a stream that is not zstd, not
// tar, cut short or followed by anything. It refuses with 413 CodeTooLarge
// an archive whose file contents pass the byte limit (RestoreOptions
// MaxBytes, and never more than the home filesystem's free space), whose
// entries pass the entry limit, or whose sparse files' holes pass
// MaxRestoreHoleBytes; it stops reading at the limit. The filesystem's own
// quota stops it too (507). Setuid and setgid bits are not restored.
// Owners are restored when computerd runs as root; otherwise every file
// belongs to computerd's user.
//
// Durability: a restored home is not synced to disk; the archive it came
// from stays the copy of record until a newer one is made.

// ArchiveFormat names the stream's format: tar (pax) in zstd, as described
// above. A later incompatible format gets a new name.
const ArchiveFormat = "berth-home/1"

// ArchiveContentType is the media type of an archive stream.
const ArchiveContentType = "application/zstd"

// HTTP headers and trailers of the archive API.
const (
	// ArchiveFormatHeader carries ArchiveFormat on an archive answer and,
	// optionally, on a restore request (a restore refuses another format).
	ArchiveFormatHeader = "Berth-Archive-Format"
	// ArchiveInfoTrailer is the trailer of a complete archive: its
	// ArchiveInfo as JSON.
	ArchiveInfoTrailer = "Berth-Archive-Info"
	// ArchiveErrorTrailer is the trailer of an archive that failed after
	// its answer began: an Error as JSON. The stream before it is partial.
	ArchiveErrorTrailer = "Berth-Archive-Error"
	// ArchiveIDHeader names an archive answer, for ArchiveOutcomePath.
	ArchiveIDHeader = "Berth-Archive-Id"
)

// ArchiveOutcomePath answers (GET, ?id=) an ArchiveOutcome for one of the
// last archives computerd streamed; 404 for one it does not know or that
// has not ended.
const ArchiveOutcomePath = "/v1/archive/outcome"

// ArchiveOutcome is how an archive stream ended: Info for a complete one,
// Error for one that failed after its answer began.
type ArchiveOutcome struct {
	Info  *ArchiveInfo `json:"info,omitempty"`
	Error *Error       `json:"error,omitempty"`
}

// Restore limits.
const (
	// MaxArchiveNameBytes bounds an entry's name (and a link's target).
	MaxArchiveNameBytes = 4095
	// MaxArchiveNameElement bounds one element of an entry's name.
	MaxArchiveNameElement = 255
	// DefaultRestoreMaxEntries is the entry limit of a restore that sets
	// none; a request may set a lower one, not a higher one.
	DefaultRestoreMaxEntries = 4_000_000
	// MaxRestoreHoleBytes bounds the holes of all the sparse files of one
	// restore (their size beyond their stored data): a hole costs no disk
	// but is read as zeros, so a forged size would cost time without end.
	MaxRestoreHoleBytes = 256 << 30
	// RestoreStagingPrefix starts the names of the folders a restore
	// works in, inside the home. An archive leaves them out; a restore
	// removes any a crashed restore left behind.
	RestoreStagingPrefix = ".berth-restore-"
)

// ArchiveInfo describes an archive stream, as the server made it and the
// client received it.
type ArchiveInfo struct {
	Format string `json:"format"` // ArchiveFormat
	Bytes  int64  `json:"bytes"`  // of the compressed stream
	SHA256 string `json:"sha256"` // hex SHA-256 of the compressed stream
	// Entries counts the tar entries (files, folders, links).
	Entries int64 `json:"entries"`
	// DataBytes counts the file contents stored (holes not included).
	DataBytes int64 `json:"dataBytes"`
	// Skipped counts what was left out: fifos, sockets, devices, and
	// folders of another filesystem mounted inside the home.
	Skipped int64 `json:"skipped"`
	// Changed counts files that shrank while they were read.
	Changed    int64 `json:"changed"`
	DurationMs int64 `json:"durationMs"`
}

// RestoreOptions are the query parameters of a restore.
type RestoreOptions struct {
	// MaxBytes bounds the file contents written, holes not included (0:
	// the home filesystem's free space, which also bounds a larger value).
	MaxBytes int64
	// MaxEntries bounds the entries (0: DefaultRestoreMaxEntries, which
	// also bounds a larger value).
	MaxEntries int64
	// SHA256, when set, is the hex SHA-256 the stream must have; the
	// restore is refused, the home unchanged, when it has another. When
	// empty the stream is not hashed (the caller has authenticated it)
	// and the result's SHA256 is empty.
	SHA256 string
}

// RestoreResult is the answer of a successful restore.
type RestoreResult struct {
	Format     string `json:"format"`     // ArchiveFormat
	Bytes      int64  `json:"bytes"`      // of the compressed stream
	SHA256     string `json:"sha256"`     // hex SHA-256 of the compressed stream, when one was asked for
	Entries    int64  `json:"entries"`    // tar entries restored
	DataBytes  int64  `json:"dataBytes"`  // file contents written, holes not included
	DurationMs int64  `json:"durationMs"` // from the request to the answer
}
