package computerd

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// errWriter remembers the error of the writer it wraps, to tell the
// caller's failing writer from a broken answer.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	n, err := e.w.Write(p)
	if err != nil {
		e.err = err
	}
	return n, err
}

// Archive streams the home's archive (format ArchiveFormat) into w and
// returns computerd's description of it, once the bytes w received are
// known to be the whole stream: their count and SHA-256 match computerd's
// trailer. A stream that failed on computerd's side returns an *APIError
// whose Status is 0; one that ended without the trailer, or disagrees
// with it, an error wrapping ErrArchiveIncomplete. On any error, what w
// received is not an archive to keep.
//
// Without a deadline in ctx, the archive ends when computerd sends
// nothing, or does not answer, for the client's call timeout.
func (c *Client) Archive(ctx context.Context, w io.Writer) (ArchiveInfo, error) {
	return c.ArchiveWith(ctx, w, ArchiveOptions{})
}

// ArchiveOptions tune ArchiveWith.
type ArchiveOptions struct {
	// Unhashed leaves the SHA-256 of the bytes w received to the caller,
	// for a w that hashes them anyway: the client checks only their
	// count against computerd's, and the caller must compare its own
	// SHA-256 with the returned ArchiveInfo's before it keeps them.
	Unhashed bool
	// Background leaves one of the computer's cores to its commands while
	// the archive is made: for a checkpoint of a computer that keeps
	// running, where a sleep may use them all.
	Background bool
}

// ArchiveWith is Archive with options.
func (c *Client) ArchiveWith(ctx context.Context, w io.Writer, opts ArchiveOptions) (ArchiveInfo, error) {
	const method, path = http.MethodGet, "/v1/archive"
	wd := c.watch(ctx, fmt.Errorf("no progress within %s, the client's limit on an archive's silence when its context has no deadline: %w", c.callTimeout, context.DeadlineExceeded))
	defer wd.stop()
	var q url.Values
	if opts.Background {
		q = url.Values{"background": {"1"}}
	}
	resp, err := c.send(wd.ctx, method, path, q, nil, "")
	if err != nil {
		return ArchiveInfo{}, wd.explain(err)
	}
	defer resp.Body.Close()
	if f := resp.Header.Get(ArchiveFormatHeader); f != ArchiveFormat {
		return ArchiveInfo{}, fmt.Errorf("computerd %s %s: an archive of format %q; this client reads %q", method, path, f, ArchiveFormat)
	}
	var body io.Reader = resp.Body
	if wd.timer != nil {
		body = &progressReader{r: body, w: wd}
	}
	dst := &errWriter{w: w}
	var h hash.Hash
	var sink io.Writer = dst
	if !opts.Unhashed {
		h = sha256.New()
		sink = io.MultiWriter(dst, h)
	}
	// Large writes: the archive goes on (into a pipe, an object store) in
	// a few pieces per MiB instead of one per 32 KiB.
	n, err := io.CopyBuffer(sink, body, make([]byte, bulkSize))
	got := ArchiveInfo{Format: ArchiveFormat, Bytes: n}
	if h != nil {
		got.SHA256 = hex.EncodeToString(h.Sum(nil))
	}
	if dst.err != nil {
		return got, fmt.Errorf("computerd %s %s: writing the archive after %d bytes: %w", method, path, n, dst.err)
	}
	if err != nil {
		return got, wd.explain(fmt.Errorf("computerd %s %s: the stream broke after %d bytes: %w", method, path, n, err))
	}
	if t := resp.Trailer.Get(ArchiveErrorTrailer); t != "" {
		var e Error
		if err := json.Unmarshal([]byte(t), &e); err != nil || e.Code == "" {
			return got, fmt.Errorf("computerd %s %s: the archive failed: %q", method, path, t)
		}
		return got, &APIError{Code: e.Code, Message: e.Message}
	}
	var info ArchiveInfo
	if t := resp.Trailer.Get(ArchiveInfoTrailer); t != "" {
		if err := json.Unmarshal([]byte(t), &info); err != nil {
			return got, fmt.Errorf("computerd %s %s: trailer %s: %v: %w", method, path, ArchiveInfoTrailer, err, ErrArchiveIncomplete)
		}
	} else {
		// No trailer: a proxy on the way may have dropped it. Ask.
		id := resp.Header.Get(ArchiveIDHeader)
		if id == "" {
			return got, fmt.Errorf("computerd %s %s: the stream of %d bytes ended without its trailer %s and names no archive to ask about: %w",
				method, path, n, ArchiveInfoTrailer, ErrArchiveIncomplete)
		}
		out, err := c.archiveOutcome(wd.ctx, id)
		if err != nil {
			return got, wd.explain(fmt.Errorf("computerd %s %s: the stream of %d bytes ended without its trailer, and asking how it ended failed: %w (%w)",
				method, path, n, err, ErrArchiveIncomplete))
		}
		if out.Error != nil {
			return got, &APIError{Code: out.Error.Code, Message: out.Error.Message}
		}
		if out.Info == nil {
			return got, fmt.Errorf("computerd %s %s: archive %s has no outcome: %w", method, path, id, ErrArchiveIncomplete)
		}
		info = *out.Info
	}
	if info.Bytes != got.Bytes || (h != nil && !strings.EqualFold(info.SHA256, got.SHA256)) {
		return got, fmt.Errorf("computerd %s %s: received %d bytes with SHA-256 %s, computerd sent %d with %s: %w",
			method, path, got.Bytes, got.SHA256, info.Bytes, info.SHA256, ErrArchiveIncomplete)
	}
	return info, nil
}

