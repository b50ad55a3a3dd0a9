package e2e

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/miniotest"
	"github.com/berthdev/berth/internal/objstore"
)

// persistScript fills a home with what an archive must keep, byte for
// byte: a 200 MB file, a symlink, a hard link, modes, a file in a
// subfolder owned by the computer's user (uid 1000), an empty folder.
const persistScript = `set -e
mkdir -p proj/sub empty
head -c 200000000 /dev/urandom > proj/big.bin
printf 'notes\n' > proj/notes.txt
chmod 0640 proj/notes.txt
ln -s notes.txt proj/link
ln proj/notes.txt proj/hard
printf 'x' > proj/sub/owned
chmod 0751 proj/sub
chmod 0600 proj/sub/owned
`

// persistPrint lists the home's files with type, mode, owner, links or
// target, and every file's SHA-256.
const persistPrint = `cd $HOME && find proj empty | sort | xargs stat -c '%n %F %a %u:%g %h %N' && find proj -type f -exec sha256sum {} + | sort`

// devEnv is the environment of a berth dev process of the tests, with
// extra settings last: the test image for both kinds of computer, no
// egress proxy or TURN relay, its configuration and session bus in dir.
func devEnv(dir, token string, extra ...string) []string {
	return append(append(os.Environ(),
		"SUPERVISOR_TOKEN="+token, "COMPUTER_IMAGE_HEADLESS=berth/test:latest", "COMPUTER_IMAGE_DESKTOP=berth/test:latest",
		"EGRESS_LISTEN=off", "TURN_LISTEN=off",
		"BERTH_CONFIG_DIR="+filepath.Join(dir, "config"), "DBUS_SESSION_BUS_ADDRESS=unix:path="+filepath.Join(dir, "no-bus")), extra...)
}

// sleepStatus is what the tests read of GET /v1/agents/{agent}/computer.
type sleepStatus struct {
	State   string `json:"state"`
	Archive *struct {
		Bytes     int64 `json:"bytes"`
		Suspended bool  `json:"suspended"`
	} `json:"archive"`
}

// TestPersistentComputers: on berth dev with its archives in a real S3
// server (MinIO), a persistent Docker computer and a persistent lent
// computer (berth dev's own lender, through the relay) keep their files
// across a stop and a start, byte for byte; the archives are in the
// bucket, sealed, and go with the connections.
func TestPersistentComputers(t *testing.T) {
	requireDocker(t, "berth/test:latest")
	light(t)
	s3 := miniotest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dir := t.TempDir()
	token := "persist-token-0123456789"
	env := devEnv(dir, token, "COMPUTER_NETWORK_POOL=0",
		"OBJECT_STORE_URL=s3://"+s3.Bucket+"/berth", "OBJECT_STORE_ENDPOINT="+s3.Endpoint,
		"OBJECT_STORE_ACCESS_KEY="+s3.AccessKey, "OBJECT_STORE_SECRET_KEY="+s3.SecretKey)
	dev := startProc(t, ctx, env, "dev", "--listen", "127.0.0.1:0", "--data", filepath.Join(dir, "dev"), "--relay-listen", "127.0.0.1:0")
	url := dev.waitLine(t, regexp.MustCompile(`ready at (http://\S+)`))
	dev.waitLine(t, regexp.MustCompile(`msg=reconciled .*(unfinished=0)`))
	s := &super{t: t, url: url, token: token}

	bucket, err := objstore.NewS3(objstore.S3Config{Endpoint: s3.Endpoint, AccessKey: s3.AccessKey, SecretKey: s3.SecretKey, Bucket: s3.Bucket, Prefix: "berth"})
	if err != nil {
		t.Fatal(err)
	}
	objects := func() []objstore.Info {
		t.Helper()
		infos, err := bucket.List(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		return infos
	}

	for _, provider := range []string{"docker", "local"} {
		agent := "keep-" + provider
		s.must("POST", "/v1/agents", map[string]any{"id": agent, "name": agent}, 201, nil)
		s.must("POST", "/v1/computers", map[string]any{"agent": agent, "provider": provider, "persistence": "home"}, 201, nil)
		var first session
		s.must("POST", "/v1/agents/"+agent+"/computer/start", nil, 200, &first)
		if x := s.exec(agent, persistScript); x.ExitCode != 0 {
			t.Fatalf("%s: fill the home: %+v", provider, x)
		}
		before := s.exec(agent, persistPrint).Stdout
		if !strings.Contains(before, "proj/sub/owned regular file 600 1000:1000") || !strings.Contains(before, "'proj/link' -> 'notes.txt'") {
			t.Fatalf("%s: fingerprint before:\n%s", provider, before)
		}
		begin := time.Now()
		s.must("POST", "/v1/agents/"+agent+"/computer/stop", nil, 200, nil)
		slept := time.Since(begin)
		var st sleepStatus
		s.must("GET", "/v1/agents/"+agent+"/computer", nil, 200, &st)
		if st.State != "sleeping" || st.Archive == nil || st.Archive.Bytes < 200_000_000 {
			t.Fatalf("%s: status after stop = %+v", provider, st)
		}
		begin = time.Now()
		var woke session
		s.must("POST", "/v1/agents/"+agent+"/computer/start", nil, 200, &woke)
		after := s.exec(agent, persistPrint).Stdout
		wake := time.Since(begin)
		if woke.ID == first.ID || after != before {
			t.Fatalf("%s: home after wake (session %s after %s) differs:\nbefore:\n%s\nafter:\n%s", provider, woke.ID, first.ID, before, after)
		}
		t.Logf("%s: %d-byte archive: sleep %v, wake to the first exec answered %v", provider, st.Archive.Bytes, slept.Round(time.Millisecond), wake.Round(time.Millisecond))
		s.must("POST", "/v1/agents/"+agent+"/computer/stop", nil, 200, nil)
	}

	infos := objects()
	if len(infos) != 2 {
		t.Fatalf("bucket holds %d objects, want the two sleep archives: %+v", len(infos), infos)
	}
	for _, in := range infos {
		if !strings.HasPrefix(in.Key, "archives/keep-") {
			t.Errorf("object %q is not under archives/<agent>/", in.Key)
		}
	}
	for _, agent := range []string{"keep-docker", "keep-local"} {
		s.must("DELETE", "/v1/agents/"+agent+"/computer", nil, 200, nil)
	}
	if infos := objects(); len(infos) != 0 {
		t.Fatalf("bucket after disconnect holds %+v, want nothing", infos)
	}
}
