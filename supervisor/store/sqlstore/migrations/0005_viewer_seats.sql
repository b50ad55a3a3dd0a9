CREATE TABLE viewer_seats (
	session_id TEXT NOT NULL,
	viewer_id  TEXT NOT NULL,
	expires_at BIGINT NOT NULL,
	PRIMARY KEY (session_id, viewer_id)
);

CREATE INDEX viewer_seats_expires ON viewer_seats (expires_at)
