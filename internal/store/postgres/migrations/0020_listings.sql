-- Operator listings (issue 11): indexes for the filters and orders of
-- GET /v1/sessions, /v1/runs, /v1/approvals and /v1/usage. Keep in step
-- with ../../sqlite/migrations/0020_listings.sql.

-- Sessions newest first (sessions_user already serves the user filter).
CREATE INDEX sessions_created ON sessions(created_at, session_id);
-- Runs newest first, and by agent or user.
CREATE INDEX runs_started ON runs(started_at, run_id);
CREATE INDEX runs_agent_started ON runs(agent_id, started_at);
CREATE INDEX runs_user_started ON runs(user_id, started_at);
-- Approvals in creation order whatever their status.
CREATE INDEX approvals_created ON approvals(created_at, approval_id);
-- Usage sums LLM calls over a period: only those rows, by time. Queries
-- must spell the type as this literal for the planner to use it.
CREATE INDEX events_llm_done ON events(ts) WHERE type = 'llm_call_done';
