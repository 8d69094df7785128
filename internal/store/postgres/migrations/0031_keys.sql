-- Governance, issue 14: user keys managed over the API and the grace period
-- of a rotated agent key. Keep in step with
-- ../../sqlite/migrations/0031_keys.sql.
--
-- A user key works wherever an AGENTPLANE_API_KEYS key does. Only its
-- SHA-256 is kept (the key is shown once, at creation); deleting the row
-- revokes it.
CREATE TABLE user_keys (
  key_id     TEXT PRIMARY KEY,
  user_id    TEXT NOT NULL,
  key_hash   TEXT NOT NULL UNIQUE,
  created_at BIGINT NOT NULL
);
CREATE INDEX user_keys_user ON user_keys(user_id, created_at);

-- An agent key replaced by rotate_key keeps working until expires_at
-- (limits.agent_key_grace_seconds), so running agent processes can be
-- moved to the new key without a gap.
CREATE TABLE agent_key_grace (
  key_hash   TEXT PRIMARY KEY,
  agent_id   TEXT NOT NULL,
  expires_at BIGINT NOT NULL,
  created_at BIGINT NOT NULL
);
CREATE INDEX agent_key_grace_agent ON agent_key_grace(agent_id);
