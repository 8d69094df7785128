-- Governance, issue 14: limits shared by replicas. Keep in step with
-- ../../postgres/migrations/0032_limits.sql.
--
-- A token bucket per rate-limited key ("user:<id>", "agent:<id>"), taken
-- from in one atomic upsert (store.RateTake) by every replica; a process
-- leases a few tokens at a time so its hot path stays in memory. granted is
-- the last take's grant (RETURNING reads it back). A bucket idle long
-- enough to be full again is deleted: the same as none.
CREATE TABLE rate_buckets (
  bucket_key TEXT PRIMARY KEY,
  tokens     REAL NOT NULL,
  updated_at INTEGER NOT NULL,
  granted    REAL NOT NULL DEFAULT 0
);
CREATE INDEX rate_buckets_idle ON rate_buckets(updated_at);

-- WebSocket connections per user across replicas: each process counts its
-- own; a crashed process's rows stop counting once its instance heartbeat
-- is stale, and a process drops its rows when it starts and stops.
CREATE TABLE user_connections (
  user_id     TEXT NOT NULL,
  instance_id TEXT NOT NULL,
  connections INTEGER NOT NULL,
  updated_at  INTEGER NOT NULL,
  PRIMARY KEY (user_id, instance_id),
  CHECK (connections >= 0)
);
CREATE INDEX user_connections_instance ON user_connections(instance_id);

-- One row per user whose admissions must be serialised across replicas
-- (its WebSocket connections, its active runs): locked FOR UPDATE by the
-- transaction that counts and admits.
CREATE TABLE user_locks (
  user_id TEXT PRIMARY KEY
);
