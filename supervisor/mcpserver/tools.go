package mcpserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/berthdev/berth/internal/units"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/berthdev/berth/api"
)

// Limits of the tools, the same as the supervisor's. The server checks them
// before it calls the supervisor, which checks them again.
const (
	MaxExecTimeoutSeconds     = 120
	DefaultExecTimeoutSeconds = 60
	MaxCommandChars           = 100000
	ExecOutputBytes           = 16 << 10 // per stream, head and tail kept
	MaxReadChars              = 24000
	MaxWriteChars             = 16000
	MaxPathChars              = 4096 // bytes
	// MaxCheckpointNameChars bounds a checkpoint's name, made of letters,
	// digits, '.', '_' and '-' and starting with a letter or digit.
	MaxCheckpointNameChars = api.MaxCheckpointNameChars
)

// Tool names.
const (
	ToolStart      = "computer_start"
	ToolExec       = "computer_exec"
	ToolReadFile   = "computer_read_file"
	ToolWriteFile  = "computer_write_file"
	ToolStop       = "computer_stop"
	ToolCheckpoint = "computer_checkpoint"
)

// uncertainAdvice is what a model is told when an exec's outcome is unknown.
const uncertainAdvice = "It may or may not have run, and it will not be re-run automatically. " +
	"Inspect the computer (files, processes) before running a command that could repeat a side effect."

// persistentNote is what the descriptions that speak of a session's end say
// of persistent computers.
var persistentNote = fmt.Sprintf("A persistent computer (one connected with persistence home) keeps the files of its home folder, and only those: "+
	"computer_stop, the session's expiry and %d minutes without tool calls (unless configured otherwise) put it to sleep, archiving the home, "+
	"and the next computer_start wakes it with the home restored. Processes do not survive a sleep and wake, nor do files outside the home (such as /tmp): "+
	"start again what must run. A computer connected with persistence memory is suspended instead, and the next computer_start resumes it "+
	"with its processes and /tmp as they were; when it cannot be resumed, it wakes from its home as above.", api.DefaultIdleSleepSeconds/60)

// instructions is what the server tells the model about the tools as a
// whole.
var instructions = fmt.Sprintf(`These tools drive one Linux computer.
Call computer_start first; it reports how many seconds the session has left. Files and processes
survive between calls until computer_stop or the session's expiry, which discard everything
(except the home folder of a persistent computer, see below).
computer_exec runs one shell command for at most %d s (never past the session's end); its output
is bounded and truncation is marked. Start long jobs in the background with their output redirected
(nohup cmd >/tmp/job.log 2>&1 &) and poll the log. An exec reported uncertain may or may not have run
and is never re-run automatically: inspect the computer before repeating anything with side effects.
computer_read_file reads up to %s characters per call (continue at the offset it gives);
computer_write_file writes up to %s characters and verifies size and sha256.
%s
computer_checkpoint saves the home folder of a persistent computer under a name, and
computer_start with that checkpoint starts from it after computer_stop.`,
	MaxExecTimeoutSeconds, thousands(MaxReadChars), thousands(MaxWriteChars), persistentNote)

