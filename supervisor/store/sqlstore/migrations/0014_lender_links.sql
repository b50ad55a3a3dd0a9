-- Which relay holds each lender's link, as the relays report it: a lease
-- that the holding relay renews, so that a relay that stops loses its
-- lenders within seconds.
CREATE TABLE lender_links (
	lender_id    TEXT PRIMARY KEY,
	relay        TEXT NOT NULL,
	connected_at BIGINT NOT NULL,
	last_seen    BIGINT NOT NULL,
	version      TEXT NOT NULL DEFAULT '',
	expires_at   BIGINT NOT NULL
)
