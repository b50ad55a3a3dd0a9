package miniotest

import (
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/berthdev/berth/internal/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

// The build script and the package name the same version: it is the
// cache's key.
func TestVersionMatchesBuildScript(t *testing.T) {
	b, err := os.ReadFile("../../packaging/minio-test/build.sh")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "\nMINIO_VERSION="+Version+"\n") {
		t.Fatalf("packaging/minio-test/build.sh does not build MINIO_VERSION=%s", Version)
	}
}

func TestStart(t *testing.T) {
	var s *Server
	t.Run("Server", func(t *testing.T) {
		s = Start(t)
		ctx := testkit.Context(t)
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		c, err := minio.New(s.Host, &minio.Options{Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""), Transport: tr})
		if err != nil {
			t.Fatal(err)
		}
		ok, err := c.BucketExists(ctx, s.Bucket)
		if err != nil || !ok {
			t.Fatalf("bucket %s: %v %v", s.Bucket, ok, err)
		}
		if _, err := c.PutObject(ctx, s.Bucket, "hello", strings.NewReader("hi"), 2, minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
		if os.Geteuid() == 0 {
			st, err := os.Stat("/proc/" + strconv.Itoa(s.pid))
			if err != nil {
				t.Fatal(err)
			}
			if uid := st.Sys().(*syscall.Stat_t).Uid; uid == 0 {
				t.Errorf("MinIO runs as root, want an unprivileged user")
			}
		}
	})
	if s == nil {
		return
	}
	// Stopped, and its folder gone, once its test ended.
	testkit.Eventually(t, 10*time.Second, "MinIO to stop", func() bool { return syscall.Kill(s.pid, 0) != nil })
	if _, err := os.Stat(s.dir); !os.IsNotExist(err) {
		t.Errorf("server folder %s left behind: %v", s.dir, err)
	}
}
