package sqlstore

import (
	"context"
	"database/sql/driver"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// Pool settings for PostgreSQL. Each supervisor keeps a bounded pool, so
// that several of them fit within the server's max_connections (100 by
// default); a reservation holds its connection only for one short
// transaction.
const (
	pgMaxOpenConns    = 16
	pgMaxIdleConns    = 16
	pgConnMaxIdleTime = 5 * time.Minute
	pgConnMaxLifetime = time.Hour
)

// migrateLockKey names the PostgreSQL advisory lock that supervisors hold
// while they migrate one database ("berth" in ASCII).
const migrateLockKey int64 = 0x6265727468

// OpenPostgres connects to the PostgreSQL database at url (a postgres://
// URL or a key=value connection string) and applies the migrations.
// Supervisors that start together against one database take turns: each
// migrates while it holds an advisory lock, so every migration runs once.
func OpenPostgres(ctx context.Context, url string) (*Store, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		// pgx keeps the password out of its parse errors.
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	where := fmt.Sprintf("%s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(pgMaxOpenConns)
	db.SetMaxIdleConns(pgMaxIdleConns)
	db.SetConnMaxIdleTime(pgConnMaxIdleTime)
	db.SetConnMaxLifetime(pgConnMaxLifetime)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open postgres %s: %w", where, err)
	}
	s := &Store{db: db, rd: db, dialect: postgres}
	if err := s.migrateLocked(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open postgres %s: %w", where, err)
	}
	return s, nil
}

// migrateLocked runs migrate while one pooled connection holds the
// migration lock; migrate itself uses other connections of the pool.
func (s *Store) migrateLocked(ctx context.Context) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, migrateLockKey); err != nil {
		return fmt.Errorf("migrate: take lock: %w", err)
	}
	defer func() {
		if _, err := conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, migrateLockKey); err != nil {
			// A connection that may still hold the lock must not go back
			// to the pool: closing it releases the lock on the server.
			conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}()
	return s.migrate(ctx)
}
