-- Suspended machines (persistence "memory"): the reconciler keeps the
-- machines of the sessions whose home is "suspended".
CREATE INDEX sessions_home ON sessions (home);
