-- The console's signed-in browsers, shared by every supervisor on the
-- store: the hash of each session's cookie, never the cookie or the key.
CREATE TABLE console_sessions (
	id_hash       TEXT PRIMARY KEY,
	csrf          TEXT NOT NULL,
	actor         TEXT NOT NULL,
	operator_mark TEXT NOT NULL DEFAULT '',
	created_at    BIGINT NOT NULL,
	last_used     BIGINT NOT NULL,
	flash         TEXT NOT NULL DEFAULT ''
);

CREATE INDEX console_sessions_last_used ON console_sessions (last_used)
