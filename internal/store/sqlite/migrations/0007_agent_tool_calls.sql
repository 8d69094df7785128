-- agentplane:foreign-keys-off
-- The call_<agent> tool kind (issue 9, DESIGN §11). Keep in step with
-- ../../postgres/migrations/0007_agent_tool_calls.sql.
--
-- An agent call's execution is a child run: RUNNING while the child runs,
-- with no deadline unless the administrator gave call_<agent> a timeout
-- (timeout_ms = 0 means none). The child's end settles the call in its own
-- terminal transaction, and a run that ends ends its children, so such a
-- call cannot wait forever without a deadline either.
--
-- SQLite cannot change a CHECK constraint in place: the table is rebuilt
-- (https://www.sqlite.org/lang_altertable.html#otheralter), with foreign
-- keys off for the migration and checked before it commits.
CREATE TABLE tool_calls_new (
  tool_call_id    TEXT PRIMARY KEY,
  run_id          TEXT NOT NULL REFERENCES runs(run_id),
  session_id      TEXT NOT NULL,
  agent_id        TEXT NOT NULL,
  tool_name       TEXT NOT NULL,
  kind            TEXT NOT NULL,
  status          TEXT NOT NULL,
  args            TEXT NOT NULL,
  result          TEXT,
  error           TEXT,
  idempotency_key TEXT NOT NULL DEFAULT '',
  args_hash       TEXT NOT NULL,
  approval_id     TEXT NOT NULL DEFAULT '',
  policy          TEXT,
  deadline_at     INTEGER,
  timeout_ms      INTEGER NOT NULL,
  attempts        INTEGER NOT NULL DEFAULT 0,
  created_at      INTEGER NOT NULL,
  updated_at      INTEGER NOT NULL,
  ended_at        INTEGER,
  CHECK (kind IN ('server','client','agent')),
  CHECK (status IN ('CREATED','POLICY_CHECKED','BLOCKED','WAITING_APPROVAL','DISPATCHED','RUNNING',
                    'WAITING_CLIENT','SUCCEEDED','FAILED','REJECTED','TIMEOUT','EXPIRED','CANCELLED')),
  CHECK ((status IN ('SUCCEEDED','FAILED','BLOCKED','REJECTED','TIMEOUT','EXPIRED','CANCELLED')) = (ended_at IS NOT NULL)),
  -- Every waiting state has a deadline, except an agent call's RUNNING
  -- without a timeout (its child run settles it).
  CHECK (status NOT IN ('WAITING_APPROVAL','DISPATCHED','RUNNING','WAITING_CLIENT') OR deadline_at IS NOT NULL
         OR (kind = 'agent' AND status = 'RUNNING' AND timeout_ms = 0)),
  CHECK (ended_at IS NULL OR deadline_at IS NULL),
  CHECK (status <> 'WAITING_APPROVAL' OR approval_id <> ''),
  CHECK (timeout_ms > 0 OR (kind = 'agent' AND timeout_ms = 0)),
  CHECK (attempts >= 0)
);
INSERT INTO tool_calls_new (tool_call_id, run_id, session_id, agent_id, tool_name, kind, status, args, result, error,
    idempotency_key, args_hash, approval_id, policy, deadline_at, timeout_ms, attempts, created_at, updated_at, ended_at)
  SELECT tool_call_id, run_id, session_id, agent_id, tool_name, kind, status, args, result, error,
    idempotency_key, args_hash, approval_id, policy, deadline_at, timeout_ms, attempts, created_at, updated_at, ended_at
  FROM tool_calls;
DROP TABLE tool_calls;
ALTER TABLE tool_calls_new RENAME TO tool_calls;
CREATE UNIQUE INDEX tool_calls_idempotency ON tool_calls(run_id, idempotency_key) WHERE idempotency_key <> '';
CREATE INDEX tool_calls_due ON tool_calls(deadline_at) WHERE ended_at IS NULL AND deadline_at IS NOT NULL;
CREATE INDEX tool_calls_active_run ON tool_calls(run_id) WHERE ended_at IS NULL;
CREATE INDEX tool_calls_waiting_client ON tool_calls(session_id) WHERE status = 'WAITING_CLIENT';
