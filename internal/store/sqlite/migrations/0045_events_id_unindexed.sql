-- event_id is no longer a key (issue 13). Keep in step with
-- ../../postgres/migrations/0045_events_id_unindexed.sql.
--
-- Nothing looks an event up by its id: events are read by session and seq
-- (UNIQUE (session_id, seq), which also keeps a session's seqs unique)
-- and by run. The id's unique index only cost every event a third B-tree
-- insert, and a page of its own in every commit's WAL frames; the id
-- itself (a UUIDv7 made by the platform) stays unique by construction.
-- SQLite cannot drop a primary key in place: the table is rebuilt.
CREATE TABLE events_new (
  event_id      TEXT NOT NULL,
  session_id    TEXT NOT NULL,
  seq           INTEGER NOT NULL,
  run_id        TEXT NOT NULL DEFAULT '',
  parent_run_id TEXT NOT NULL DEFAULT '',
  ts            INTEGER NOT NULL,
  type          TEXT NOT NULL,
  payload       TEXT NOT NULL,
  UNIQUE (session_id, seq)
);
INSERT INTO events_new (event_id, session_id, seq, run_id, parent_run_id, ts, type, payload)
  SELECT event_id, session_id, seq, run_id, parent_run_id, ts, type, payload FROM events ORDER BY session_id, seq;
DROP TABLE events;
ALTER TABLE events_new RENAME TO events;
CREATE INDEX events_run ON events(run_id, seq) WHERE type NOT IN ('agent_stream_delta', 'sub_agent_partial');
CREATE INDEX events_llm_done ON events(ts) WHERE type = 'llm_call_done';
