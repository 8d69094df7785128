-- Tools, tool calls and approvals (issue 4, DESIGN §6–§8). Keep in step with
-- ../../sqlite/migrations/0002_tools.sql.

-- The tool registry. definition is the administrator's JSON, opaque to the
-- store (package tool compiles it) and returned byte for byte: JSON, not
-- JSONB, because JSONB reorders keys, and the order of a schema's properties
-- is what GET /v1/tools shows and what a model is handed.
CREATE TABLE tools (
  tool_name  TEXT PRIMARY KEY,
  definition JSON NOT NULL,
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL
);

-- A tool call is a durable state machine (DESIGN §8); every change is a
-- guarded UPDATE. deadline_at is the deadline of the current waiting state:
-- the approval expiry while WAITING_APPROVAL, the tool timeout while
-- DISPATCHED, RUNNING or WAITING_CLIENT. The sweeper enforces it, so it
-- survives restarts and works across replicas (DESIGN §2.5).
CREATE TABLE tool_calls (
  tool_call_id    TEXT PRIMARY KEY,
  run_id          TEXT NOT NULL REFERENCES runs(run_id),
  session_id      TEXT NOT NULL,
  agent_id        TEXT NOT NULL,
  tool_name       TEXT NOT NULL,
  kind            TEXT NOT NULL,
  status          TEXT NOT NULL,
  args            JSONB NOT NULL,
  result          JSONB,
  error           JSONB,
  idempotency_key TEXT NOT NULL DEFAULT '',
  args_hash       TEXT NOT NULL,
  approval_id     TEXT NOT NULL DEFAULT '',
  policy          JSONB,
  deadline_at     BIGINT,
  timeout_ms      BIGINT NOT NULL,
  attempts        INTEGER NOT NULL DEFAULT 0,
  created_at      BIGINT NOT NULL,
  updated_at      BIGINT NOT NULL,
  ended_at        BIGINT,
  CHECK (kind IN ('server','client')),
  CHECK (status IN ('CREATED','POLICY_CHECKED','BLOCKED','WAITING_APPROVAL','DISPATCHED','RUNNING',
                    'WAITING_CLIENT','SUCCEEDED','FAILED','REJECTED','TIMEOUT','EXPIRED','CANCELLED')),
  -- Terminal ⇔ ended.
  CHECK ((status IN ('SUCCEEDED','FAILED','BLOCKED','REJECTED','TIMEOUT','EXPIRED','CANCELLED')) = (ended_at IS NOT NULL)),
  -- Every waiting state has a deadline, so nothing waits forever; an ended
  -- call has none, so the sweeper never sees it.
  CHECK (status NOT IN ('WAITING_APPROVAL','DISPATCHED','RUNNING','WAITING_CLIENT') OR deadline_at IS NOT NULL),
  CHECK (ended_at IS NULL OR deadline_at IS NULL),
  CHECK (status <> 'WAITING_APPROVAL' OR approval_id <> ''),
  CHECK (timeout_ms > 0),
  CHECK (attempts >= 0)
);
-- Idempotency keys are scoped to the run: the agent generates them (often a
-- counter or a hash of the step), so two runs — of one agent or of two —
-- easily produce the same key for unrelated calls, and a run is the unit an
-- agent retries within. A retry in the same run with the same key gets the
-- same tool_call_id (DESIGN §2.3); the same key in another run is a new call.
CREATE UNIQUE INDEX tool_calls_idempotency ON tool_calls(run_id, idempotency_key) WHERE idempotency_key <> '';
-- The sweeper: non-terminal calls by deadline.
CREATE INDEX tool_calls_due ON tool_calls(deadline_at) WHERE ended_at IS NULL AND deadline_at IS NOT NULL;
-- Cancel cascade: a run's non-terminal calls.
CREATE INDEX tool_calls_active_run ON tool_calls(run_id) WHERE ended_at IS NULL;
-- Client tool requests re-sent to a session's client when it subscribes.
CREATE INDEX tool_calls_waiting_client ON tool_calls(session_id) WHERE status = 'WAITING_CLIENT';

CREATE TABLE approvals (
  approval_id  TEXT PRIMARY KEY,
  tool_call_id TEXT NOT NULL UNIQUE REFERENCES tool_calls(tool_call_id),
  run_id       TEXT NOT NULL,
  session_id   TEXT NOT NULL,
  tool_name    TEXT NOT NULL,
  status       TEXT NOT NULL,
  args_summary TEXT NOT NULL DEFAULT '',
  expires_at   BIGINT NOT NULL,
  decided_by   TEXT NOT NULL DEFAULT '',
  reason       TEXT NOT NULL DEFAULT '',
  decided_at   BIGINT,
  created_at   BIGINT NOT NULL,
  CHECK (status IN ('PENDING','APPROVED','REJECTED','EXPIRED','CANCELLED')),
  CHECK ((status = 'PENDING') = (decided_at IS NULL))
);
-- Pending approvals by expiry (the sweeper, GET /v1/approvals?status=PENDING).
CREATE INDEX approvals_pending ON approvals(expires_at) WHERE status = 'PENDING';
CREATE INDEX approvals_session ON approvals(session_id, created_at);
