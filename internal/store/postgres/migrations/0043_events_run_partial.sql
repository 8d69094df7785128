-- events_run leaves out the stream's deltas. Keep in step with
-- ../../sqlite/migrations/0043_events_run_partial.sql, which explains it.
DROP INDEX events_run;
CREATE INDEX events_run ON events(run_id, seq) WHERE type NOT IN ('agent_stream_delta', 'sub_agent_partial');
