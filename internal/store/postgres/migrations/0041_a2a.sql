-- A2A both ways (issue 10, DESIGN §12). Keep in step with
-- ../../sqlite/migrations/0041_a2a.sql, which explains the columns.
ALTER TABLE agents
  ADD COLUMN a2a INTEGER NOT NULL DEFAULT 0 CHECK (a2a IN (0, 1)),
  ADD COLUMN protocol TEXT NOT NULL DEFAULT 'agentplane' CHECK (protocol IN ('agentplane', 'a2a')),
  ADD COLUMN a2a_card TEXT;
