-- Governance, issue 14: retention and session deletion. Keep in step with
-- ../../postgres/migrations/0033_retention.sql.
--
-- A session being deleted (by the retention sweeper or DELETE
-- /v1/sessions/{id}) has a row here from the moment its deletion is
-- decided — in a transaction that holds the session's row and finds no
-- active or queued run: a run cannot start in it from then on, and a
-- deletion cut short (a crash) is finished by the sweeper of any replica
-- (owner and started_at say who works on it). Once its last row is gone,
-- done_at is set and the row stays a while as a tombstone: the id is not
-- reused by a new conversation while clients may still follow the old one
-- (their cursor would skip the new seqs).
CREATE TABLE session_purges (
  session_id TEXT PRIMARY KEY,
  owner      TEXT NOT NULL,
  started_at INTEGER NOT NULL,
  reason     TEXT NOT NULL DEFAULT '',
  done_at    INTEGER
);
CREATE INDEX session_purges_done ON session_purges(done_at);

-- The sweeper deletes a session's rows table by table in small batches:
-- tool calls by session need an index (sessions by age have one, 0020).
CREATE INDEX tool_calls_session ON tool_calls(session_id);
