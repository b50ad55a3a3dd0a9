package objstore

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/berthdev/berth/internal/miniotest"
	"github.com/berthdev/berth/internal/testkit"
)

// newMinIOStore starts a MinIO server and returns a store in its bucket
// under prefix.
func newMinIOStore(t *testing.T, prefix string) (*S3, *miniotest.Server) {
	t.Helper()
	srv := miniotest.Start(t)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	s, err := NewS3(S3Config{
		Endpoint: srv.Endpoint, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey,
		Bucket: srv.Bucket, Prefix: prefix, Transport: tr,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CheckBucket(testkit.Context(t)); err != nil {
		t.Fatal(err)
	}
	return s, srv
}

// incomplete lists the bucket's multipart uploads that were neither
// completed nor aborted.
func incomplete(t *testing.T, s *S3) []string {
	t.Helper()
	ctx, cancel := context.WithCancel(testkit.Context(t))
	defer cancel()
	var out []string
	for u := range s.client.ListIncompleteUploads(ctx, s.cfg.Bucket, "", true) {
		if u.Err != nil {
			t.Fatalf("list incomplete uploads: %v", u.Err)
		}
		out = append(out, u.Key)
	}
	return out
}

func TestS3(t *testing.T) {
	s, _ := newMinIOStore(t, "tenant-1/archives")
	testStore(t, s, func(t *testing.T) {
		if left := incomplete(t, s); len(left) > 0 {
			t.Errorf("a failed upload was left incomplete, not aborted: %v", left)
		}
	})
	// Everything went under the prefix.
	ctx := testkit.Context(t)
	for oi := range s.client.ListObjects(ctx, s.cfg.Bucket, minio.ListObjectsOptions{Recursive: true}) {
		if oi.Err != nil {
			t.Fatal(oi.Err)
		}
		if !strings.HasPrefix(oi.Key, "tenant-1/archives/") {
			t.Errorf("object %s is outside the store's prefix", oi.Key)
		}
	}
}

func TestS3Errors(t *testing.T) {
	s, srv := newMinIOStore(t, "")
	ctx := testkit.Context(t)
	if _, err := s.Stat(ctx, "missing"); !errors.Is(err, ErrNotFound) {
		t.Errorf("stat of a missing object: %v", err)
	}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	for _, c := range []struct {
		name string
		cfg  S3Config
		want string
	}{
		{"wrong secret", S3Config{Endpoint: srv.Endpoint, AccessKey: srv.AccessKey, SecretKey: "wrong-secret", Bucket: srv.Bucket, Transport: tr}, "signature"},
		{"no bucket", S3Config{Endpoint: srv.Endpoint, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, Bucket: "missing-bucket", Transport: tr}, "does not exist"},
	} {
		bad, err := NewS3(c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := bad.CheckBucket(ctx); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: CheckBucket = %v, want an error about %q", c.name, err, c.want)
		}
		if _, err := bad.Put(ctx, "k", strings.NewReader("x"), nil); err == nil {
			t.Errorf("%s: put succeeded", c.name)
		}
	}
}