var (
	startDescription = "Start this agent's Linux computer, or return the session that is already running. " +
		"The answer gives the session's state and remainingSeconds: the session ends at expiresAt whatever happens. " +
		"Files and processes survive between tool calls until computer_stop or the session's expiry; " +
		"after that the next start begins with an empty computer, unless the computer is persistent. " + persistentNote + " " +
		"checkpoint (persistent computers only) starts from a checkpoint saved by computer_checkpoint in place of the last sleep; it is refused while a session runs, so call computer_stop first. " +
		"Call it before the other computer tools; calling it again while a session runs is harmless."

	execDescription = fmt.Sprintf("Run a shell command (/bin/sh -c) on the computer and return its exit code, stdout and stderr. "+
		"timeoutSeconds is 1 to %d (default %d): the command and its processes are killed at the timeout, and it never runs past the session's remaining time. "+
		"stdout and stderr are each bounded to %d bytes: a longer stream keeps its head and tail, the middle is cut, and the result is marked truncated (never silently); "+
		"redirect big output to a file and read it with computer_read_file. "+
		"A background process must redirect its output and detach, for example `nohup cmd >/tmp/cmd.log 2>&1 &`, or the call waits for it until the timeout. "+
		"If the result is marked uncertain, the computer or its link failed during the call: the command may or may not have run, and it is never re-run automatically; "+
		"inspect the computer (files, processes) before repeating anything with side effects. "+
		"Files and processes survive between calls until computer_stop or the session's expiry (or a persistent computer's idle sleep, after which only the home folder's files remain).",
		MaxExecTimeoutSeconds, DefaultExecTimeoutSeconds, ExecOutputBytes)

	readDescription = fmt.Sprintf("Read a UTF-8 text file on the computer: up to %s characters from offset (counted in characters, default 0). "+
		"When the file is longer the result is marked truncated and gives nextOffset: call again with offset set to it to read on. "+
		"Files that are not UTF-8 text are refused; inspect those with computer_exec (file, xxd, base64).",
		thousands(MaxReadChars))

	writeDescription = fmt.Sprintf("Write a UTF-8 text file on the computer, replacing it whole and creating missing parent folders. "+
		"content is at most %s characters; write a longer file in parts (separate files joined with computer_exec, e.g. `cat part1 part2 > file`). "+
		"The write is verified on the computer by size and sha256 before the call answers, and the answer reports both.",
		thousands(MaxWriteChars))

	stopDescription = "Stop the computer and discard its session; the unused time returns to the daily budget. " +
		"Every process on it is gone. On a computer that is not persistent every file is gone too, and the next computer_start begins with an empty computer. " +
		"On a persistent computer the files of the home folder are archived first and the next computer_start restores them; " +
		"processes do not survive that sleep and wake, and files outside the home are gone, except on a computer connected with persistence memory, " +
		"which is suspended and resumed with its processes."

	checkpointDescription = fmt.Sprintf("Save the home folder of this persistent computer as a checkpoint called name; the computer keeps running. "+
		"Only for a persistent computer (one connected with persistence home): on any other computer it is refused. "+
		"A checkpoint holds the files of the home folder only: no process, and no file outside the home (such as /tmp). "+
		"Later, computer_start with checkpoint set to the name starts the computer from it (after computer_stop), in place of its last sleep; "+
		"processes must be started again then. "+
		"name is 1 to %d characters: letters, digits, '.', '_' and '-', starting with a letter or digit; it must not be taken already. "+
		"A computer keeps a limited number of checkpoints (%d unless configured otherwise); the operator deletes old ones. A large home takes a while to save.",
		MaxCheckpointNameChars, api.DefaultMaxCheckpoints)
)

// Inputs of the tools.
type (
	noInput    struct{}
	startInput struct {
		Checkpoint string `json:"checkpoint,omitempty"`
	}
	checkpointInput struct {
		Name string `json:"name"`
	}
	execInput struct {
		Command        string `json:"command"`
		TimeoutSeconds *int   `json:"timeoutSeconds,omitempty"`
	}
	readInput struct {
		Path   string `json:"path"`
		Offset *int64 `json:"offset,omitempty"`
	}
	writeInput struct {
		Path    string `json:"path"`
		Content string `json:"content"`
	}
)

func objectSchema(props map[string]*jsonschema.Schema, required ...string) *jsonschema.Schema {
	return &jsonschema.Schema{
		Type:                 "object",
		Properties:           props,
		Required:             required,
		AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}},
	}
}

func ptr[T any](v T) *T { return &v }

