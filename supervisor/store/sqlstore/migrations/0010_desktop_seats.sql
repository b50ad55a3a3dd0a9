-- Desktop seats: how many holders may use a connection's desktop tools
-- at once, and who holds a seat at each session's desktop until when.
ALTER TABLE connections ADD COLUMN desktop_users INTEGER NOT NULL DEFAULT 1;

CREATE TABLE desktop_seats (
	session_id TEXT NOT NULL,
	holder_id  TEXT NOT NULL,
	expires_at BIGINT NOT NULL,
	PRIMARY KEY (session_id, holder_id)
);

CREATE INDEX desktop_seats_expires ON desktop_seats (expires_at)
