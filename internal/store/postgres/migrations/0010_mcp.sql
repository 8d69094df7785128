-- MCP servers as tool sources (issue 12, DESIGN §13). Keep in step with
-- ../../sqlite/migrations/0010_mcp.sql.

-- The registry of MCP servers. spec is the administrator's JSON (transport,
-- url or command, policy, …), opaque to the store and returned byte for
-- byte: TEXT, as on SQLite (the store validates JSON on the Go side).
CREATE TABLE mcp_servers (
  name       TEXT PRIMARY KEY,
  spec       TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL
);

-- Tool calls of kind 'mcp' are executed by the platform like server calls.
-- 0007 named the kind check (tool_calls_kind); the other checks it set
-- (agent calls may run RUNNING without a deadline) stay as they are.
ALTER TABLE tool_calls DROP CONSTRAINT tool_calls_kind;
ALTER TABLE tool_calls ADD CONSTRAINT tool_calls_kind CHECK (kind IN ('server','client','agent','mcp'));
