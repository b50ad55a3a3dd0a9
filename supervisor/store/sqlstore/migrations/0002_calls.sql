CREATE TABLE calls (
	key          TEXT PRIMARY KEY,
	agent_id     TEXT NOT NULL,
	tool         TEXT NOT NULL,
	request_hash TEXT NOT NULL,
	state        TEXT NOT NULL,
	owner        TEXT NOT NULL,
	status       INTEGER NOT NULL DEFAULT 0,
	response     TEXT NOT NULL DEFAULT '',
	created_at   BIGINT NOT NULL,
	finished_at  BIGINT NOT NULL DEFAULT 0
);

CREATE INDEX calls_created ON calls (created_at);

CREATE TABLE instances (
	id           TEXT PRIMARY KEY,
	started_at   BIGINT NOT NULL,
	heartbeat_at BIGINT NOT NULL
);

ALTER TABLE sessions ADD COLUMN owner TEXT NOT NULL DEFAULT '';

ALTER TABLE sessions ADD COLUMN claim_until BIGINT NOT NULL DEFAULT 0
;

CREATE TABLE meta (
	key   TEXT PRIMARY KEY,
	value TEXT NOT NULL
)