func (s *Server) addTools() {
	pathSchema := func(what string) *jsonschema.Schema {
		return &jsonschema.Schema{Type: "string", Description: what + " Absolute, or relative to the home folder."}
	}
	addTool(s, &mcp.Tool{
		Name: ToolStart, Title: "Start the computer", Description: startDescription,
		InputSchema: objectSchema(map[string]*jsonschema.Schema{
			"checkpoint": checkpointSchema("Persistent computers only: the checkpoint to start from, in place of the last sleep. Refused while a session runs."),
		}),
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: ptr(false), OpenWorldHint: ptr(false)},
	}, s.start)
	addTool(s, &mcp.Tool{
		Name: ToolExec, Title: "Run a shell command", Description: execDescription,
		InputSchema: objectSchema(map[string]*jsonschema.Schema{
			"command": {Type: "string", Description: "The shell command, run by /bin/sh -c in the home folder."},
			"timeoutSeconds": {Type: "integer", Description: fmt.Sprintf(
				"Seconds the command may run: 1 to %d, default %d; never past the session's remaining time.",
				MaxExecTimeoutSeconds, DefaultExecTimeoutSeconds)},
		}, "command"),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(true)},
	}, s.exec)
	addTool(s, &mcp.Tool{
		Name: ToolReadFile, Title: "Read a text file", Description: readDescription,
		InputSchema: objectSchema(map[string]*jsonschema.Schema{
			"path": pathSchema("The file to read."),
			"offset": {Type: "integer", Description: fmt.Sprintf(
				"Where to start, in characters (default 0): the nextOffset of a truncated read. At most %s characters are read per call.",
				thousands(MaxReadChars))},
		}, "path"),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, s.readFile)
	addTool(s, &mcp.Tool{
		Name: ToolWriteFile, Title: "Write a text file", Description: writeDescription,
		InputSchema: objectSchema(map[string]*jsonschema.Schema{
			"path":    pathSchema("The file to write."),
			"content": {Type: "string", Description: fmt.Sprintf("The whole new content, at most %s characters.", thousands(MaxWriteChars))},
		}, "path", "content"),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, s.writeFile)
	addTool(s, &mcp.Tool{
		Name: ToolStop, Title: "Stop the computer", Description: stopDescription,
		InputSchema: objectSchema(nil),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, s.stop)
	addTool(s, &mcp.Tool{
		Name: ToolCheckpoint, Title: "Save the home folder as a checkpoint", Description: checkpointDescription,
		InputSchema: objectSchema(map[string]*jsonschema.Schema{
			"name": checkpointSchema("The new checkpoint's name."),
		}, "name"),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(false), OpenWorldHint: ptr(false)},
	}, s.checkpoint)
}

// checkpointSchema is the schema of a checkpoint's name.
func checkpointSchema(what string) *jsonschema.Schema {
	return &jsonschema.Schema{Type: "string", Description: fmt.Sprintf(
		"%s 1 to %d characters: letters, digits, '.', '_' and '-', starting with a letter or digit.", what, MaxCheckpointNameChars)}
}

// addTool registers a tool whose run function gets a context that carries
// the call's idempotency key, and answers the structured result with the
// text the model reads.
func addTool[In, Out any](s *Server, t *mcp.Tool, run func(context.Context, In) (Out, []string, error)) {
	name := t.Name
	mcp.AddTool(s.mcp, t, func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		var zero Out
		if s.draining.Load() {
			return nil, zero, fmt.Errorf("%s was not run: the MCP server is shutting down; call it again once the server is back", name)
		}
		key := s.callKey(req)
		if key != "" {
			ctx = api.WithIdempotencyKey(ctx, key)
		}
		start := time.Now()
		out, texts, err := run(ctx, in)
		if err != nil {
			s.log.Info("tool call failed", "tool", name, "key", key, "duration", time.Since(start), "err", err)
			return nil, zero, toolError(name, err)
		}
		s.log.Debug("tool call", "tool", name, "key", key, "duration", time.Since(start))
		res := &mcp.CallToolResult{}
		for _, text := range texts {
			res.Content = append(res.Content, &mcp.TextContent{Text: text})
		}
		return res, out, nil
	})
}

// failure is an error the server found itself, such as a mistake in a
// tool's arguments; its message is shown as it is.
type failure struct{ msg string }

func (e *failure) Error() string { return e.msg }

