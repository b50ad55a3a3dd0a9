package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/objstore"
	"github.com/berthdev/berth/supervisor/store"
)

// Persistent computers (api.PersistenceHome). A session's Home says where
// the agent's home stands: HomeWake until it is restored into the machine
// (at start, or at the first tool call when a supervisor died between),
// HomeLive while the machine holds it, HomeArchived once the session's end
// archived it. Only a HomeLive machine is ever archived, so a machine that
// never got the home (a failed wake, a pool bind that failed) can never
// replace a good archive with an empty one. The archive is made by
// computerd, streamed through the supervisor, sealed (objstore.Encrypted)
// and committed to the object store only when whole; the store's record
// is written after the object, and the object it replaces deleted last. A
// crash anywhere leaves the last complete archive recorded; what it leaves
// in the object store unrecorded is swept after archiveOrphanAge.

// CodeArchive answers a wake from an archive that cannot be restored: it
// failed its integrity check in the object store, or computerd refused it.
const CodeArchive = "archive_refused" // 502

const (
	// archivePrefix holds every archive: archives/<agent>/<id>.
	archivePrefix = "archives/"
	// archiveOrphanAge is how old an object that no archive records must
	// be before the sweep removes it: older than any upload in flight.
	archiveOrphanAge = 6 * time.Hour
	// sweepEvery is how often the reaper sweeps the object store.
	sweepEvery = 15 * time.Minute
	// defaultArchiveTimeout bounds one archive or restore.
	defaultArchiveTimeout = time.Hour
	// defaultMaxArchiveBytes bounds one archive as computerd streams it.
	defaultMaxArchiveBytes = 64 << 30
	// touchEvery is how far a tool call must be from the last recorded
	// one before it moves the session's sleep time again.
	touchEvery = 10 * time.Second
)

var checkpointRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// checkCheckpointName checks a checkpoint's name as the API takes it.
func checkCheckpointName(field, name string) error {
	if name == "" {
		return badRequest("%s: required", field)
	}
	if len(name) > api.MaxCheckpointNameChars {
		return limitf("%s: %d characters, at most %d", field, len(name), api.MaxCheckpointNameChars)
	}
	if !checkpointRE.MatchString(name) {
		return badRequest("%s: %q must be letters, digits, '.', '_' and '-', starting with a letter or digit", field, name)
	}
	return nil
}

// persistence checks and completes the persistence settings of a new
// connection to provider p.
func (s *Service) persistence(ctx context.Context, r *ConnectRequest, provider string) error {
	switch r.Persistence {
	case "", api.PersistenceNone:
		r.Persistence = api.PersistenceNone
		if r.IdleSleepSeconds != nil || r.MaxCheckpoints != nil {
			return badRequest("idleSleepSeconds, maxCheckpoints: only with persistence %q or %q", api.PersistenceHome, api.PersistenceMemory)
		}
		return nil
	case api.PersistenceHome:
	case api.PersistenceMemory:
		if err := s.canSuspend(ctx, provider); err != nil {
			return err
		}
	default:
		return badRequest("persistence: %q must be %q, %q or %q", r.Persistence, api.PersistenceNone, api.PersistenceHome, api.PersistenceMemory)
	}
	if s.cfg.Objects == nil {
		return errorf(http.StatusConflict, CodeConflict, "persistence: this supervisor has no object store for archives (see OBJECT_STORE_URL)")
	}
	if _, ok := s.cfg.Providers[provider].(BrowserSession); ok {
		return badRequest("persistence: the %s provider gives hosted browsers, which have no home folder to keep", provider)
	}
	idle := api.DefaultIdleSleepSeconds
	if r.IdleSleepSeconds != nil {
		idle = *r.IdleSleepSeconds
	}
	if idle < api.MinIdleSleepSeconds || idle > api.MaxIdleSleepSeconds {
		return limitf("idleSleepSeconds: %d is outside %d..%d", idle, api.MinIdleSleepSeconds, api.MaxIdleSleepSeconds)
	}
	most := api.DefaultMaxCheckpoints
	if r.MaxCheckpoints != nil {
		most = *r.MaxCheckpoints
	}
	if most < 0 || most > api.MaxMaxCheckpoints {
		return limitf("maxCheckpoints: %d is outside 0..%d", most, api.MaxMaxCheckpoints)
	}
	r.IdleSleepSeconds, r.MaxCheckpoints = &idle, &most
	return nil
}

