// Package miniotest runs a real, throwaway MinIO server for tests of the
// S3 object store.
//
// MinIO is not a Go library here but a program built once from the Go
// module proxy by packaging/minio-test/build.sh (which `make test` and CI
// run) into ~/.cache/berth-minio/<Version>/minio; BERTH_MINIO names
// another binary. Start runs it on a free loopback port with a temporary
// data folder and random root credentials, waits until it is live,
// creates a bucket, and stops it (by its pid) when the test ends. When the
// process runs as root, MinIO runs as the user "nobody". If the test
// binary dies, the kernel kills the server (a parent-death signal).
//
// When the binary is missing, Start skips the test with the command that
// builds it; with BERTH_REQUIRE_MINIO=1 it fails instead.
package miniotest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Version is the MinIO pseudo-version that packaging/minio-test/build.sh
// builds; the cache folder is named after it.
const Version = "v0.0.0-20260212201848-7aac2a2c5b7c"

// The settings Start reads.
const (
	BinaryEnv  = "BERTH_MINIO"         // a MinIO binary to use instead of the cached one
	CacheEnv   = "BERTH_MINIO_CACHE"   // the cache folder (default ~/.cache/berth-minio)
	RequireEnv = "BERTH_REQUIRE_MINIO" // 1: a missing binary fails the test instead of skipping it
)

// BuildCommand builds the cached binary.
const BuildCommand = "packaging/minio-test/build.sh"

// Bucket is the bucket Start creates.
const Bucket = "berth-test"

const startTimeout = 60 * time.Second

// Server is a running MinIO server.
type Server struct {
	Endpoint  string // http://127.0.0.1:port
	Host      string // 127.0.0.1:port
	AccessKey string
	SecretKey string
	Bucket    string

	pid    int
	dir    string
	cmd    *exec.Cmd
	exited chan struct{}
}

// Binary returns the MinIO binary the tests use: BERTH_MINIO when set,
// else the cached build.
func Binary() string {
	if b := os.Getenv(BinaryEnv); b != "" {
		return b
	}
	cache := os.Getenv(CacheEnv)
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		cache = filepath.Join(home, ".cache", "berth-minio")
	}
	return filepath.Join(cache, Version, "minio")
}

// Start starts a MinIO server with an empty bucket named Bucket, stopped
// when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Binary()
	if fi, err := os.Stat(bin); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		why := fmt.Sprintf("miniotest: no MinIO binary at %s", bin)
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("%s, and %s=1; build it with %s (or set %s)", why, RequireEnv, BuildCommand, BinaryEnv)
		}
		t.Skipf("%s; build it with %s (about two minutes), or set %s (%s=1 turns this skip into a failure)", why, BuildCommand, BinaryEnv, RequireEnv)
		return nil
	}
	begin := time.Now()
	var s *Server
	var err error
	for range 3 {
		s, err = start(bin)
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	if err != nil {
		t.Fatalf("miniotest: %v", err)
	}
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Errorf("miniotest: %v", err)
		}
	})
	if err := s.makeBucket(); err != nil {
		t.Fatalf("miniotest: %v", err)
	}
	t.Logf("miniotest: MinIO ready at %s in %v", s.Endpoint, time.Since(begin).Round(time.Millisecond))
	return s
}

var errPortTaken = errors.New("port taken")

// nobody returns the credential MinIO runs with when the tests run as
// root (the user nobody), or nil.
func nobody() *syscall.Credential {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		return nil // no such user: run as root
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}
}

// reachable returns a path to bin that any user can reach (the cache lives
// in root's home, which nobody cannot enter): a hard link, or else a copy,
// in a new folder, which the caller removes once the program has started.
func reachable(bin string) (path, dir string, err error) {
	dir, err = os.MkdirTemp("", "berth-minio-bin-")
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err != nil {
		return "", dir, err
	}
	path = filepath.Join(dir, "minio")
	if err := os.Link(bin, path); err != nil {
		if err := copyFile(bin, path); err != nil {
			return "", dir, fmt.Errorf("make %s reachable for nobody: %w", bin, err)
		}
	}
	return path, dir, nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func start(bin string) (*Server, error) {
	cred := nobody()
	if cred != nil {
		path, linkDir, err := reachable(bin)
		// The running program keeps its file: the link goes once it runs.
		defer os.RemoveAll(linkDir)
		if err != nil {
			return nil, err
		}
		bin = path
	}
	dir, err := os.MkdirTemp("", "berth-minio-")
	if err != nil {
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	port, err := testkit.FreePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	host := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s := &Server{
		Endpoint: "http://" + host, Host: host,
		AccessKey: "berth" + randomHex(8), SecretKey: randomHex(20),
		Bucket: Bucket, dir: dir, exited: make(chan struct{}),
	}
	logf, err := os.Create(filepath.Join(dir, "minio.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer logf.Close()
	data := filepath.Join(dir, "data")
	cmd := exec.Command(bin, "server", "--quiet", "--address", host, data)
	cmd.Dir = dir
	cmd.Env = []string{
		"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "TZ=UTC",
		"MINIO_ROOT_USER=" + s.AccessKey, "MINIO_ROOT_PASSWORD=" + s.SecretKey,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off", "MINIO_CI_CD=1",
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: cred,
		Setpgid:    true, // a Ctrl-C reaches the test binary, which stops the server
		Pdeathsig:  syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	s.cmd, s.pid = cmd, cmd.Process.Pid
	go func() {
		cmd.Wait()
		close(s.exited)
	}()
	if err := s.waitLive(); err != nil {
		log := s.logTail()
		s.stop()
		if strings.Contains(log, "address already in use") {
			return nil, fmt.Errorf("%w: %d", errPortTaken, port)
		}
		return nil, fmt.Errorf("%v; MinIO log:\n%s", err, log)
	}
	return s, nil
}

// waitLive polls /minio/health/live until MinIO answers 200, exits, or
// startTimeout passes.
func (s *Server) waitLive() error {
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 2 * time.Second}
	deadline := time.Now().Add(startTimeout)
	for {
		resp, err := client.Get(s.Endpoint + "/minio/health/live")
		if err == nil {
			io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		select {
		case <-s.exited:
			return errors.New("MinIO exited during start-up")
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("MinIO was not live within %v: %v", startTimeout, err)
		}
	}
}

func (s *Server) makeBucket() error {
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c, err := minio.New(s.Host, &minio.Options{
		Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""), Transport: tr,
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.MakeBucket(ctx, s.Bucket, minio.MakeBucketOptions{}); err != nil {
		return fmt.Errorf("create bucket %s: %w", s.Bucket, err)
	}
	return nil
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "minio.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Log returns the end of the server's log.
func (s *Server) Log() string { return s.logTail() }

// stop ends the server: SIGTERM to its pid, SIGKILL after 10 s; then it
// removes the server's folder.
func (s *Server) stop() error {
	var err error
	select {
	case <-s.exited:
	default:
		syscall.Kill(s.pid, syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(10 * time.Second):
			err = fmt.Errorf("MinIO (pid %d) did not stop within 10s of SIGTERM; killed it", s.pid)
			syscall.Kill(s.pid, syscall.SIGKILL)
			<-s.exited
		}
	}
	if rerr := os.RemoveAll(s.dir); rerr != nil && err == nil {
		err = rerr
	}
	return err
}
