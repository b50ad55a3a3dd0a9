// Package computerd is the protocol of the daemon that runs inside every
// Berth computer: its wire types, limits and error codes. The server lives in
// images/computerd/server and the Go client in this package (client.go).
package computerd

import "github.com/berthdev/berth/internal/httpjson"

// Port is the TCP port computerd listens on inside every computer.
const Port = 7070

// Home is the computer user's home folder; relative paths resolve against it.
const Home = "/home/berth"

// Environment variables that configure computerd inside a computer.
const (
	// EnvTokenHash holds the hex SHA-256 of the computer's token (see
	// internal/token). computerd never learns the token itself.
	EnvTokenHash = "BERTH_TOKEN_SHA256"
	// EnvComputerID holds the computer's id, for logs and health.
	EnvComputerID = "BERTH_COMPUTER_ID"
	// EnvListen overrides the listen address (default ":7070").
	EnvListen = "BERTH_LISTEN"
	// EnvExpiresAt, when set, is an RFC 3339 time at which computerd
	// shuts down as it does on SIGTERM and exits, ending the computer
	// whose first process it is: the lease's end on a provider that has
	// no lifetime of its own, should the supervisor be gone by then.
	EnvExpiresAt = "BERTH_EXPIRES_AT"
)

// Limits computerd enforces on every request.
const (
	// MaxExecTimeoutMs bounds one buffered exec (the supervisor applies the
	// tighter 120 s tool limit itself).
	MaxExecTimeoutMs = 24 * 60 * 60 * 1000
	// DefaultOutputBytes is the per-stream output bound when a request sets none.
	DefaultOutputBytes = 64 << 10
	// MaxOutputBytes is the largest per-stream bound a request may ask for.
	MaxOutputBytes = 8 << 20
	// MaxStdinBytes bounds the stdin of a buffered exec.
	MaxStdinBytes = 1 << 20
	// DefaultReadChars is the read size when a request sets no limit.
	DefaultReadChars = 24000
	// MaxReadChars is the largest read limit a request may ask for.
	MaxReadChars = 1 << 20
	// MaxWriteBytes bounds a JSON write (uploads stream and have no bound but the disk).
	MaxWriteBytes = 4 << 20
	// MaxListEntries bounds one folder listing; ListResult.Truncated marks
	// a folder that holds more.
	MaxListEntries = 10000
)

// TimeoutExitCode is the exit code of a command stopped at its timeout (as
// with timeout(1)); the result's TimedOut flag tells it apart from a command
// that exits with 124 itself.
const TimeoutExitCode = 124

// ExecRequest runs Command with /bin/sh -c in its own process group.
type ExecRequest struct {
	Command        string            `json:"command"`
	Stdin          string            `json:"stdin,omitempty"`
	TimeoutMs      int64             `json:"timeoutMs"`
	MaxOutputBytes int               `json:"maxOutputBytes,omitempty"` // per stream
	Cwd            string            `json:"cwd,omitempty"`            // default Home
	Env            map[string]string `json:"env,omitempty"`
}

// ExecResult is the outcome of a buffered exec. When a stream exceeded its
// bound, its head and tail are kept around a marker line and its Truncated
// flag is set; the byte totals count everything the command wrote.
type ExecResult struct {
	ExitCode        int    `json:"exitCode"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdoutTruncated"`
	StderrTruncated bool   `json:"stderrTruncated"`
	StdoutBytes     int64  `json:"stdoutBytes"`
	StderrBytes     int64  `json:"stderrBytes"`
	TimedOut        bool   `json:"timedOut"`
	DurationMs      int64  `json:"durationMs"`
}

// ReadResult is a slice of a UTF-8 text file. Offsets count characters
// (Unicode code points), not bytes.
type ReadResult struct {
	Path       string `json:"path"`
	Content    string `json:"content"`
	Offset     int64  `json:"offset"`
	NextOffset int64  `json:"nextOffset"` // offset of the first character not returned
	Truncated  bool   `json:"truncated"`  // more characters follow NextOffset
	Size       int64  `json:"size"`       // file size in bytes
}

// WriteRequest replaces a file atomically: the old content stays intact
// unless the whole new content was written and synced.
type WriteRequest struct {
	Path    string `json:"path"`
	Content string `json:"content"`
	Mode    uint32 `json:"mode,omitempty"` // default 0644
	// MkdirAll creates missing parent folders.
	MkdirAll bool `json:"mkdirAll,omitempty"`
}