// homeOf sets the home fields of a new session of connection c: what it
// wakes from (checkpoint, or the sleep archive when there is one) and when
// it first sleeps for want of calls.
func (s *Service) homeOf(ctx context.Context, c store.Connection, checkpoint string, x *store.Session, now time.Time) error {
	if !api.KeepsHome(c.Persistence) {
		if checkpoint != "" {
			return errorf(http.StatusConflict, CodeConflict, "checkpoint: agent %q's computer does not keep its files (persistence %q)", c.AgentID, c.Persistence)
		}
		return nil
	}
	x.Home = store.HomeLive
	x.SleepAt = now.Add(time.Duration(c.IdleSleepSeconds) * time.Second)
	_, err := s.st.GetArchive(ctx, c.AgentID, checkpoint)
	switch {
	case err == nil:
		x.Home, x.WakeFrom = store.HomeWake, checkpoint
	case !errors.Is(err, store.ErrNotFound):
		return err
	case checkpoint != "":
		return errorf(http.StatusNotFound, CodeNotFound, "checkpoint %q of agent %q does not exist", checkpoint, c.AgentID)
	}
	return nil
}

// started finishes a start whose machine runs: a persistent computer is
// woken before the start answers.
func (s *Service) started(ctx context.Context, x store.Session) (SessionView, error) {
	x, err := s.woken(ctx, x)
	if err != nil {
		return SessionView{}, err
	}
	return s.view(x), nil
}

// wake restores the archive of session x into its machine, once: callers
// racing on one session wait for the first. A restore that fails ends the
// session, charging nothing; the archive stays for the next start.
func (s *Service) wake(ctx context.Context, x store.Session) (store.Session, error) {
	mu := s.wakeLock(x.ID)
	mu.Lock()
	defer func() {
		mu.Unlock()
		s.waking.Delete(x.ID) // later callers find the session woken or ended
	}()
	cur, err := s.st.GetSession(ctx, x.ID)
	if err != nil {
		return x, err
	}
	if cur.State != store.StateRunning {
		if e, ok := parseStartFailure(cur.LastError); ok {
			return cur, e
		}
		return cur, errorf(http.StatusConflict, CodeNoSession, "agent %q has no running computer (session %s is %s); call computer_start", cur.AgentID, cur.ID, cur.State)
	}
	if cur.Home != store.HomeWake {
		return cur, nil
	}
	x = cur
	log := s.log.With("agent", x.AgentID, "session", x.ID)
	start := s.clk.Now()
	a, err := s.restore(ctx, x)
	if err != nil {
		e := AsError(err)
		if ctx.Err() == nil {
			log.Warn("wake failed; ending the session", "from", archiveName(x.WakeFrom), "err", err)
			s.failStart(context.WithoutCancel(ctx), x, e)
		}
		return x, e
	}
	y := x
	y.Home = store.HomeLive
	if err := s.st.UpdateSession(context.WithoutCancel(ctx), y, x.State); err != nil {
		return x, err
	}
	log.Info("woke", "from", archiveName(x.WakeFrom), "bytes", a.Bytes, "image", x.Image, "archived_on", a.Image,
		"took", s.clk.Now().Sub(start))
	return y, nil
}

func archiveName(name string) string {
	if name == store.SleepArchive {
		return "the last sleep"
	}
	return "checkpoint " + name
}

