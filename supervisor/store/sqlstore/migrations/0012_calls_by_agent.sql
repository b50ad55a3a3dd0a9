CREATE INDEX calls_agent ON calls (agent_id, created_at);
