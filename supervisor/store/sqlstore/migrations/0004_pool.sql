CREATE TABLE pool_members (
	computer_id TEXT PRIMARY KEY,
	machine_id  TEXT NOT NULL DEFAULT '',
	provider    TEXT NOT NULL,
	image       TEXT NOT NULL,
	attempt_id  TEXT NOT NULL,
	endpoint    TEXT NOT NULL DEFAULT '',
	owner       TEXT NOT NULL,
	state       TEXT NOT NULL,
	session_id  TEXT NOT NULL DEFAULT '',
	created_at  BIGINT NOT NULL,
	claimed_at  BIGINT NOT NULL DEFAULT 0
);

CREATE INDEX pool_members_claim ON pool_members (provider, image, owner, state, created_at)
