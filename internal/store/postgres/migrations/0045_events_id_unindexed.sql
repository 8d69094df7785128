-- event_id is no longer a key; UNIQUE (session_id, seq) stays. Keep in
-- step with ../../sqlite/migrations/0045_events_id_unindexed.sql, which
-- explains it.
ALTER TABLE events DROP CONSTRAINT events_pkey;
