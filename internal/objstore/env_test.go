package objstore

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

func TestFromEnv(t *testing.T) {
	dir := t.TempDir()
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	keys := []string{EnvAccessKey, "ak", EnvSecretKey, "sk"}

	s, err := FromEnv(env(), dir)
	if l, ok := s.(*Local); err != nil || !ok || l.Root() != dir {
		t.Fatalf("unset: %T %v, want the local store in %s", s, err, dir)
	}
	other := filepath.Join(dir, "other")
	s, err = FromEnv(env(EnvURL, "file://"+other), dir)
	if l, ok := s.(*Local); err != nil || !ok || l.Root() != other {
		t.Fatalf("file://: %T %v", s, err)
	}
	s, err = FromEnv(env(append([]string{EnvURL, "s3://archives/berth/prod", EnvEndpoint, "http://127.0.0.1:9000"}, keys...)...), "")
	if s3, ok := s.(*S3); err != nil || !ok || s3.cfg.Bucket != "archives" || s3.cfg.Prefix != "berth/prod/" || s3.client.EndpointURL().Scheme != "http" {
		t.Fatalf("s3:// over http: %T %v", s, err)
	}
	for _, ep := range []string{"https://s3.example.com", "s3.example.com:9000"} {
		s, err = FromEnv(env(append([]string{EnvURL, "s3://archives", EnvEndpoint, ep}, keys...)...), "")
		if s3, ok := s.(*S3); err != nil || !ok || s3.cfg.Prefix != "" || s3.client.EndpointURL().Scheme != "https" {
			t.Fatalf("s3:// at %s: %T %v, want TLS", ep, s, err)
		}
	}

	for _, c := range []struct {
		env  []string
		dir  string
		want string
	}{
		{nil, "", EnvURL},
		{[]string{EnvURL, "ftp://x/y"}, dir, "scheme must be s3:// or file://"},
		{[]string{EnvURL, "file://relative/path"}, dir, "file:///absolute/path"},
		{[]string{EnvURL, "s3://"}, dir, "names no bucket"},
		{[]string{EnvURL, "s3://ak:sk@bucket"}, dir, "no user"},
		{append([]string{EnvURL, "s3://bucket"}, keys...), dir, EnvEndpoint + " is required"},
		{[]string{EnvURL, "s3://bucket", EnvEndpoint, "https://s3.example.com"}, dir, EnvAccessKey},
		{append([]string{EnvURL, "s3://Bad_Bucket", EnvEndpoint, "https://s3.example.com"}, keys...), dir, "bucket"},
		{append([]string{EnvURL, "s3://bucket/../x", EnvEndpoint, "https://s3.example.com"}, keys...), dir, "prefix"},
		{append([]string{EnvURL, "s3://bucket", EnvEndpoint, "ftp://s3.example.com"}, keys...), dir, "https:// or http://"},
		{append([]string{EnvURL, "s3://bucket", EnvEndpoint, "https://s3.example.com/path"}, keys...), dir, "no path"},
	} {
		_, err := FromEnv(env(c.env...), c.dir)
		if !errors.Is(err, ErrSettings) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want ErrSettings mentioning %q", c.env, err, c.want)
		}
	}
}
