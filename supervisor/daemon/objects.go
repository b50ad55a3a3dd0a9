package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/berthdev/berth/internal/objstore"
	"github.com/berthdev/berth/internal/secrets"
)

// EnvMaxArchiveBytes bounds one archive of a persistent computer's home.
const EnvMaxArchiveBytes = "MAX_ARCHIVE_BYTES"

// objectStore opens the store of persistent computers' archives
// (OBJECT_STORE_URL, by default DataDir/objects), sealed with the
// supervisor's key. An S3 bucket is checked now, so that a wrong endpoint,
// key or bucket stops the start with its reason instead of failing the
// first sleep.
func (d *Daemon) objectStore(ctx context.Context, box *secrets.Box) (objstore.Store, int64, error) {
	o := d.opts
	var most int64
	if v := strings.TrimSpace(o.Getenv(EnvMaxArchiveBytes)); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1<<20 {
			return nil, 0, fmt.Errorf("%s=%q: want a number of bytes, at least 1048576", EnvMaxArchiveBytes, v)
		}
		most = n
	}
	inner, err := objstore.FromEnv(o.Getenv, filepath.Join(o.DataDir, "objects"))
	if err != nil {
		return nil, 0, err
	}
	if s3, ok := inner.(*objstore.S3); ok {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if err := s3.CheckBucket(cctx); err != nil {
			return nil, 0, fmt.Errorf("%s: %w", objstore.EnvURL, err)
		}
	} else if strings.HasPrefix(o.Store, "postgres") {
		d.log.Warn("archives of persistent computers are kept in this supervisor's data folder; supervisors sharing PostgreSQL need a shared object store (OBJECT_STORE_URL=s3://...)", "folder", inner)
	}
	enc, err := objstore.NewEncrypted(inner, box)
	if err != nil {
		return nil, 0, err
	}
	d.log.Info("archives of persistent computers", "store", inner)
	return enc, most, nil
}
