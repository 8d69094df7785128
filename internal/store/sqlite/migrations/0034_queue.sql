-- agentplane:foreign-keys-off
-- Governance, issue 14: per-user and global caps on active root runs, and
-- the run queue (DESIGN §15). Keep in step with
-- ../../postgres/migrations/0034_queue.sql.
--
-- A root run started over the global cap (limits.max_active_runs) is
-- QUEUED: a run, not ended, so its session is busy, and it counts against
-- its user; it is not running, so it takes no slot. queued_at orders the
-- queue (first in, first out); queue_position is the position its client
-- was last told (state QUEUED {position}). Admission moves it to RUNNING
-- with the admitting process as its owner.
--
-- SQLite cannot change a CHECK constraint in place: runs is rebuilt
-- (https://www.sqlite.org/lang_altertable.html#otheralter) with its
-- indexes, foreign keys off and checked before the migration commits.
CREATE TABLE runs_new (
  run_id         TEXT PRIMARY KEY,
  session_id     TEXT NOT NULL REFERENCES sessions(session_id),
  agent_id       TEXT NOT NULL,
  parent_run_id  TEXT NOT NULL DEFAULT '',
  user_id        TEXT NOT NULL DEFAULT '',
  status         TEXT NOT NULL,
  owner          TEXT NOT NULL,
  started_at     INTEGER NOT NULL,
  ended_at       INTEGER,
  error          TEXT,
  usage          TEXT,
  depth          INTEGER NOT NULL DEFAULT 0 CHECK (depth >= 0),
  root_run_id    TEXT NOT NULL DEFAULT '',
  child_key      TEXT,
  tool_call_id   TEXT NOT NULL DEFAULT '',
  queued_at      INTEGER,
  queue_position INTEGER,
  CHECK (status IN ('QUEUED','RUNNING','PAUSED_WAITING_APPROVAL','PAUSED_WAITING_TOOL','DONE','FAILED','CANCELLED')),
  CHECK ((status IN ('DONE','FAILED','CANCELLED')) = (ended_at IS NOT NULL)),
  CHECK (status <> 'QUEUED' OR (queued_at IS NOT NULL AND parent_run_id = ''))
);
INSERT INTO runs_new (run_id, session_id, agent_id, parent_run_id, user_id, status, owner, started_at, ended_at, error, usage,
    depth, root_run_id, child_key, tool_call_id)
  SELECT run_id, session_id, agent_id, parent_run_id, user_id, status, owner, started_at, ended_at, error, usage,
    depth, root_run_id, child_key, tool_call_id
  FROM runs;
DROP TABLE runs;
ALTER TABLE runs_new RENAME TO runs;
CREATE UNIQUE INDEX runs_one_active_root ON runs(session_id) WHERE parent_run_id = '' AND ended_at IS NULL;
CREATE INDEX runs_active_owner ON runs(owner) WHERE ended_at IS NULL;
CREATE INDEX runs_session ON runs(session_id, started_at);
CREATE UNIQUE INDEX runs_child_key ON runs(parent_run_id, child_key) WHERE child_key IS NOT NULL;
CREATE INDEX runs_parent ON runs(parent_run_id, started_at) WHERE parent_run_id <> '';
CREATE INDEX runs_root ON runs(root_run_id);
CREATE INDEX runs_started ON runs(started_at, run_id);
CREATE INDEX runs_agent_started ON runs(agent_id, started_at);
CREATE INDEX runs_user_started ON runs(user_id, started_at);
-- The queue in order, a user's active root runs, the active root runs.
CREATE INDEX runs_queue ON runs(queued_at, run_id) WHERE status = 'QUEUED';
CREATE INDEX runs_active_user ON runs(user_id) WHERE ended_at IS NULL AND parent_run_id = '';
CREATE INDEX runs_active_roots ON runs(status) WHERE ended_at IS NULL AND parent_run_id = '';

-- One row, locked by every transaction that counts active root runs and
-- starts or admits one, so the global cap holds across replicas.
CREATE TABLE run_admission (
  id INTEGER PRIMARY KEY CHECK (id = 1)
);
INSERT INTO run_admission (id) VALUES (1);
