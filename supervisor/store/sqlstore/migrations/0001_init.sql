CREATE TABLE agents (
	id         TEXT PRIMARY KEY,
	name       TEXT NOT NULL,
	workspace  TEXT NOT NULL,
	created_at BIGINT NOT NULL
);

CREATE TABLE connections (
	agent_id      TEXT PRIMARY KEY REFERENCES agents(id),
	provider      TEXT NOT NULL,
	image         TEXT NOT NULL,
	lease_seconds INTEGER NOT NULL,
	daily_seconds INTEGER NOT NULL,
	credentials   TEXT NOT NULL,
	created_at    BIGINT NOT NULL
);

CREATE TABLE sessions (
	id               TEXT PRIMARY KEY,
	agent_id         TEXT NOT NULL,
	workspace        TEXT NOT NULL,
	provider         TEXT NOT NULL,
	image            TEXT NOT NULL,
	computer_id      TEXT NOT NULL,
	attempt_id       TEXT NOT NULL,
	state            TEXT NOT NULL,
	machine_id       TEXT NOT NULL DEFAULT '',
	endpoint         TEXT NOT NULL DEFAULT '',
	header           TEXT NOT NULL DEFAULT '',
	day              TEXT NOT NULL,
	reserved_seconds INTEGER NOT NULL,
	charged_seconds  INTEGER NOT NULL DEFAULT 0,
	created_at       BIGINT NOT NULL,
	expires_at       BIGINT NOT NULL,
	ended_at         BIGINT NOT NULL DEFAULT 0,
	cleanup_tries    INTEGER NOT NULL DEFAULT 0,
	next_cleanup_at  BIGINT NOT NULL DEFAULT 0,
	last_error       TEXT NOT NULL DEFAULT ''
);

CREATE INDEX sessions_agent_state ON sessions (agent_id, state);
CREATE INDEX sessions_state ON sessions (state);
CREATE INDEX sessions_agent_day ON sessions (agent_id, day);
CREATE INDEX sessions_created ON sessions (created_at);
