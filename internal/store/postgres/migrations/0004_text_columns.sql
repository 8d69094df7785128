-- Issue 8, item 1: PostgreSQL must keep what SQLite keeps. jsonb refuses
-- JSON that is valid to every other reader — a "\u0000" escape, a lone
-- surrogate ("\ud800"), a number beyond its numeric type (1e999999) — so a
-- state event with "\u0000" in its detail was lost while SQLite stored it.
-- The store never queries inside these values (package sqlstore treats
-- them as opaque JSON text, validated by the Go side), so they become TEXT,
-- as on SQLite: stored and returned byte for byte, and cheaper to insert
-- than jsonb. Existing rows keep their (jsonb-normalised) text.
-- NUL bytes and invalid UTF-8 in any text column are handled by the
-- store's text codec (sqlstore/text.go), not here.
ALTER TABLE sessions
  ALTER COLUMN metadata DROP DEFAULT,
  ALTER COLUMN metadata TYPE TEXT USING metadata::text,
  ALTER COLUMN metadata SET DEFAULT '{}';
ALTER TABLE runs
  ALTER COLUMN error TYPE TEXT USING error::text,
  ALTER COLUMN usage TYPE TEXT USING usage::text;
ALTER TABLE events
  ALTER COLUMN payload TYPE TEXT USING payload::text;
ALTER TABLE agents
  ALTER COLUMN capabilities DROP DEFAULT,
  ALTER COLUMN capabilities TYPE TEXT USING capabilities::text,
  ALTER COLUMN capabilities SET DEFAULT '[]',
  ALTER COLUMN linked_agents DROP DEFAULT,
  ALTER COLUMN linked_agents TYPE TEXT USING linked_agents::text,
  ALTER COLUMN linked_agents SET DEFAULT '[]';
ALTER TABLE context_blobs
  ALTER COLUMN data TYPE TEXT USING data::text;
ALTER TABLE tool_calls
  ALTER COLUMN args TYPE TEXT USING args::text,
  ALTER COLUMN result TYPE TEXT USING result::text,
  ALTER COLUMN error TYPE TEXT USING error::text,
  ALTER COLUMN policy TYPE TEXT USING policy::text;
-- tools.definition is JSON (exact text, and json accepts all of the above),
-- but an escaped value (raw invalid UTF-8 in a description) is not JSON.
ALTER TABLE tools
  ALTER COLUMN definition TYPE TEXT;