// wakeLock returns the lock that orders wakes of one session in this
// process; computerd refuses a second restore that overlaps the first.
func (s *Service) wakeLock(session string) *sync.Mutex {
	mu, _ := s.waking.LoadOrStore(session, new(sync.Mutex))
	return mu.(*sync.Mutex)
}

// restore streams session x's archive from the object store into its
// machine.
func (s *Service) restore(ctx context.Context, x store.Session) (store.Archive, error) {
	a, err := s.st.GetArchive(ctx, x.AgentID, x.WakeFrom)
	if errors.Is(err, store.ErrNotFound) {
		return a, errorf(http.StatusConflict, CodeConflict, "%s of agent %q was deleted before the computer woke from it", archiveName(x.WakeFrom), x.AgentID)
	}
	if err != nil {
		return a, err
	}
	c, err := s.client(ctx, x)
	if err != nil {
		return a, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ArchiveTimeout)
	defer cancel()
	rc, _, err := s.cfg.Objects.Get(ctx, a.Key)
	if err != nil {
		return a, fmt.Errorf("open the archive of %s: %w", archiveName(x.WakeFrom), err)
	}
	defer rc.Close()
	src := &readErr{r: rc}
	// A sealed store authenticates every chunk it reads back and the
	// archive's length, so computerd need not hash the stream again.
	var opts computerd.RestoreOptions
	if !s.sealed() {
		opts.SHA256 = a.SHA256
	}
	_, err = c.Restore(ctx, src, opts)
	when := a.CreatedAt.UTC().Format(time.RFC3339)
	switch {
	case errors.Is(src.err, objstore.ErrTampered):
		return a, errorf(http.StatusBadGateway, CodeArchive, "the archive of %s (%s) failed its integrity check in the object store and was not restored; the computer was not started", archiveName(x.WakeFrom), when)
	case src.err != nil && err != nil:
		return a, fmt.Errorf("read the archive of %s: %w", archiveName(x.WakeFrom), src.err)
	case err != nil:
		var ae *computerd.APIError
		if errors.As(err, &ae) && ae.Status != 0 && ae.Code != computerd.CodeBusy {
			return a, errorf(http.StatusBadGateway, CodeArchive, "the computer refused the archive of %s (%s): %s", archiveName(x.WakeFrom), when, ae.Message)
		}
		return a, errorf(http.StatusBadGateway, CodeProvider, "restoring the archive of %s: %v", archiveName(x.WakeFrom), err)
	}
	return a, nil
}

// readErr remembers the error of the reader it wraps, to tell a broken
// archive from a broken upload.
type readErr struct {
	r   io.Reader
	err error
}

func (r *readErr) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		r.err = err
	}
	return n, err
}

// failStart ends session x, whose machine runs but which cannot be handed
// to the agent, with the error its start answered; it charges nothing.
func (s *Service) failStart(ctx context.Context, x store.Session, e *Error) {
	y := x
	y.State = store.StateStopping
	y.EndedAt = s.clk.Now()
	y.ChargedSeconds = 0
	y.NextCleanupAt = s.clk.Now().Add(reapClaim)
	y.LastError = startFailure(e)
	if err := s.st.UpdateSession(ctx, y, x.State); err == nil {
		s.cleanup(ctx, y)
	}
}

