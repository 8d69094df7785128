-- Indexes the query-plan audit asked for. Keep in step with
-- ../../sqlite/migrations/0042_plan_indexes.sql, which explains them
-- (PostgreSQL needs tool_calls(run_id) for the reference too: deleting a
-- run looks for its tool calls).
DROP INDEX tool_calls_active_run;
CREATE INDEX tool_calls_run ON tool_calls(run_id);
CREATE INDEX runs_active ON runs(started_at, run_id) WHERE ended_at IS NULL;
