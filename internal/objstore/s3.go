package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Config describes a bucket of an S3-compatible service.
type S3Config struct {
	// Endpoint is the service's address: "https://host[:port]",
	// "http://host[:port]" (no TLS: only for a service on a trusted
	// network), or "host[:port]" (TLS).
	Endpoint  string
	AccessKey string
	SecretKey string
	Region    string // optional; the service's default when empty
	Bucket    string
	// Prefix is put before every key, so that several users can share a
	// bucket: "" or a path ending in '/'.
	Prefix string
	// PartSize is the size of the parts of a multipart upload:
	// DefaultPartSize when 0, at least 5 MiB. An object may have 10,000
	// parts.
	PartSize uint64
	// Uploads is how many parts of one Put are read and uploaded at once,
	// so that the stream goes on while a part uploads: DefaultUploads
	// when 0. One Put holds Uploads*PartSize bytes.
	Uploads int
	// OpTimeout bounds the calls that do not stream (Stat, Delete, List,
	// the start of Get) when their context has no earlier deadline:
	// DefaultOpTimeout when 0. Streams are bounded by their context and by
	// the transport's timeouts (connect, TLS handshake, response headers).
	OpTimeout time.Duration
	// Transport, when set, carries the requests (tests); else minio-go's
	// default, which has connect and response-header timeouts.
	Transport http.RoundTripper
}

// Defaults of S3Config.
const (
	DefaultPartSize  = 16 << 20
	DefaultUploads   = 3
	DefaultOpTimeout = 30 * time.Second
	minPartSize      = 5 << 20
)

// S3 is a Store in a bucket of an S3-compatible service (AWS S3, MinIO,
// Ceph RGW, ...). Every Put is a multipart upload that is completed only
// once the stream has ended, so a failed upload leaves the previous
// object; the failed upload is aborted, and when even that is impossible
// (the service is unreachable) the parts it left stay invisible until a
// lifecycle rule of the bucket removes incomplete uploads.
type S3 struct {
	client *minio.Client
	cfg    S3Config
}

// NewS3 returns a store for cfg. It does not contact the service (see
// CheckBucket).
func NewS3(cfg S3Config) (*S3, error) {
	host, secure, err := parseEndpoint(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	if cfg.AccessKey == "" || cfg.SecretKey == "" {
		return nil, fmt.Errorf("%w: %s and %s are both required", ErrSettings, EnvAccessKey, EnvSecretKey)
	}
	if err := checkBucketName(cfg.Bucket); err != nil {
		return nil, err
	}
	if cfg.Prefix != "" {
		if !strings.HasSuffix(cfg.Prefix, "/") {
			cfg.Prefix += "/"
		}
		if err := ValidatePrefix(cfg.Prefix); err != nil {
			return nil, fmt.Errorf("%w: prefix: %w", ErrSettings, err)
		}
	}
	if len(cfg.Prefix)+MaxKeyLen > 1024 {
		return nil, fmt.Errorf("%w: prefix %q is longer than %d bytes", ErrSettings, cfg.Prefix, 1024-MaxKeyLen)
	}
	if cfg.PartSize == 0 {
		cfg.PartSize = DefaultPartSize
	}
	if cfg.Uploads == 0 {
		cfg.Uploads = DefaultUploads
	}
	if cfg.Uploads < 1 || cfg.Uploads > 64 {
		return nil, fmt.Errorf("%w: %d uploads at once: want 1 to 64", ErrSettings, cfg.Uploads)
	}
	if cfg.PartSize < minPartSize {
		return nil, fmt.Errorf("%w: part size %d is below 5 MiB", ErrSettings, cfg.PartSize)
	}
	if cfg.OpTimeout <= 0 {
		cfg.OpTimeout = DefaultOpTimeout
	}
	client, err := minio.New(host, &minio.Options{
		Creds:     credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:    secure,
		Region:    cfg.Region,
		Transport: cfg.Transport,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSettings, err)
	}
	return &S3{client: client, cfg: cfg}, nil
}

func (s *S3) String() string {
	return fmt.Sprintf("s3://%s/%s at %s", s.cfg.Bucket, s.cfg.Prefix, s.client.EndpointURL())
}

// parseEndpoint returns the host[:port] of an endpoint and whether it
// uses TLS.
func parseEndpoint(ep string) (host string, secure bool, err error) {
	if ep == "" {
		return "", false, fmt.Errorf("%w: %s is required with an s3:// store (for example https://s3.eu-west-1.amazonaws.com)", ErrSettings, EnvEndpoint)
	}
	if !strings.Contains(ep, "://") {
		ep = "https://" + ep
	}
	u, err := url.Parse(ep)
	if err != nil {
		return "", false, fmt.Errorf("%w: %s: %w", ErrSettings, EnvEndpoint, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "", false, fmt.Errorf("%w: %s %q: the scheme must be https:// or http://", ErrSettings, EnvEndpoint, ep)
	case u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
		return "", false, fmt.Errorf("%w: %s %q must be a scheme and a host[:port], with no path", ErrSettings, EnvEndpoint, ep)
	}
	return u.Host, u.Scheme == "https", nil
}

// checkBucketName checks the S3 bucket naming rules that matter here.
func checkBucketName(b string) error {
	ok := len(b) >= 3 && len(b) <= 63
	for i := 0; ok && i < len(b); i++ {
		c := b[i]
		ok = 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || (c == '-' || c == '.') && i > 0 && i < len(b)-1
	}
	if !ok {
		return fmt.Errorf("%w: bucket %q: 3 to 63 lowercase letters, digits, '.' and '-', starting and ending with a letter or digit", ErrSettings, b)
	}
	return nil
}

// opContext bounds a call that does not stream.
func (s *S3) opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.OpTimeout)
}