// archiveHome streams the home of session x's machine into the object
// store and records it as the agent's archive called name, replacing the
// one of that name (whose object it then deletes).
func (s *Service) archiveHome(ctx context.Context, x store.Session, name string, maxCheckpoints int) (store.Archive, error) {
	c, err := s.client(ctx, x)
	if err != nil {
		return store.Archive{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ArchiveTimeout)
	defer cancel()
	key := archivePrefix + x.AgentID + "/" + newID("h_")
	pr, pw := io.Pipe()
	made := make(chan error, 1)
	var info computerd.ArchiveInfo
	// A sealed store hashes what it stores: the client need not hash it
	// again, and the store's SHA-256 is checked against computerd's below.
	sealed := s.sealed()
	go func() {
		var err error
		info, err = c.ArchiveWith(ctx, &capWriter{w: pw, left: s.cfg.MaxArchiveBytes}, computerd.ArchiveOptions{Unhashed: sealed, Background: name != store.SleepArchive})
		pw.CloseWithError(err) // nil: io.EOF, the stream is whole
		made <- err
	}()
	stored, perr := s.cfg.Objects.Put(ctx, key, pr, map[string]string{"agent": x.AgentID, "session": x.ID})
	pr.CloseWithError(errors.Join(perr, io.ErrClosedPipe))
	aerr := <-made
	if aerr == nil && perr == nil && sealed && !strings.EqualFold(stored.Metadata[objstore.MetaSHA256], info.SHA256) {
		s.dropObject(ctx, key)
		return store.Archive{}, fmt.Errorf("archive from the computer: the supervisor stored %d bytes with SHA-256 %s, computerd sent %d with %s: %w",
			stored.Size, stored.Metadata[objstore.MetaSHA256], info.Bytes, info.SHA256, computerd.ErrArchiveIncomplete)
	}
	if aerr != nil || perr != nil {
		if perr == nil {
			s.dropObject(ctx, key)
		}
		if aerr != nil {
			return store.Archive{}, fmt.Errorf("archive from the computer: %w", aerr)
		}
		return store.Archive{}, fmt.Errorf("write the archive to the object store: %w", perr)
	}
	a := store.Archive{
		AgentID: x.AgentID, Workspace: x.Workspace, Name: name, Key: key, Bytes: info.Bytes, SHA256: info.SHA256,
		Image: x.Image, SessionID: x.ID, CreatedAt: s.clk.Now().UTC(),
	}
	old, replaced, err := s.st.PutArchive(context.WithoutCancel(ctx), a, maxCheckpoints)
	if err != nil {
		s.dropObject(ctx, key)
		return store.Archive{}, err
	}
	if replaced {
		s.dropObject(ctx, old.Key)
	}
	return a, nil
}

// sealed reports whether the object store seals what it keeps: it then
// hashes an archive as it stores it and authenticates it as it reads it
// back.
func (s *Service) sealed() bool {
	_, ok := s.cfg.Objects.(*objstore.Encrypted)
	return ok
}

// dropObject deletes an object no archive records (any left is swept).
func (s *Service) dropObject(ctx context.Context, key string) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := s.cfg.Objects.Delete(dctx, key); err != nil {
		s.log.Warn("delete archive object; the sweep retries", "key", key, "err", err)
	}
}

// capWriter fails a write past its limit.
type capWriter struct {
	w    io.Writer
	left int64
}

func (c *capWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > c.left {
		return 0, fmt.Errorf("the archive is larger than the supervisor's limit of %d bytes (MAX_ARCHIVE_BYTES)", c.left)
	}
	c.left -= int64(len(p))
	return c.w.Write(p)
}

// sleepHome archives the home of the ending session x as the agent's sleep
// archive. It returns x with its Home archived once that is recorded.
func (s *Service) sleepHome(ctx context.Context, x store.Session) (store.Session, error) {
	a, err := s.archiveHome(ctx, x, store.SleepArchive, 0)
	if err != nil {
		return x, err
	}
	y := x
	y.Home = store.HomeArchived
	y.CleanupTries = 0
	y.LastError = ""
	if err := s.st.UpdateSession(ctx, y, x.State); err != nil {
		return x, err
	}
	s.log.Info("home archived", "agent", x.AgentID, "session", x.ID, "bytes", a.Bytes)
	return y, nil
}

