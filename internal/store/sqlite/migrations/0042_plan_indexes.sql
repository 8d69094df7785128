-- Indexes the query-plan audit asked for (internal/testdb/plans.go: every
-- statement the tests run is explained, and none may scan a table that
-- grows). Keep in step with ../../postgres/migrations/0042_plan_indexes.sql.
--
-- tool_calls(run_id), in full: tool_calls.run_id references runs, and
-- SQLite checks that reference on every INSERT … ON CONFLICT into runs (a
-- run's start) and every DELETE from runs (retention) by looking for the
-- run's tool calls — a scan of all tool calls ever made while the only
-- index on run_id was the partial one of active calls, which it replaces
-- (a run's active calls are found through this one as cheaply).
DROP INDEX tool_calls_active_run;
CREATE INDEX tool_calls_run ON tool_calls(run_id);

-- The orphan sweep lists the runs that have not ended, oldest first; it
-- walked every run ever started in runs_started order to find them.
CREATE INDEX runs_active ON runs(started_at, run_id) WHERE ended_at IS NULL;
