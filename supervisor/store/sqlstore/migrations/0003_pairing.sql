CREATE TABLE pair_codes (
	code_hash  TEXT PRIMARY KEY,
	name       TEXT NOT NULL DEFAULT '',
	created_at BIGINT NOT NULL,
	expires_at BIGINT NOT NULL,
	used_at    BIGINT NOT NULL DEFAULT 0,
	agent_id   TEXT NOT NULL DEFAULT ''
);

CREATE TABLE companions (
	id           TEXT PRIMARY KEY,
	name         TEXT NOT NULL,
	token_hash   TEXT NOT NULL UNIQUE,
	created_at   BIGINT NOT NULL,
	last_seen_at BIGINT NOT NULL DEFAULT 0
)
