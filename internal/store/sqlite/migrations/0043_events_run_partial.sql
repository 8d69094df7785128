-- events_run leaves out the stream's deltas (issue 13). Keep in step with
-- ../../postgres/migrations/0043_events_run_partial.sql.
--
-- Every event paid for a second index entry keyed by its run, placed at
-- random in a B-tree as large as the log: at 20,000 deltas/s a third of the
-- server's CPU per event. What reads a run's events by type (its LLM calls,
-- its remote A2A task, how a child began) never asks for deltas; what reads
-- all of a run's events (its replay, an A2A task's snapshot) walks the
-- session's index from the run's first event, which this index finds
-- (sqlstore.EventsList). The condition is repeated word for word in those
-- statements, or the index could not be used.
DROP INDEX events_run;
CREATE INDEX events_run ON events(run_id, seq) WHERE type NOT IN ('agent_stream_delta', 'sub_agent_partial');