// Restore replaces the home's contents with the archive read from r (as
// Archive wrote it), or leaves the home as it was and returns an error
// (see the package's archive documentation for what computerd refuses).
// A refused archive returns an *APIError with CodeBadArchive,
// CodeTooLarge or CodeBusy.
//
// Without a deadline in ctx, the restore ends when computerd takes none
// of the archive, or does not answer once it has it all, for the
// client's call timeout.
func (c *Client) Restore(ctx context.Context, r io.Reader, opts RestoreOptions) (RestoreResult, error) {
	const method, path = http.MethodPut, "/v1/archive"
	q := url.Values{}
	if opts.MaxBytes > 0 {
		q.Set("maxBytes", strconv.FormatInt(opts.MaxBytes, 10))
	}
	if opts.MaxEntries > 0 {
		q.Set("maxEntries", strconv.FormatInt(opts.MaxEntries, 10))
	}
	if opts.SHA256 != "" {
		q.Set("sha256", opts.SHA256)
	}
	wd := c.watch(ctx, fmt.Errorf("no progress within %s, the client's limit on a restore's silence when its context has no deadline: %w", c.callTimeout, context.DeadlineExceeded))
	defer wd.stop()
	if wd.timer != nil && r != nil {
		r = &progressReader{r: r, w: wd}
	}
	if r != nil {
		r = bulkReader{r: r, size: bulkSize}
	}
	resp, err := c.send(wd.ctx, method, path, q, r, ArchiveContentType)
	var res RestoreResult
	if err == nil {
		err = decodeAnswer(resp, &res, controlAnswerBytes)
	}
	return res, wd.explain(err)
}

// archiveOutcome asks computerd how the archive id ended.
func (c *Client) archiveOutcome(ctx context.Context, id string) (ArchiveOutcome, error) {
	var out ArchiveOutcome
	resp, err := c.send(ctx, http.MethodGet, ArchiveOutcomePath, url.Values{"id": {id}}, nil, "")
	if err == nil {
		err = decodeAnswer(resp, &out, controlAnswerBytes)
	}
	return out, err
}

// bulkSize is the size of the pieces an archive moves in: a restore's
// body as it is sent, an archive as it is copied on.
const bulkSize = 1 << 20

// bulkReader gives io.Copy (which sends an HTTP request's body) its
// reader's bytes in pieces of size bytes: the body then leaves in large
// writes, one HTTP chunk each, instead of one 32 KiB chunk per Read, and
// the computer reads fewer, larger pieces.
type bulkReader struct {
	r    io.Reader
	size int
}

func (b bulkReader) Read(p []byte) (int, error) { return b.r.Read(p) }

func (b bulkReader) WriteTo(w io.Writer) (int64, error) {
	buf := make([]byte, b.size)
	var total int64
	for {
		n, err := io.ReadFull(b.r, buf)
		if n > 0 {
			m, werr := w.Write(buf[:n])
			total += int64(m)
			if werr != nil {
				return total, werr
			}
		}
		switch {
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			return total, nil
		case err != nil:
			return total, err
		}
	}
}