// archiveAtEnd archives the home of an ending persistent session before
// its machine is removed. It reports false when the cleanup must wait: the
// archive failed and will be tried again. After CleanupFailedAfter failed
// tries the home is given up (HomeLost) and the earlier archive stays the
// one the next start wakes from.
func (s *Service) archiveAtEnd(ctx context.Context, x store.Session) (store.Session, bool) {
	y, err := s.sleepHome(ctx, x)
	if err == nil {
		return y, true
	}
	y = x
	y.CleanupTries++
	if y.CleanupTries < CleanupFailedAfter {
		y.LastError = "archive the home: " + err.Error()
		y.NextCleanupAt = s.clk.Now().Add(backoff(y.CleanupTries))
		if uerr := s.st.UpdateSession(ctx, y, x.State); uerr != nil {
			s.log.Warn("record archive failure", "session", x.ID, "err", uerr)
		}
		s.log.Warn("archive of the home failed; will retry", "session", x.ID, "tries", y.CleanupTries, "err", err)
		return y, false
	}
	y.Home = store.HomeLost
	y.CleanupTries = 0
	y.LastError = "the home could not be archived (" + err.Error() + "); the computer wakes from its earlier archive"
	s.log.Error("archive of the home failed for good; removing the machine", "session", x.ID, "agent", x.AgentID, "err", err)
	if uerr := s.st.UpdateSession(ctx, y, x.State); uerr != nil {
		s.log.Warn("record archive failure", "session", x.ID, "err", uerr)
		return y, false
	}
	return y, true
}

// touch moves a running persistent session's sleep time on a tool call.
// The calls within touchEvery of one this process recorded neither read
// the connection nor write the session.
func (s *Service) touch(ctx context.Context, x store.Session) {
	if x.SleepAt.IsZero() {
		return
	}
	now := s.clk.Now()
	if last, ok := s.touched.Load(x.ID); ok && now.Sub(last.(time.Time)) < touchEvery {
		return
	}
	c, err := s.st.GetConnection(ctx, x.AgentID)
	if err != nil {
		return
	}
	s.touched.Store(x.ID, now)
	next := now.Add(time.Duration(c.IdleSleepSeconds) * time.Second)
	if next.Sub(x.SleepAt) < touchEvery {
		return
	}
	if err := s.st.TouchSession(ctx, x.ID, next); err != nil {
		s.log.Warn("record tool call time", "session", x.ID, "err", err)
	}
}

// forgetTouches drops the tool call times older than touchEvery, which
// spare nothing any more.
func (s *Service) forgetTouches(now time.Time) {
	s.touched.Range(func(id, last any) bool {
		if now.Sub(last.(time.Time)) >= touchEvery {
			s.touched.Delete(id)
		}
		return true
	})
}

func archiveView(a store.Archive) api.Archive {
	return api.Archive{Name: a.Name, Bytes: a.Bytes, CreatedAt: a.CreatedAt, Image: a.Image}
}

// Checkpoint archives the home of the agent's running persistent computer
// as a named checkpoint; the computer keeps running.
func (s *Service) Checkpoint(ctx context.Context, agent string, r api.CheckpointRequest) (api.Archive, error) {
	if err := checkCheckpointName("name", r.Name); err != nil {
		return api.Archive{}, err
	}
	c, err := s.persistentConnection(ctx, agent)
	if err != nil {
		return api.Archive{}, err
	}
	if _, err := s.st.GetArchive(ctx, agent, r.Name); err == nil {
		return api.Archive{}, errorf(http.StatusConflict, CodeConflict, "checkpoint %q of agent %q exists; delete it first", r.Name, agent)
	}
	x, err := s.running(ctx, agent)
	if err != nil {
		return api.Archive{}, err
	}
	if x, err = s.woken(ctx, x); err != nil {
		return api.Archive{}, err
	}
	a, err := s.archiveHome(ctx, x, r.Name, c.MaxCheckpoints)
	var le *store.CheckpointLimitError
	if errors.As(err, &le) {
		return api.Archive{}, limitf("maxCheckpoints: agent %q has %d checkpoints, the most it may keep; delete one first", agent, le.Limit)
	}
	if err != nil {
		s.log.Warn("checkpoint failed", "agent", agent, "name", r.Name, "err", err)
		return api.Archive{}, errorf(http.StatusBadGateway, CodeProvider, "checkpoint %q: %v", r.Name, err)
	}
	s.log.Info("checkpoint", "agent", agent, "name", r.Name, "bytes", a.Bytes)
	return archiveView(a), nil
}