func failf(format string, args ...any) error {
	return &failure{fmt.Sprintf(format, args...)}
}

// toolError turns the failure of a call into the text of a tool error.
func toolError(tool string, err error) error {
	var f *failure
	var ae *api.APIError
	switch {
	case errors.As(err, &f):
		return fmt.Errorf("%s: %s", tool, f.msg)
	case errors.As(err, &ae):
		msg := ae.Message
		if msg == "" {
			msg = "the supervisor answered without a message"
		}
		code := ae.Code
		if code == "" {
			code = "none"
		}
		return fmt.Errorf("%s failed: %s (code %s, HTTP %d)", tool, msg, code, ae.Status)
	case errors.Is(err, api.ErrAgentID):
		return fmt.Errorf("%s failed: this server has no agent id", tool)
	case neverSent(err):
		return fmt.Errorf("%s failed: cannot reach the supervisor (%v); nothing was done, try again later", tool, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s was cancelled before the supervisor answered", tool)
	}
	return fmt.Errorf("%s failed: no answer from the supervisor (%v); calling it again is safe", tool, err)
}

// neverSent reports whether err shows that the request never reached the
// supervisor.
func neverSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func (s *Server) start(ctx context.Context, in startInput) (api.Session, []string, error) {
	var (
		x   *api.Session
		err error
	)
	if in.Checkpoint != "" {
		if err := checkCheckpointName("checkpoint", in.Checkpoint); err != nil {
			return api.Session{}, nil, err
		}
		x, err = s.c.StartFrom(ctx, s.agent, in.Checkpoint)
	} else {
		x, err = s.c.Start(ctx, s.agent)
	}
	if err != nil {
		return api.Session{}, nil, err
	}
	if x == nil {
		return api.Session{}, nil, failf("the supervisor answered without a session")
	}
	if !x.Live() {
		return api.Session{}, nil, failf("the supervisor answered session %s %s: no computer was started; call computer_start again", x.ID, x.State)
	}
	text := startText(x)
	if in.Checkpoint != "" && x.State == api.StateRunning {
		text += fmt.Sprintf(" Started from checkpoint %s: the files of its home folder are back; no process from before runs.", in.Checkpoint)
	}
	return *x, []string{text}, nil
}

func startText(x *api.Session) string {
	if x.State != api.StateRunning {
		msg := fmt.Sprintf("Session %s is %s.", x.ID, x.State)
		if x.Message != "" {
			msg += " " + x.Message
		}
		return msg
	}
	if b := x.Browser; b != nil {
		return fmt.Sprintf("Browser running: session %s on %s, %d s left, until %s. It has no shell or files: "+
			"drive it over its CDP URL %s (live view: %s); computer_stop releases it.",
			x.ID, x.Provider, x.RemainingSeconds, x.ExpiresAt.UTC().Format(time.RFC3339), b.CDPURL, b.LiveViewURL)
	}
	image := ""
	if x.Image != "" {
		image = ", image " + x.Image
	}
	return fmt.Sprintf("Computer running: session %s on %s%s. %d s left, until %s. "+
		"Files and processes survive between calls until computer_stop or expiry.",
		x.ID, x.Provider, image, x.RemainingSeconds, x.ExpiresAt.UTC().Format(time.RFC3339))
}

func (s *Server) exec(ctx context.Context, in execInput) (api.ExecResult, []string, error) {
	if strings.TrimSpace(in.Command) == "" {
		return api.ExecResult{}, nil, failf("command: required, and not only spaces")
	}
	if n := utf8.RuneCountInString(in.Command); n > MaxCommandChars {
		return api.ExecResult{}, nil, failf("command: %d characters, at most %d; write a long script with computer_write_file and run the file", n, MaxCommandChars)
	}
	req := api.ExecRequest{Command: in.Command}
	if in.TimeoutSeconds != nil {
		t := *in.TimeoutSeconds
		if t < 1 || t > MaxExecTimeoutSeconds {
			return api.ExecResult{}, nil, failf("timeoutSeconds: %d is outside 1..%d (seconds); run a longer job in the background with its output redirected to a file (nohup cmd >/tmp/job.log 2>&1 &) and poll the file", t, MaxExecTimeoutSeconds)
		}
		req.TimeoutSeconds = t
	}
	res, err := s.c.Exec(ctx, s.agent, req)
	if err != nil {
		var ae *api.APIError
		if errors.As(err, &ae) || neverSent(err) || ctx.Err() != nil || errors.Is(err, api.ErrAgentID) {
			return api.ExecResult{}, nil, err
		}
		// The request may have reached the supervisor: the command may
		// be running, or have run.
		s.log.Warn("exec outcome lost", "err", err)
		res = &api.ExecResult{
			ExitCode: -1, Uncertain: true,
			Advice: fmt.Sprintf("The command's result was lost: the supervisor did not answer (%v). %s", err, uncertainAdvice),
		}
	}
	return *res, []string{execText(res)}, nil
}

// execText is what the model reads of an exec: the exit code and markers
// first, then the streams.
func execText(r *api.ExecResult) string {
	var b strings.Builder
	switch {
	case r.Uncertain:
		b.WriteString("exit code: unknown [uncertain]\n")
	case r.TimedOut:
		fmt.Fprintf(&b, "exit code: %d [timed out]\n", r.ExitCode)
	default:
		fmt.Fprintf(&b, "exit code: %d\n", r.ExitCode)
	}
	switch {
	case r.Advice != "":
		b.WriteString(r.Advice + "\n")
	case r.Uncertain:
		b.WriteString("The command's result was lost (the computer or the link failed while it ran). " + uncertainAdvice + "\n")
	case r.TimedOut:
		b.WriteString("The command was stopped at its timeout and its processes were killed. Run long jobs in the background with their output redirected to a file, then poll the file.\n")
	}
	if r.Truncated {
		fmt.Fprintf(&b, "[truncated] stdout or stderr was longer than %d bytes: its head and tail are kept around a marker line. Redirect the output to a file and read it with computer_read_file to see all of it.\n", ExecOutputBytes)
	}
	if r.Uncertain {
		return strings.TrimSuffix(b.String(), "\n")
	}
	section := func(name, text string) {
		if text == "" {
			fmt.Fprintf(&b, "%s: (empty)\n", name)
			return
		}
		fmt.Fprintf(&b, "--- %s ---\n%s", name, text)
		if !strings.HasSuffix(text, "\n") {
			b.WriteString("\n")
		}
	}
	section("stdout", r.Stdout)
	section("stderr", r.Stderr)
	return strings.TrimSuffix(b.String(), "\n")
}

// checkPath checks a path argument as the supervisor does.
func checkPath(p string) error {
	switch {
	case strings.TrimSpace(p) == "":
		return failf("path: required")
	case len(p) > MaxPathChars:
		return failf("path: %d bytes, at most %d", len(p), MaxPathChars)
	case strings.ContainsRune(p, 0):
		return failf("path: contains a NUL character")
	}
	return nil
}

func (s *Server) readFile(ctx context.Context, in readInput) (api.ReadFileResult, []string, error) {
	if err := checkPath(in.Path); err != nil {
		return api.ReadFileResult{}, nil, err
	}
	req := api.ReadFileRequest{Path: in.Path}
	if in.Offset != nil {
		if *in.Offset < 0 {
			return api.ReadFileResult{}, nil, failf("offset: %d must not be negative", *in.Offset)
		}
		req.Offset = *in.Offset
	}
	res, err := s.c.ReadFile(ctx, s.agent, req)
	if err != nil {
		return api.ReadFileResult{}, nil, err
	}
	if res.Truncated && res.NextOffset <= req.Offset {
		return api.ReadFileResult{}, nil, failf("the supervisor marked %s truncated at offset %d without a later offset to continue from", in.Path, req.Offset)
	}
	n := utf8.RuneCountInString(res.Content)
	switch {
	case res.Truncated:
		return *res, []string{res.Content, fmt.Sprintf(
			"[truncated] This is part of %s: %d characters from offset %d. The file continues: call computer_read_file with offset %d to read on.",
			in.Path, n, req.Offset, res.NextOffset)}, nil
	case n == 0:
		return *res, []string{fmt.Sprintf("[empty] %s has no characters from offset %d on.", in.Path, req.Offset)}, nil
	}
	return *res, []string{res.Content}, nil
}

func (s *Server) writeFile(ctx context.Context, in writeInput) (api.WriteFileResult, []string, error) {
	if err := checkPath(in.Path); err != nil {
		return api.WriteFileResult{}, nil, err
	}
	if !utf8.ValidString(in.Content) {
		return api.WriteFileResult{}, nil, failf("content: not valid UTF-8")
	}
	if n := utf8.RuneCountInString(in.Content); n > MaxWriteChars {
		return api.WriteFileResult{}, nil, failf("content: %d characters, at most %d; write the file in parts (separate files joined with computer_exec, e.g. `cat part1 part2 > file`)", n, MaxWriteChars)
	}
	res, err := s.c.WriteFile(ctx, s.agent, api.WriteFileRequest{Path: in.Path, Content: in.Content})
	if err != nil {
		return api.WriteFileResult{}, nil, err
	}
	sum := sha256.Sum256([]byte(in.Content))
	want := hex.EncodeToString(sum[:])
	if res.Bytes != int64(len(in.Content)) || res.SHA256 != want {
		return api.WriteFileResult{}, nil, failf("the write to %s could not be verified: the computer reports %d bytes with sha256 %s, expected %d bytes with sha256 %s",
			in.Path, res.Bytes, res.SHA256, len(in.Content), want)
	}
	return *res, []string{fmt.Sprintf("Wrote %s: %d bytes, sha256 %s, verified on the computer.", in.Path, res.Bytes, res.SHA256)}, nil
}

func (s *Server) stop(ctx context.Context, _ noInput) (api.Session, []string, error) {
	x, err := s.c.Stop(ctx, s.agent)
	if err != nil {
		return api.Session{}, nil, err
	}
	if x == nil {
		return api.Session{}, []string{"The computer is stopped."}, nil
	}
	text := fmt.Sprintf("Session %s is %s: its processes are gone. A persistent computer keeps the files of its home folder for the next computer_start; "+
		"on any other every file is discarded, and computer_start begins a new, empty computer.", x.ID, x.State)
	if x.Message != "" {
		text += " " + x.Message
	}
	return *x, []string{text}, nil
}

// checkpointRE is the form of a checkpoint's name, as the supervisor takes it.
var checkpointRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// checkCheckpointName checks a checkpoint name argument as the supervisor
// does.
func checkCheckpointName(field, name string) error {
	switch {
	case name == "":
		return failf("%s: required", field)
	case len(name) > MaxCheckpointNameChars:
		return failf("%s: %d characters, at most %d", field, len(name), MaxCheckpointNameChars)
	case !checkpointRE.MatchString(name):
		return failf("%s: %q must be letters, digits, '.', '_' and '-', starting with a letter or digit", field, name)
	}
	return nil
}

func (s *Server) checkpoint(ctx context.Context, in checkpointInput) (api.Archive, []string, error) {
	if err := checkCheckpointName("name", in.Name); err != nil {
		return api.Archive{}, nil, err
	}
	a, err := s.c.Checkpoint(ctx, s.agent, in.Name)
	if err != nil {
		return api.Archive{}, nil, err
	}
	return *a, []string{fmt.Sprintf("Saved checkpoint %s: %s of the home folder, made on image %s at %s. The computer keeps running. "+
		"After computer_stop, computer_start with checkpoint %q starts from it: its files only, no process.",
		a.Name, units.Bytes(a.Bytes), a.Image, a.CreatedAt.UTC().Format(time.RFC3339), a.Name)}, nil
}

// thousands writes n with commas, as in 24,000.
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
