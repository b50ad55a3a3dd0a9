-- Whether the connection allows browser_evaluate (0 or 1).
ALTER TABLE connections ADD COLUMN browser_evaluate INTEGER NOT NULL DEFAULT 0
