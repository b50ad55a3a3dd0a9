-- The egress proxy finds a computer's live session on every connection.
CREATE INDEX sessions_computer ON sessions (computer_id);
