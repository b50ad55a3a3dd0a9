CREATE TABLE api_keys (
	id           TEXT PRIMARY KEY,
	name         TEXT NOT NULL,
	scope        TEXT NOT NULL,
	workspace    TEXT NOT NULL DEFAULT '',
	agent_id     TEXT NOT NULL DEFAULT '',
	key_hash     TEXT NOT NULL,
	created_at   BIGINT NOT NULL,
	last_used_at BIGINT NOT NULL DEFAULT 0,
	expires_at   BIGINT NOT NULL DEFAULT 0,
	revoked_at   BIGINT NOT NULL DEFAULT 0,
	created_by   TEXT NOT NULL DEFAULT ''
);

CREATE INDEX api_keys_workspace ON api_keys (workspace);

CREATE TABLE audit_log (
	id        TEXT PRIMARY KEY,
	at        BIGINT NOT NULL,
	actor     TEXT NOT NULL,
	workspace TEXT NOT NULL DEFAULT '',
	action    TEXT NOT NULL,
	target    TEXT NOT NULL DEFAULT '',
	detail    TEXT NOT NULL DEFAULT ''
);

CREATE INDEX audit_log_workspace_at ON audit_log (workspace, at);

CREATE INDEX audit_log_at ON audit_log (at)
