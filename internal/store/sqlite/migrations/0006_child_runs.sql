-- Multi-agent: child runs (issue 9, DESIGN §11). Keep in step with
-- ../../postgres/migrations/0006_child_runs.sql.
--
-- A child run is a run: same table, same state machine. depth is 0 for a
-- root; root_run_id names the root of the run's tree (itself for a root),
-- so the tree and the cascade read it with one indexed query and no
-- recursion in SQL. child_key makes starting a child idempotent within its
-- parent: the caller's idempotency_key (direct form) or "tool:" + the
-- call_<agent> tool call's id (tool form); NULL for roots. tool_call_id
-- names the tool call whose execution the child is (tool form only).
ALTER TABLE runs ADD COLUMN depth INTEGER NOT NULL DEFAULT 0 CHECK (depth >= 0);
ALTER TABLE runs ADD COLUMN root_run_id TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN child_key TEXT;
ALTER TABLE runs ADD COLUMN tool_call_id TEXT NOT NULL DEFAULT '';
-- Every run before this migration is a root.
UPDATE runs SET root_run_id = run_id WHERE root_run_id = '';
-- The same key within one parent is the same child, never a second one,
-- whichever replica races to start it.
CREATE UNIQUE INDEX runs_child_key ON runs(parent_run_id, child_key) WHERE child_key IS NOT NULL;
CREATE INDEX runs_parent ON runs(parent_run_id, started_at) WHERE parent_run_id <> '';
CREATE INDEX runs_root ON runs(root_run_id);

-- Transcript rows say whose they are, so a root agent's messages[] holds
-- root-level turns only and a child's turns stay attributable.
ALTER TABLE messages ADD COLUMN agent_id TEXT NOT NULL DEFAULT '';
ALTER TABLE messages ADD COLUMN parent_run_id TEXT NOT NULL DEFAULT '';
UPDATE messages SET agent_id = COALESCE((SELECT agent_id FROM runs WHERE runs.run_id = messages.run_id), '')
  WHERE run_id <> '';

-- Registration fields: what the agent does (offered to models with its
-- call_<agent> tool) and how its deltas are echoed to the session's clients
-- when it runs as a child.
ALTER TABLE agents ADD COLUMN description TEXT NOT NULL DEFAULT '';
ALTER TABLE agents ADD COLUMN sub_agent_echo TEXT NOT NULL DEFAULT 'aggregate'
  CHECK (sub_agent_echo IN ('aggregate','passthrough','off'));
