package objstore

import (
	"fmt"
	"net/url"
	"strings"
)

// The settings FromEnv reads.
const (
	// EnvURL names the store: unset for the local folder FromEnv is
	// given, "file:///path" for another local folder, or
	// "s3://bucket[/prefix]" for a bucket of an S3-compatible service.
	EnvURL = "OBJECT_STORE_URL"
	// EnvEndpoint is the S3 service: "https://host[:port]", or
	// "http://host[:port]" for plain HTTP (a trusted network only).
	EnvEndpoint  = "OBJECT_STORE_ENDPOINT"
	EnvAccessKey = "OBJECT_STORE_ACCESS_KEY"
	EnvSecretKey = "OBJECT_STORE_SECRET_KEY"
	EnvRegion    = "OBJECT_STORE_REGION" // optional
)

// FromEnv returns the store the settings describe, read through getenv
// (os.Getenv, or a settings lookup): a Local store in localDir when EnvURL
// is unset, else the store EnvURL names. Bad settings fail with an error
// that wraps ErrSettings and names the setting. No service is contacted.
func FromEnv(getenv func(string) string, localDir string) (Store, error) {
	raw := strings.TrimSpace(getenv(EnvURL))
	if raw == "" {
		if localDir == "" {
			return nil, fmt.Errorf("%w: %s is unset and there is no data folder for a local store", ErrSettings, EnvURL)
		}
		return NewLocal(localDir)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrSettings, EnvURL, err)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%w: %s %q: no user, query or fragment allowed (keys go in %s and %s)", ErrSettings, EnvURL, raw, EnvAccessKey, EnvSecretKey)
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" || !strings.HasPrefix(u.Path, "/") {
			return nil, fmt.Errorf("%w: %s %q: a folder is file:///absolute/path", ErrSettings, EnvURL, raw)
		}
		return NewLocal(u.Path)
	case "s3":
		if u.Host == "" {
			return nil, fmt.Errorf("%w: %s %q names no bucket: s3://bucket/prefix", ErrSettings, EnvURL, raw)
		}
		return NewS3(S3Config{
			Endpoint:  strings.TrimSpace(getenv(EnvEndpoint)),
			AccessKey: getenv(EnvAccessKey),
			SecretKey: getenv(EnvSecretKey),
			Region:    strings.TrimSpace(getenv(EnvRegion)),
			Bucket:    u.Host,
			Prefix:    strings.TrimPrefix(u.Path, "/"),
		})
	}
	return nil, fmt.Errorf("%w: %s %q: the scheme must be s3:// or file://", ErrSettings, EnvURL, raw)
}