// Checkpoints lists the agent's checkpoints, oldest first.
func (s *Service) Checkpoints(ctx context.Context, agent string) ([]api.Archive, error) {
	if _, err := s.connection(ctx, agent); err != nil {
		return nil, err
	}
	all, err := s.st.ArchivesOf(ctx, agent)
	if err != nil {
		return nil, err
	}
	out := []api.Archive{}
	for _, a := range all {
		if a.Name != store.SleepArchive {
			out = append(out, archiveView(a))
		}
	}
	return out, nil
}

// DeleteCheckpoint deletes one of the agent's checkpoints.
func (s *Service) DeleteCheckpoint(ctx context.Context, agent, name string) error {
	if err := checkCheckpointName("name", name); err != nil {
		return err
	}
	if _, err := s.connection(ctx, agent); err != nil {
		return err
	}
	a, err := s.st.DeleteArchive(ctx, agent, name)
	if errors.Is(err, store.ErrNotFound) {
		return errorf(http.StatusNotFound, CodeNotFound, "checkpoint %q of agent %q does not exist", name, agent)
	}
	if err != nil {
		return err
	}
	s.dropObject(ctx, a.Key)
	s.log.Info("checkpoint deleted", "agent", agent, "name", name)
	return nil
}

func (s *Service) persistentConnection(ctx context.Context, agent string) (store.Connection, error) {
	c, err := s.connection(ctx, agent)
	if err != nil {
		return c, err
	}
	if !api.KeepsHome(c.Persistence) {
		return c, errorf(http.StatusConflict, CodeConflict, "agent %q's computer does not keep its files (persistence %q); checkpoints need persistence %q or %q", agent, c.Persistence, api.PersistenceHome, api.PersistenceMemory)
	}
	return c, nil
}

// woken returns running session x once its home is in its machine.
func (s *Service) woken(ctx context.Context, x store.Session) (store.Session, error) {
	if x.Home == store.HomeWake {
		return s.wake(ctx, x)
	}
	return x, nil
}

// deleteArchives removes every archive of an agent that has no connection
// any more.
func (s *Service) deleteArchives(ctx context.Context, agent string) error {
	all, err := s.st.ArchivesOf(ctx, agent)
	if err != nil {
		return err
	}
	for _, a := range all {
		if _, err := s.st.DeleteArchive(ctx, agent, a.Name); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		s.dropObject(ctx, a.Key)
	}
	if len(all) > 0 {
		s.log.Info("archives deleted", "agent", agent, "n", len(all))
	}
	return nil
}

// sweepArchives removes objects under archivePrefix that no archive
// records and that are older than archiveOrphanAge: what a crash between
// an upload and its record, or a failed delete, left behind.
func (s *Service) sweepArchives(ctx context.Context) {
	if s.cfg.Objects == nil {
		return
	}
	infos, err := s.cfg.Objects.List(ctx, archivePrefix)
	if err != nil {
		s.log.Warn("sweep archives: list", "err", err)
		return
	}
	keys, err := s.st.ArchiveKeys(ctx)
	if err != nil {
		s.log.Warn("sweep archives: recorded keys", "err", err)
		return
	}
	known := make(map[string]bool, len(keys))
	for _, k := range keys {
		known[k] = true
	}
	cutoff := s.clk.Now().Add(-archiveOrphanAge)
	n := 0
	for _, in := range infos {
		if known[in.Key] || !strings.HasPrefix(in.Key, archivePrefix) || in.Modified.After(cutoff) {
			continue
		}
		if err := s.cfg.Objects.Delete(ctx, in.Key); err != nil {
			s.log.Warn("sweep archives: delete", "key", in.Key, "err", err)
			continue
		}
		n++
	}
	if n > 0 {
		s.log.Info("swept archive objects no archive records", "n", n)
	}
}
