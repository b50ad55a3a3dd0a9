-- Persistent computers: the connection's choice, each session's home
-- state, and the archives of homes and checkpoints in the object store.
ALTER TABLE connections ADD COLUMN persistence TEXT NOT NULL DEFAULT 'none';
ALTER TABLE connections ADD COLUMN idle_sleep_seconds INTEGER NOT NULL DEFAULT 0;
ALTER TABLE connections ADD COLUMN max_checkpoints INTEGER NOT NULL DEFAULT 0;

ALTER TABLE sessions ADD COLUMN home TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN wake_from TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN sleep_at BIGINT NOT NULL DEFAULT 0;

CREATE TABLE archives (
	agent_id   TEXT NOT NULL,
	name       TEXT NOT NULL,
	workspace  TEXT NOT NULL,
	object_key TEXT NOT NULL UNIQUE,
	bytes      BIGINT NOT NULL,
	sha256     TEXT NOT NULL,
	image      TEXT NOT NULL,
	session_id TEXT NOT NULL,
	created_at BIGINT NOT NULL,
	PRIMARY KEY (agent_id, name)
);

-- The reaper finds idle persistent sessions to put to sleep.
CREATE INDEX sessions_sleep ON sessions (state, sleep_at)
