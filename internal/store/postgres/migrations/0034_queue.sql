-- Governance, issue 14: per-user and global caps on active root runs, and
-- the run queue (DESIGN §15). Keep in step with
-- ../../sqlite/migrations/0034_queue.sql, which explains the columns.
ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check
  CHECK (status IN ('QUEUED','RUNNING','PAUSED_WAITING_APPROVAL','PAUSED_WAITING_TOOL','DONE','FAILED','CANCELLED'));
ALTER TABLE runs
  ADD COLUMN queued_at BIGINT,
  ADD COLUMN queue_position INTEGER;
ALTER TABLE runs ADD CONSTRAINT runs_queued_check CHECK (status <> 'QUEUED' OR (queued_at IS NOT NULL AND parent_run_id = ''));
CREATE INDEX runs_queue ON runs(queued_at, run_id) WHERE status = 'QUEUED';
CREATE INDEX runs_active_user ON runs(user_id) WHERE ended_at IS NULL AND parent_run_id = '';
CREATE INDEX runs_active_roots ON runs(status) WHERE ended_at IS NULL AND parent_run_id = '';

CREATE TABLE run_admission (
  id INTEGER PRIMARY KEY CHECK (id = 1)
);
INSERT INTO run_admission (id) VALUES (1);
