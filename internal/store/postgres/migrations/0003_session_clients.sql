-- Client presence across processes (DESIGN §8: a client tool needs a
-- connection of its session). Keep in step with
-- ../../sqlite/migrations/0003_session_clients.sql.
--
-- One row per session and process whose ingress has connections following
-- the session (a row with zero connections is deleted). A process deletes
-- its rows when it starts and stops; a crashed process's rows stop counting
-- once its heartbeat in instances goes stale.
CREATE TABLE session_clients (
  session_id  TEXT NOT NULL,
  instance_id TEXT NOT NULL,
  connections INTEGER NOT NULL,
  updated_at  BIGINT NOT NULL,
  PRIMARY KEY (session_id, instance_id),
  CHECK (connections > 0)
);
-- A restarted process drops the rows of its previous life.
CREATE INDEX session_clients_instance ON session_clients(instance_id);