func (s *S3) name(key string) string { return s.cfg.Prefix + key }

// s3Error maps the service's answers onto the package's errors.
func s3Error(op, key string, err error) error {
	switch minio.ToErrorResponse(err).Code {
	case minio.NoSuchKey:
		return fmt.Errorf("%w: %s", ErrNotFound, key)
	case minio.NoSuchBucket:
		return fmt.Errorf("objstore: %s %s: the bucket does not exist: %w", op, key, err)
	}
	return fmt.Errorf("objstore: %s %s: %w", op, key, err)
}

// CheckBucket reports whether the bucket exists and the keys can reach it.
func (s *S3) CheckBucket(ctx context.Context) error {
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	ok, err := s.client.BucketExists(ctx, s.cfg.Bucket)
	if err != nil {
		return fmt.Errorf("objstore: bucket %s at %s: %w", s.cfg.Bucket, s.client.EndpointURL().Host, err)
	}
	if !ok {
		return fmt.Errorf("objstore: bucket %s does not exist at %s", s.cfg.Bucket, s.client.EndpointURL().Host)
	}
	return nil
}

// Put implements Store.
func (s *S3) Put(ctx context.Context, key string, r io.Reader, meta map[string]string) (Info, error) {
	if err := ValidateKey(key); err != nil {
		return Info{}, err
	}
	if err := ValidateMetadata(meta); err != nil {
		return Info{}, err
	}
	up, err := s.client.PutObject(ctx, s.cfg.Bucket, s.name(key), r, -1, minio.PutObjectOptions{
		UserMetadata: meta,
		ContentType:  "application/octet-stream",
		PartSize:     s.cfg.PartSize,
		// With more than one, parts are read and uploaded side by side.
		ConcurrentStreamParts: s.cfg.Uploads > 1,
		NumThreads:            uint(s.cfg.Uploads),
	})
	if err != nil {
		if ctx.Err() != nil {
			// minio-go aborts a failed upload with ctx, which has ended:
			// abort it with a context of its own.
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.OpTimeout)
			s.client.RemoveIncompleteUpload(actx, s.cfg.Bucket, s.name(key))
			cancel()
		}
		return Info{}, s3Error("put", key, err)
	}
	mod := up.LastModified
	if mod.IsZero() {
		mod = time.Now()
	}
	return Info{Key: key, Size: up.Size, Modified: mod, Metadata: cloneMeta(meta)}, nil
}

func (s *S3) info(key string, oi minio.ObjectInfo) Info {
	var meta map[string]string
	if len(oi.UserMetadata) > 0 {
		meta = make(map[string]string, len(oi.UserMetadata))
		for k, v := range oi.UserMetadata {
			meta[strings.ToLower(k)] = v
		}
	}
	return Info{Key: key, Size: oi.Size, Modified: oi.LastModified, Metadata: meta}
}

// Get implements Store.
func (s *S3) Get(ctx context.Context, key string) (io.ReadCloser, Info, error) {
	if err := ValidateKey(key); err != nil {
		return nil, Info{}, err
	}
	obj, err := s.client.GetObject(ctx, s.cfg.Bucket, s.name(key), minio.GetObjectOptions{})
	if err != nil {
		return nil, Info{}, s3Error("get", key, err)
	}
	// Stat sends the request and waits for the answer's headers (bounded
	// by the transport's response-header timeout and by ctx).
	oi, err := obj.Stat()
	if err != nil {
		obj.Close()
		return nil, Info{}, s3Error("get", key, err)
	}
	return obj, s.info(key, oi), nil
}

// Stat implements Store.
func (s *S3) Stat(ctx context.Context, key string) (Info, error) {
	if err := ValidateKey(key); err != nil {
		return Info{}, err
	}
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	oi, err := s.client.StatObject(ctx, s.cfg.Bucket, s.name(key), minio.StatObjectOptions{})
	if err != nil {
		return Info{}, s3Error("stat", key, err)
	}
	return s.info(key, oi), nil
}

// Delete implements Store.
func (s *S3) Delete(ctx context.Context, key string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	if err := s.client.RemoveObject(ctx, s.cfg.Bucket, s.name(key), minio.RemoveObjectOptions{}); err != nil {
		if errors.Is(s3Error("delete", key, err), ErrNotFound) {
			return nil
		}
		return s3Error("delete", key, err)
	}
	return nil
}

// List implements Store. Objects under the store's prefix whose names are
// not valid keys (put there by something else) are left out.
func (s *S3) List(ctx context.Context, prefix string) ([]Info, error) {
	if err := ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	ctx, cancel := s.opContext(ctx)
	defer cancel() // also stops the listing goroutine on an early return
	var out []Info
	for oi := range s.client.ListObjects(ctx, s.cfg.Bucket, minio.ListObjectsOptions{Prefix: s.name(prefix), Recursive: true}) {
		if oi.Err != nil {
			return nil, s3Error("list", prefix, oi.Err)
		}
		key, ok := strings.CutPrefix(oi.Key, s.cfg.Prefix)
		if !ok || ValidateKey(key) != nil {
			continue
		}
		if len(out) >= MaxList {
			return nil, fmt.Errorf("objstore: list %q: %w", prefix, ErrTooMany)
		}
		out = append(out, Info{Key: key, Size: oi.Size, Modified: oi.LastModified})
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("objstore: list %q: %w", prefix, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

var _ Store = (*S3)(nil)
