-- A hosted browser connection's options: whether the provider records
-- its sessions (0 or 1), and the country of its proxy ('' for none).
ALTER TABLE connections ADD COLUMN browser_recording INTEGER NOT NULL DEFAULT 0;
ALTER TABLE connections ADD COLUMN browser_proxy_country TEXT NOT NULL DEFAULT ''
