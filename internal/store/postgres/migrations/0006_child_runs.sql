-- Multi-agent: child runs (issue 9, DESIGN §11). Keep in step with
-- ../../sqlite/migrations/0006_child_runs.sql, which explains the columns.
ALTER TABLE runs
  ADD COLUMN depth INTEGER NOT NULL DEFAULT 0 CHECK (depth >= 0),
  ADD COLUMN root_run_id TEXT NOT NULL DEFAULT '',
  ADD COLUMN child_key TEXT,
  ADD COLUMN tool_call_id TEXT NOT NULL DEFAULT '';
UPDATE runs SET root_run_id = run_id WHERE root_run_id = '';
CREATE UNIQUE INDEX runs_child_key ON runs(parent_run_id, child_key) WHERE child_key IS NOT NULL;
CREATE INDEX runs_parent ON runs(parent_run_id, started_at) WHERE parent_run_id <> '';
CREATE INDEX runs_root ON runs(root_run_id);

ALTER TABLE messages
  ADD COLUMN agent_id TEXT NOT NULL DEFAULT '',
  ADD COLUMN parent_run_id TEXT NOT NULL DEFAULT '';
UPDATE messages SET agent_id = runs.agent_id FROM runs WHERE runs.run_id = messages.run_id AND messages.run_id <> '';

ALTER TABLE agents
  ADD COLUMN description TEXT NOT NULL DEFAULT '',
  ADD COLUMN sub_agent_echo TEXT NOT NULL DEFAULT 'aggregate'
    CHECK (sub_agent_echo IN ('aggregate','passthrough','off'));