// WriteResult reports what is on disk after a write or upload: the size and
// SHA-256 are read back from the file, not from the request.
type WriteResult struct {
	Path   string `json:"path"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// FileInfo describes one file.
type FileInfo struct {
	Name    string `json:"name"`
	Path    string `json:"path"`
	Type    string `json:"type"` // "file", "dir", "symlink" or "other"
	Size    int64  `json:"size"`
	Mode    uint32 `json:"mode"`
	ModTime int64  `json:"modTime"` // Unix milliseconds
}

// ListResult lists a folder, sorted by name. A folder with more than
// MaxListEntries entries is cut to the first ones by name and marked
// Truncated; Total counts them all.
type ListResult struct {
	Path      string     `json:"path"`
	Entries   []FileInfo `json:"entries"`
	Total     int        `json:"total"`
	Truncated bool       `json:"truncated,omitempty"`
}

// Process is one entry of the process list.
type Process struct {
	PID     int    `json:"pid"`
	PPID    int    `json:"ppid"`
	PGID    int    `json:"pgid"`
	State   string `json:"state"`
	RSSKiB  int64  `json:"rssKiB"`
	Command string `json:"command"`
}

// KillRequest signals a process (or its group when Group is set).
type KillRequest struct {
	PID    int    `json:"pid"`
	Signal string `json:"signal,omitempty"` // "TERM" by default; "KILL", "INT", "HUP", ...
	Group  bool   `json:"group,omitempty"`
}

// Health is the answer of GET /healthz.
type Health struct {
	Status     string `json:"status"`
	Version    string `json:"version"`
	ComputerID string `json:"computerId,omitempty"`
	// Screen is the desktop's screen on a desktop computer: ScreenStarting
	// until it has answered a first screenshot, then ScreenReady, or
	// ScreenUnavailable when it did not answer in time. Empty without a
	// desktop.
	Screen string `json:"screen,omitempty"`
}

// The states of Health.Screen.
const (
	ScreenStarting    = "starting"
	ScreenReady       = "ready"
	ScreenUnavailable = "unavailable"
)

// Error is the error of every failed request, inside the envelope
// {"error": {...}}.
type Error = httpjson.Error

// ErrorBody is the envelope of an error answer.
type ErrorBody = httpjson.ErrorBody

// Error codes computerd answers with.
const (
	CodeUnauthorized = "unauthorized" // 401: missing or wrong token
	CodeBadRequest   = "bad_request"  // 400
	CodeNotFound     = "not_found"    // 404: no such file or process
	CodeNotUTF8      = "not_utf8"     // 422: the file is not UTF-8 text
	CodeTooLarge     = "too_large"    // 413/422: over a limit
	CodeIsDir        = "is_directory" // 422
	CodePermission   = "permission"   // 403: the computer user may not
	CodeInternal     = "internal"     // 500
	CodeBusy         = "busy"         // 409: an archive or restore already runs
	CodeBadArchive   = "bad_archive"  // 422: a restore's stream is corrupt or hostile
)

// Streamed exec (GET /v1/exec/stream, a websocket). The client's first
// message is a text frame holding a StreamStart. After it, binary frames
// carry data with a one-byte channel prefix (StreamStdin from the client,
// StreamStdout and StreamStderr from the server), and text frames carry
// StreamControl messages both ways. The server's last message is a control
// of type "exit", then it closes the socket.
const (
	StreamStdin  byte = 0
	StreamStdout byte = 1
	StreamStderr byte = 2
)

// StreamStart opens a streamed exec.
type StreamStart struct {
	Command   string `json:"command"`
	TimeoutMs int64  `json:"timeoutMs,omitempty"` // 0: none
	// PTY runs the command on a pseudo-terminal of Cols x Rows (default
	// 80x24): its output, stderr included, comes on StreamStdout, and
	// close_stdin sends end-of-file (^D) instead of closing.
	PTY  bool              `json:"pty,omitempty"`
	Cols uint16            `json:"cols,omitempty"`
	Rows uint16            `json:"rows,omitempty"`
	Cwd  string            `json:"cwd,omitempty"`
	Env  map[string]string `json:"env,omitempty"`
}

// StreamControl is a control message of a streamed exec. Types: "signal"
// (client: Signal), "close_stdin" (client), "resize" (client, PTY only:
// Cols, Rows), "exit" (server: ExitCode, TimedOut, Error). An exit with
// Error set means the command could not be started or the stream failed;
// Code then holds one of the error codes.
type StreamControl struct {
	Type     string `json:"type"`
	Signal   string `json:"signal,omitempty"`
	Cols     uint16 `json:"cols,omitempty"`
	Rows     uint16 `json:"rows,omitempty"`
	ExitCode int    `json:"exitCode,omitempty"`
	TimedOut bool   `json:"timedOut,omitempty"`
	Error    string `json:"error,omitempty"`
	Code     string `json:"code,omitempty"`
}
