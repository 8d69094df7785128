-- MCP servers as tool sources (issue 12, DESIGN §13). Keep in step with
-- ../../postgres/migrations/0010_mcp.sql.

-- The registry of MCP servers. spec is the administrator's JSON (transport,
-- url or command, policy, …), opaque to the store and returned byte for
-- byte.
CREATE TABLE mcp_servers (
  name       TEXT PRIMARY KEY,
  spec       TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
);

-- Tool calls of kind 'mcp' are executed by the platform like server calls.
-- Every other check is 0007_agent_tool_calls.sql's (agent calls may run
-- RUNNING without a deadline).
--
-- SQLite cannot alter a CHECK constraint, so the table is rebuilt. Its rows
-- wait in a plain copy while the table is dropped and created again.
-- approvals has a foreign key to tool_calls: deferred to the commit, the
-- drop leaves its approvals without a parent for a moment, and copying the
-- calls back gives each its parent again before the commit checks. (A
-- rename of the old table would instead re-point approvals at the old
-- name while foreign keys are on.) SELECT * fails loudly should another
-- migration have added a column this one does not know about.
PRAGMA defer_foreign_keys = ON;
CREATE TABLE tool_calls_before_0010 AS SELECT * FROM tool_calls;
DROP TABLE tool_calls;
CREATE TABLE tool_calls (
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
  CHECK (kind IN ('server','client','agent','mcp')),
  CHECK (status IN ('CREATED','POLICY_CHECKED','BLOCKED','WAITING_APPROVAL','DISPATCHED','RUNNING',
                    'WAITING_CLIENT','SUCCEEDED','FAILED','REJECTED','TIMEOUT','EXPIRED','CANCELLED')),
  CHECK ((status IN ('SUCCEEDED','FAILED','BLOCKED','REJECTED','TIMEOUT','EXPIRED','CANCELLED')) = (ended_at IS NOT NULL)),
  CHECK (status NOT IN ('WAITING_APPROVAL','DISPATCHED','RUNNING','WAITING_CLIENT') OR deadline_at IS NOT NULL
         OR (kind = 'agent' AND status = 'RUNNING' AND timeout_ms = 0)),
  CHECK (ended_at IS NULL OR deadline_at IS NULL),
  CHECK (status <> 'WAITING_APPROVAL' OR approval_id <> ''),
  CHECK (timeout_ms > 0 OR (kind = 'agent' AND timeout_ms = 0)),
  CHECK (attempts >= 0)
);
INSERT INTO tool_calls SELECT * FROM tool_calls_before_0010;
DROP TABLE tool_calls_before_0010;
-- The indexes went with the old table; the same ones again (0002_tools.sql
-- says what each is for).
CREATE UNIQUE INDEX tool_calls_idempotency ON tool_calls(run_id, idempotency_key) WHERE idempotency_key <> '';
CREATE INDEX tool_calls_due ON tool_calls(deadline_at) WHERE ended_at IS NULL AND deadline_at IS NOT NULL;
CREATE INDEX tool_calls_active_run ON tool_calls(run_id) WHERE ended_at IS NULL;
CREATE INDEX tool_calls_waiting_client ON tool_calls(session_id) WHERE status = 'WAITING_CLIENT';
